package tools

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/noetl/noetl/internal/tabular"
)

//go:embed runner.py
var runnerSource string

// Python runs the step's code in a python3 subprocess. Inputs become top-level variables
// (and the dicts input_data and args); the code assigns result. The result travels back
// through a file, never through stdout, so prints cannot corrupt it.
type Python struct {
	// Interpreter is the python executable (default python3).
	Interpreter string
	// Timeout bounds a run unless the tool sets timeout_seconds (default 5 minutes).
	Timeout time.Duration
	// MaxOutput bounds the captured stdout/stderr kept for errors (default 64 KiB).
	MaxOutput int
}

// Run implements Tool.
func (p *Python) Run(ctx context.Context, c *Call) (any, error) {
	code, _ := c.Config["code"].(string)
	if strings.TrimSpace(code) == "" {
		return nil, &Error{Msg: "python: tool.code is required"}
	}
	interp := p.Interpreter
	if v, ok := c.Config["python"].(string); ok && v != "" {
		interp = v
	}
	if interp == "" {
		interp = "python3"
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	if v, ok := c.Config["timeout_seconds"].(float64); ok && v > 0 {
		timeout = time.Duration(v * float64(time.Second))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	dir, err := os.MkdirTemp("", "noetl-py-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	runner := filepath.Join(dir, "runner.py")
	userCode := filepath.Join(dir, "step.py")
	resultFile := filepath.Join(dir, "result.json")
	if err := os.WriteFile(runner, []byte(runnerSource), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(userCode, []byte(code), 0o600); err != nil {
		return nil, err
	}
	input := c.Input
	if input == nil {
		input = map[string]any{}
	}
	libs, _ := c.Config["libs"].(map[string]any)
	// The input is encoded as the interpreter reads it, never held whole a second time.
	stdin, feed := io.Pipe()
	encoded := make(chan error, 1)
	go func() {
		_, err := tabular.WriteJSON(feed, map[string]any{"input": input, "libs": libs})
		_ = feed.CloseWithError(err)
		encoded <- err
	}()
	defer func() { _ = stdin.Close() }()
	cmd := exec.CommandContext(ctx, interp, runner, userCode, resultFile)
	cmd.Stdin = stdin
	cmd.Dir = dir
	env := os.Environ()
	if e, ok := c.Config["env"].(map[string]any); ok {
		for k, v := range e {
			env = append(env, fmt.Sprintf("%s=%v", k, v))
		}
	}
	env = append(env, "NOETL_COMMAND_ID="+c.CommandID, "PYTHONUNBUFFERED=1")
	cmd.Env = env
	max := p.MaxOutput
	if max <= 0 {
		max = 64 << 10
	}
	stdout := &tailBuffer{max: max}
	stderr := &tailBuffer{max: max}
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	// Cancellation and timeouts kill the interpreter and the children the code started.
	killTreeOnCancel(cmd)
	cmd.WaitDelay = 2 * time.Second
	runErr := cmd.Run()
	_ = stdin.Close()
	if err := <-encoded; err != nil && !errors.Is(err, io.ErrClosedPipe) {
		return nil, &Error{Msg: "python: input is not JSON-encodable: " + err.Error()}
	}
	if err := runErr; err != nil {
		switch ctx.Err() {
		case context.DeadlineExceeded:
			return nil, &Error{Msg: fmt.Sprintf("python: timed out after %s", timeout), Retryable: true}
		case context.Canceled:
			return nil, &Error{Msg: "python: cancelled"}
		}
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, &Error{Msg: "python: " + lastLines(msg, 20)}
	}
	raw, err := os.ReadFile(resultFile)
	if err != nil {
		return nil, &Error{Msg: "python: no result written: " + err.Error()}
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, &Error{Msg: "python: result is not JSON: " + err.Error()}
	}
	return out, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.buf) }
