//go:build unix

package tools

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func runShell(ctx context.Context, s *Shell, cfg map[string]any) (map[string]any, error) {
	out, err := s.Run(ctx, &Call{Kind: "shell", Step: "s", CommandID: "c1", Config: cfg})
	m, _ := out.(map[string]any)
	return m, err
}

func TestShellRunsACommand(t *testing.T) {
	t.Parallel()
	on := &Shell{Enabled: true}
	for _, tc := range []struct {
		name   string
		cfg    map[string]any
		stdout string
		stderr string
	}{
		{"string by /bin/sh", map[string]any{"command": "echo hello; echo warn >&2"}, "hello\n", "warn\n"},
		{"list is argv without a shell", map[string]any{"command": []any{"printf", "%s|%s", "a b; echo no", float64(1)}}, "a b; echo no|1", ""},
		{"another shell", map[string]any{"shell": "sh", "command": "printf '%s' \"$0\""}, "sh", ""},
		{"env", map[string]any{"command": "printf '%s %s' \"$GREETING\" \"$N\"", "env": map[string]any{"GREETING": "hi", "N": float64(3)}}, "hi 3", ""},
		{"no capture", map[string]any{"command": "echo hidden; echo hidden >&2", "capture": false}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := runShell(context.Background(), on, tc.cfg)
			require.NoError(t, err)
			require.Equal(t, map[string]any{"exit_code": 0, "stdout": tc.stdout, "stderr": tc.stderr}, out)
		})
	}
}

func TestShellNonZeroExitFailsWithTheCodeAndStderrTail(t *testing.T) {
	t.Parallel()
	cmd := "echo out; for i in $(seq 1 30); do echo noise$i >&2; done; echo 'it broke' >&2; exit 3"
	_, err := runShell(context.Background(), &Shell{Enabled: true}, map[string]any{"command": cmd})
	var te *Error
	require.True(t, errors.As(err, &te), "%v", err)
	require.True(t, strings.HasPrefix(te.Msg, "shell: exit code 3: "), te.Msg)
	require.True(t, strings.HasSuffix(te.Msg, "noise30\nit broke"), te.Msg)
	require.NotContains(t, te.Msg, "noise20\n", "only the tail of stderr")
	require.False(t, te.Retryable)

	// Without capture the failure still names the tail of stderr.
	_, err = runShell(context.Background(), &Shell{Enabled: true}, map[string]any{"command": "echo why >&2; exit 7", "capture": false})
	require.EqualError(t, err, "shell: exit code 7: why")
}

func TestShellIsOffUnlessEnabled(t *testing.T) {
	t.Parallel()
	_, err := runShell(context.Background(), &Shell{}, map[string]any{"command": "echo hi"})
	require.ErrorContains(t, err, "set NOETL_WORKER_SHELL=true")
	require.ErrorContains(t, err, "system pool")
}

func TestShellRefusesBadConfig(t *testing.T) {
	t.Parallel()
	on := &Shell{Enabled: true}
	for _, tc := range []struct {
		name string
		cfg  map[string]any
		msg  string
	}{
		{"cwd escapes", map[string]any{"command": "pwd", "cwd": "../.."}, `cwd "../.." must be a relative path inside the command's working directory`},
		{"cwd escapes midway", map[string]any{"command": "pwd", "cwd": "a/../../b"}, `cwd "a/../../b" must be a relative path`},
		{"cwd absolute", map[string]any{"command": "pwd", "cwd": "/etc"}, `cwd "/etc" must be a relative path`},
		{"no command", map[string]any{}, "tool.command is required"},
		{"empty list", map[string]any{"command": []any{}}, "tool.command is an empty list"},
		{"nested list", map[string]any{"command": []any{"ls", []any{"x"}}}, "tool.command[1] must be a string"},
		{"bad timeout", map[string]any{"command": "true", "timeout_seconds": "soon"}, "timeout_seconds must be a number"},
		{"bad env", map[string]any{"command": "true", "env": map[string]any{"A=B": "x"}}, `env: "A=B" is not an environment variable name`},
		{"bad capture", map[string]any{"command": "true", "capture": "yes"}, "capture must be true or false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := runShell(context.Background(), on, tc.cfg)
			require.ErrorContains(t, err, tc.msg)
		})
	}
}

// The command runs in a directory of its own (cwd inside it), removed afterwards.
func TestShellWorkingDirectoryIsPrivateAndRemoved(t *testing.T) {
	t.Parallel()
	out, err := runShell(context.Background(), &Shell{Enabled: true}, map[string]any{"command": "pwd; echo x > f; printf '%s' \"$HOME\" >&2", "cwd": "sub/dir"})
	require.NoError(t, err)
	cwd := strings.TrimSpace(out["stdout"].(string))
	home := out["stderr"].(string)
	require.Equal(t, filepath.Join(home, "sub", "dir"), cwd)
	_, err = os.Stat(home)
	require.True(t, os.IsNotExist(err), "the working directory %s is removed: %v", home, err)
}

// The command sees PATH, the locale, HOME/TMPDIR and its env, never the worker's other
// variables (they hold its secrets).
func TestShellDoesNotInheritTheWorkersEnvironment(t *testing.T) {
	t.Setenv("NOETL_INTERNAL_SECRET", "worker-secret")
	t.Setenv("SOME_CREDENTIAL", "hunter2")
	t.Setenv("PASSED_ON", "yes")
	out, err := runShell(context.Background(), &Shell{Enabled: true, PassEnv: []string{"PASSED_ON"}}, map[string]any{"command": "env", "env": map[string]any{"MINE": "1"}})
	require.NoError(t, err)
	env := out["stdout"].(string)
	require.NotContains(t, env, "worker-secret")
	require.NotContains(t, env, "hunter2")
	require.Contains(t, env, "PATH=")
	require.Contains(t, env, "PASSED_ON=yes")
	require.Contains(t, env, "MINE=1")
	require.Contains(t, env, "NOETL_COMMAND_ID=c1")
}

// startGrandchild runs a command whose grandchild holds the write end of a FIFO, and
// returns the reader once the grandchild opened it (its end shows as EOF) and the channel
// of the run's error.
func startGrandchild(t *testing.T, ctx context.Context, timeout float64) (*bufio.Reader, <-chan error) {
	t.Helper()
	fifo := filepath.Join(t.TempDir(), "grandchild")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("mkfifo:", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := runShell(ctx, &Shell{Enabled: true}, map[string]any{
			// The background sh is the child, the sleep its own child: the grandchild.
			// Both hold the FIFO, opened once, while they live.
			"command":         `sh -c 'exec > "$FIFO"; echo ready; sleep 300; true' & wait`,
			"env":             map[string]any{"FIFO": fifo},
			"timeout_seconds": timeout,
		})
		done <- err
	}()
	opened := make(chan *os.File, 1)
	go func() {
		f, err := os.Open(fifo) // blocks until the grandchild opens it for writing
		if err != nil {
			t.Error(err)
		}
		opened <- f
	}()
	var f *os.File
	select {
	case f = <-opened:
	case err := <-done:
		t.Fatalf("run ended before the grandchild started: %v", err)
	}
	if f == nil {
		t.FailNow()
	}
	t.Cleanup(func() { _ = f.Close() })
	_ = f.SetReadDeadline(time.Now().Add(60 * time.Second))
	r := bufio.NewReader(f)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	return r, done
}

// requireGone reads the FIFO to its end: EOF once every writer, the grandchild, is dead.
func requireGone(t *testing.T, r *bufio.Reader) {
	t.Helper()
	_, err := r.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the grandchild still holds the FIFO")
}

func TestShellTimeoutKillsTheProcessGroup(t *testing.T) {
	t.Parallel()
	r, done := startGrandchild(t, context.Background(), 1)
	err := <-done
	var te *Error
	require.True(t, errors.As(err, &te), "%v", err)
	require.Equal(t, "shell: timed out after 1s (timeout_seconds)", te.Msg)
	require.True(t, te.Retryable)
	requireGone(t, r)
}

func TestShellCancelKillsTheProcessGroup(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, done := startGrandchild(t, ctx, 300)
	cancel()
	require.EqualError(t, <-done, "shell: cancelled")
	requireGone(t, r)
}

func TestShellTimeoutIsCapped(t *testing.T) {
	t.Parallel()
	s := &Shell{MaxTimeout: time.Minute}
	d, err := s.timeout(map[string]any{"timeout_seconds": float64(99999)})
	require.NoError(t, err)
	require.Equal(t, time.Minute, d)
	d, err = (&Shell{}).timeout(map[string]any{})
	require.NoError(t, err)
	require.Equal(t, 300*time.Second, d)
}
