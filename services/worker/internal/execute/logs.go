package execute

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"unicode/utf8"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/services/worker/internal/scrub"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// Step-log bounds. Each stream of each tool call keeps its last LogTailBytes; the tool's
// Log keeps logGuardBytes more, so that a secret cut by the tail's start is still seen
// whole by the scrubber and dropped (scrub.Tail). A command's entries travel inline in its
// outcome event up to logsInlineBytes of JSON, and by reference beyond.
const (
	// LogTailBytes is how much of each stream (stdout, stderr, diagnostic) of a tool call
	// the step logs keep: its last 64 KiB.
	LogTailBytes  = 64 << 10
	logGuardBytes = 8 << 10
	// logsInlineBytes is the largest encoding of a command's entries carried inline.
	logsInlineBytes = 16 << 10
	// logsFallbackBytes is what each stream keeps inline when the resultstore could not
	// take entries too large to travel inline.
	logsFallbackBytes = 2 << 10
)

// commandLogs collects the Logs of one command's tool calls, in the order they ran.
type commandLogs struct {
	mu    sync.Mutex
	calls []toolLog
}

type toolLog struct {
	tool string
	log  *tools.Log
}

// logsKey carries the running command's commandLogs in a context.
type logsKey struct{}

// withLogs gives ctx a collector for the logs of the command it runs.
func withLogs(ctx context.Context) (context.Context, *commandLogs) {
	l := &commandLogs{}
	return context.WithValue(ctx, logsKey{}, l), l
}

// toolLogOf returns a new Log for one tool call of the command ctx runs (nil, which
// discards, outside Execute).
func toolLogOf(ctx context.Context, tc *eventv1.ToolCall) *tools.Log {
	l, _ := ctx.Value(logsKey{}).(*commandLogs)
	if l == nil {
		return nil
	}
	name := tc.GetLabel()
	if name == "" {
		name = tc.GetKind()
	}
	tl := tools.NewLog(LogTailBytes + logGuardBytes)
	l.mu.Lock()
	l.calls = append(l.calls, toolLog{tool: name, log: tl})
	l.mu.Unlock()
	return tl
}

// entries returns what the tool calls wrote, each stream scrubbed of the command's
// secrets and cut to its last LogTailBytes.
func (l *commandLogs) entries(sc *scrub.Scrubber) []domain.LogText {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []domain.LogText
	for _, c := range l.calls {
		for _, s := range c.log.Streams() {
			from := 0
			if over := len(s.Tail) - LogTailBytes; over > 0 {
				from = over
			}
			if int64(len(s.Tail)) < s.Total {
				// The tool's Log already dropped the stream's head: a secret may be cut at
				// the tail's start, which Tail drops.
				from = max(from, 1)
			}
			text := sc.Tail(string(s.Tail), from)
			out = append(out, domain.LogText{Tool: c.tool, Stream: s.Name, Text: strings.ToValidUTF8(text, "\uFFFD"), Truncated: from > 0, Bytes: s.Total})
		}
	}
	return out
}

// attachLogs puts the command's logs into the payload of its outcome event
// (command.completed or command.failed, the last event), under domain.LogsKey: inline when small,
// else stored in the resultstore next to the command's result and carried by reference.
// The text is scrubbed here, before it is stored; ScrubEvents scrubs the payload again.
func (e *Executor) attachLogs(ctx context.Context, cmd *eventv1.Command, evs []*eventv1.Event, l *commandLogs, sc *scrub.Scrubber) []*eventv1.Event {
	if len(evs) == 0 {
		return evs
	}
	entries := l.entries(sc)
	if len(entries) == 0 {
		return evs
	}
	ev := evs[len(evs)-1]
	payload := map[string]json.RawMessage{}
	if p := ev.GetPayloadJson(); len(p) > 0 {
		if err := json.Unmarshal(p, &payload); err != nil {
			return evs // not an object: nothing can be added to it
		}
	}
	logs := domain.CommandLogs{Entries: entries}
	body, err := json.Marshal(entries)
	if err != nil {
		return evs
	}
	if len(body) > logsInlineBytes {
		if ref, err := e.Results.PutLogs(ctx, cmd, body); err == nil {
			logs = domain.CommandLogs{Ref: ref.GetUri(), Bytes: ref.GetSize()}
		} else {
			e.log().Warn("step logs not stored; their ends travel inline", slog.String("execution_id", cmd.GetExecutionId()), slog.String("step", cmd.GetStep()), slog.String("error", sc.String(err.Error())))
			for i := range logs.Entries {
				entry := &logs.Entries[i]
				if len(entry.Text) > logsFallbackBytes {
					cut := len(entry.Text) - logsFallbackBytes
					for cut < len(entry.Text) && !utf8.RuneStart(entry.Text[cut]) {
						cut++
					}
					entry.Text, entry.Truncated = entry.Text[cut:], true
				}
			}
		}
	}
	b, err := json.Marshal(logs)
	if err != nil {
		return evs
	}
	payload[domain.LogsKey] = b
	if p, err := json.Marshal(payload); err == nil {
		ev.PayloadJson = p
	}
	return evs
}

// log returns the executor's logger (a discarding one when it has none).
func (e *Executor) log() *slog.Logger {
	if e.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Log
}
