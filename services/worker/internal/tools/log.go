package tools

import (
	"fmt"
	"io"
	"sync"
)

// Names of the streams a Log holds, as the step logs name them.
const (
	// StreamStdout is what the tool's process wrote to its standard output.
	StreamStdout = "stdout"
	// StreamStderr is what the tool's process wrote to its standard error.
	StreamStderr = "stderr"
	// StreamDiagnostic is the lines the tool itself adds about the call (an HTTP request's
	// method, URL and status; a SQL script's statements and rows).
	StreamDiagnostic = "diagnostic"
)

// streams lists the stream names in the order Streams returns them.
var streams = [...]string{StreamStdout, StreamStderr, StreamDiagnostic}

// Log collects what one tool call writes: the last bytes of its stdout, its stderr and
// its diagnostic lines, each bounded, with the total each stream wrote. The worker gives
// every call its own Log (Call.Log) and carries the text, scrubbed and cut to the step-log
// bound, in the command's outcome event. A nil *Log discards everything; all methods are
// safe for concurrent use (a process's two streams are copied by two goroutines).
type Log struct {
	mu   sync.Mutex
	keep int
	tail [len(streams)]logTail
}

// logTail is the kept end of one stream.
type logTail struct {
	buf   []byte
	total int64
}

// NewLog returns a log that keeps the last keep bytes of each stream.
func NewLog(keep int) *Log { return &Log{keep: max(keep, 1)} }

// Stream is what one stream of a Log holds.
type Stream struct {
	// Name is StreamStdout, StreamStderr or StreamDiagnostic.
	Name string
	// Tail is the stream's last bytes (all of them when Total is no more than its length).
	Tail []byte
	// Total is how many bytes the stream wrote.
	Total int64
}

// Stdout is the writer of the process's standard output (io.Discard for a nil Log).
func (l *Log) Stdout() io.Writer { return l.writer(0) }

// Stderr is the writer of the process's standard error (io.Discard for a nil Log).
func (l *Log) Stderr() io.Writer { return l.writer(1) }

// Diagnostic adds one line to the diagnostic stream.
func (l *Log) Diagnostic(format string, args ...any) {
	if l == nil {
		return
	}
	l.write(2, []byte(fmt.Sprintf(format, args...)+"\n"))
}

// Streams returns the streams that were written to, in the order stdout, stderr,
// diagnostic.
func (l *Log) Streams() []Stream {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Stream
	for i, t := range l.tail {
		if t.total > 0 {
			b := t.buf
			if len(b) > l.keep {
				b = b[len(b)-l.keep:]
			}
			out = append(out, Stream{Name: streams[i], Tail: append([]byte(nil), b...), Total: t.total})
		}
	}
	return out
}

func (l *Log) writer(i int) io.Writer {
	if l == nil {
		return io.Discard
	}
	return streamWriter{l, i}
}

func (l *Log) write(i int, p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := &l.tail[i]
	t.total += int64(len(p))
	if len(p) >= l.keep {
		t.buf = append(t.buf[:0], p[len(p)-l.keep:]...)
		return
	}
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*l.keep {
		// Compact only past twice the bound: each byte is moved at most once on average.
		t.buf = t.buf[:copy(t.buf, t.buf[len(t.buf)-l.keep:])]
	}
}

// streamWriter writes one stream of a Log.
type streamWriter struct {
	l *Log
	i int
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.l.write(w.i, p)
	return len(p), nil
}
