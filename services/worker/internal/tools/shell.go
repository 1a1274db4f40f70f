package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Shell runs a command (kind: shell) in a working directory of its own, created for the
// command and removed afterwards, with the environment of toolEnv (PATH and the locale,
// HOME and TMPDIR in that directory, PassEnv) plus the tool's env: never the worker's own.
// A string command is run by the tool's shell (default /bin/sh -c); a list is the argv of
// a program run without a shell. The result is {exit_code, stdout, stderr}; a non-zero
// exit fails the step with the exit code and the tail of stderr. Cancellation and timeouts
// kill the command's whole process group.
//
// It runs arbitrary code on the worker's machine, so a worker runs it only when Enabled
// (NOETL_WORKER_SHELL=true, or the system pool); otherwise the step fails naming that
// setting.
type Shell struct {
	// Enabled lets this worker run shell commands.
	Enabled bool
	// Timeout bounds a run unless the tool sets timeout_seconds (default 300 s).
	Timeout time.Duration
	// MaxTimeout caps timeout_seconds (default 1 hour).
	MaxTimeout time.Duration
	// MaxOutput bounds each of stdout and stderr kept: their last MaxOutput bytes
	// (default 64 KiB).
	MaxOutput int
	// PassEnv names variables of the worker's environment the command also sees
	// (NOETL_WORKER_TOOL_ENV).
	PassEnv []string
}

// ShellEnableEnv is the worker setting that lets a worker of a pool other than system run
// kind: shell.
const ShellEnableEnv = "NOETL_WORKER_SHELL"

const (
	// defaultShellTimeout is a command's time limit without timeout_seconds.
	defaultShellTimeout = 300 * time.Second
	// defaultShellMaxTimeout caps timeout_seconds.
	defaultShellMaxTimeout = time.Hour
	// shellFailureLines is how many of stderr's last lines a failure message carries.
	shellFailureLines = 10
	// shellFailureBytes bounds the stderr a failure message carries.
	shellFailureBytes = 2000
)

// Run implements Tool.
func (s *Shell) Run(ctx context.Context, c *Call) (any, error) {
	if !s.Enabled {
		return nil, &Error{Msg: fmt.Sprintf("shell: this worker does not run shell commands (they are arbitrary code on its machine): set %s=true on the workers of the step's pool, or run the step on the system pool", ShellEnableEnv)}
	}
	argv, err := s.argv(c.Config)
	if err != nil {
		return nil, err
	}
	timeout, err := s.timeout(c.Config)
	if err != nil {
		return nil, err
	}
	capture := true
	if v, ok := c.Config["capture"]; ok && v != nil {
		b, ok := v.(bool)
		if !ok {
			return nil, &Error{Msg: fmt.Sprintf("shell: capture must be true or false, not %v", v)}
		}
		capture = b
	}
	dir, err := os.MkdirTemp("", "noetl-sh-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	cwd, err := toolCwd("shell", dir, c.Config["cwd"])
	if err != nil {
		return nil, err
	}
	extraEnv, err := toolEnvVars("shell", c.Config["env"])
	if err != nil {
		return nil, err
	}
	env := append(toolEnv(dir, s.PassEnv), extraEnv...)
	env = append(env, "NOETL_COMMAND_ID="+c.CommandID)

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = cwd
	cmd.Env = env
	cmd.Stdin = nil
	max := s.MaxOutput
	if max <= 0 {
		max = 64 << 10
	}
	// Without capture, stdout is discarded and only what a failure message needs of
	// stderr is kept.
	stdout, stderr := &tailBuffer{max: max}, &tailBuffer{max: max}
	cmd.Stdout, cmd.Stderr = io.MultiWriter(stdout, c.Log.Stdout()), io.MultiWriter(stderr, c.Log.Stderr())
	if !capture {
		// The step's logs still get both streams.
		cmd.Stdout = c.Log.Stdout()
		stderr.max = shellFailureBytes
	}
	killTreeOnCancel(cmd)
	cmd.WaitDelay = 2 * time.Second
	runErr := cmd.Run()
	switch ctx.Err() {
	case context.DeadlineExceeded:
		return nil, &Error{Msg: fmt.Sprintf("shell: timed out after %s (timeout_seconds)", timeout), Retryable: true}
	case context.Canceled:
		return nil, &Error{Msg: "shell: cancelled"}
	}
	code := 0
	if runErr != nil {
		var ee *exec.ExitError
		if !errors.As(runErr, &ee) {
			return nil, &Error{Msg: fmt.Sprintf("shell: %s: %v", argv[0], runErr)}
		}
		code = ee.ExitCode()
		msg := fmt.Sprintf("shell: exit code %d", code)
		if code < 0 {
			msg = "shell: " + ee.String()
		}
		if tail := failureTail(stderr.String()); tail != "" {
			msg += ": " + tail
		}
		return nil, &Error{Msg: msg}
	}
	out := map[string]any{"exit_code": code, "stdout": "", "stderr": ""}
	if capture {
		out["stdout"], out["stderr"] = stdout.String(), stderr.String()
	}
	return out, nil
}

// argv turns the tool's command into a program and its arguments: a string is run by the
// shell (shell -c command), a list is the argv itself.
func (s *Shell) argv(cfg map[string]any) ([]string, error) {
	shell := "/bin/sh"
	if v, ok := cfg["shell"]; ok && v != nil {
		sh, ok := v.(string)
		if !ok || strings.TrimSpace(sh) == "" {
			return nil, &Error{Msg: fmt.Sprintf("shell: shell must be the path or name of a shell, not %v", v)}
		}
		shell = strings.TrimSpace(sh)
	}
	switch cmd := cfg["command"].(type) {
	case string:
		if strings.TrimSpace(cmd) == "" {
			return nil, &Error{Msg: "shell: tool.command is empty"}
		}
		return []string{shell, "-c", cmd}, nil
	case []any:
		if len(cmd) == 0 {
			return nil, &Error{Msg: "shell: tool.command is an empty list"}
		}
		argv := make([]string, len(cmd))
		for i, a := range cmd {
			switch a.(type) {
			case map[string]any, []any, nil:
				return nil, &Error{Msg: fmt.Sprintf("shell: tool.command[%d] must be a string, not %v", i, a)}
			}
			argv[i] = scalarText(a)
		}
		if argv[0] == "" {
			return nil, &Error{Msg: "shell: tool.command[0] (the program) is empty"}
		}
		return argv, nil
	case nil:
		return nil, &Error{Msg: "shell: tool.command is required (a string run by the shell, or a list: the program and its arguments)"}
	default:
		return nil, &Error{Msg: fmt.Sprintf("shell: tool.command must be a string or a list, not %T", cmd)}
	}
}

// timeout is the tool's timeout_seconds, or the default, capped at MaxTimeout.
func (s *Shell) timeout(cfg map[string]any) (time.Duration, error) {
	d := s.Timeout
	if d <= 0 {
		d = defaultShellTimeout
	}
	if v, ok := cfg["timeout_seconds"]; ok && v != nil {
		var secs float64
		switch n := v.(type) {
		case float64:
			secs = n
		case int:
			secs = float64(n)
		case int64:
			secs = float64(n)
		default:
			return 0, &Error{Msg: fmt.Sprintf("shell: timeout_seconds must be a number, not %v", v)}
		}
		if secs <= 0 {
			return 0, &Error{Msg: fmt.Sprintf("shell: timeout_seconds must be positive, not %v", v)}
		}
		d = time.Duration(secs * float64(time.Second))
	}
	limit := s.MaxTimeout
	if limit <= 0 {
		limit = defaultShellMaxTimeout
	}
	return min(d, limit), nil
}

// failureTail is the end of a failed command's stderr for its failure message: the last
// lines, bounded.
func failureTail(stderr string) string {
	tail := strings.TrimSpace(lastLines(strings.TrimRight(stderr, "\n"), shellFailureLines))
	if len(tail) > shellFailureBytes {
		tail = "..." + tail[len(tail)-shellFailureBytes:]
	}
	return tail
}

// scalarText renders a rendered config value as text: strings as they are, numbers and
// booleans as JSON writes them.
func scalarText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		if x == float64(int64(x)) {
			return fmt.Sprintf("%d", int64(x))
		}
		return fmt.Sprintf("%v", x)
	default:
		return fmt.Sprintf("%v", x)
	}
}

// toolCwd is the working directory a tool's cwd: names (tool is the kind, for messages):
// a relative path inside the command's working directory dir, made if missing; dir when
// unset.
func toolCwd(tool, dir string, v any) (string, error) {
	if v == nil {
		return dir, nil
	}
	rel, ok := v.(string)
	if !ok {
		return "", &Error{Msg: fmt.Sprintf("%s: cwd must be a string, not %v", tool, v)}
	}
	if rel = strings.TrimSpace(rel); rel == "" || rel == "." {
		return dir, nil
	}
	if !filepath.IsLocal(rel) {
		return "", &Error{Msg: fmt.Sprintf("%s: cwd %q must be a relative path inside the command's working directory (no .., not absolute)", tool, rel)}
	}
	cwd := filepath.Join(dir, rel)
	if err := os.MkdirAll(cwd, 0o700); err != nil {
		return "", &Error{Msg: fmt.Sprintf("%s: cwd: %v", tool, err)}
	}
	return cwd, nil
}

// toolEnvVars turns a tool's env: mapping into NAME=value entries, values as text.
func toolEnvVars(tool string, v any) ([]string, error) {
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, &Error{Msg: tool + ": env must be a mapping of names to values"}
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, &Error{Msg: fmt.Sprintf("%s: env: %q is not an environment variable name", tool, k)}
		}
		out = append(out, k+"="+scalarText(v))
	}
	return out, nil
}
