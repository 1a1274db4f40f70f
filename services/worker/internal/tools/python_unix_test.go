//go:build unix

package tools

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestPythonCancelKillsTheGroup cancels a run whose code started a child: the child goes
// with the interpreter. The child holds the write end of a FIFO, so its end shows as EOF.
func TestPythonCancelKillsTheGroup(t *testing.T) {
	needPython(t)
	fifo := filepath.Join(t.TempDir(), "child")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("mkfifo:", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := (&Python{}).Run(ctx, &Call{Step: "s", Input: map[string]any{"fifo": fifo}, Config: map[string]any{
			"code": "import subprocess, sys, time\n" +
				"child = 'import sys, time\\nf = open(sys.argv[1], \"w\")\\nf.write(\"ready\\\\n\")\\nf.flush()\\ntime.sleep(300)\\n'\n" +
				"subprocess.Popen([sys.executable, '-c', child, fifo])\n" +
				"time.sleep(300)\n",
		}})
		done <- err
	}()
	opened := make(chan *os.File, 1)
	go func() {
		f, err := os.Open(fifo) // blocks until the child opens it for writing
		if err != nil {
			t.Error(err)
		}
		opened <- f
	}()
	var f *os.File
	select {
	case f = <-opened:
	case err := <-done:
		t.Fatalf("run ended before the child started: %v", err)
	}
	if f == nil {
		t.FailNow()
	}
	defer func() { _ = f.Close() }()
	r := bufio.NewReader(f)
	if line, err := r.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("child said %q, %v", line, err)
	}
	cancel()
	var te *Error
	if err := <-done; !errors.As(err, &te) || te.Msg != "python: cancelled" {
		t.Fatalf("error %v", err)
	}
	_ = f.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("child still holds the FIFO: %v", err)
	}
}
