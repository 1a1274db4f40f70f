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
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/noetl/noetl/internal/tabular"
)

//go:embed runner.py
var runnerSource string

// Python runs the step's code in a python3 subprocess. Inputs become top-level variables
// (and the dicts input_data and args); the code assigns result. The result travels back
// through a file, never through stdout, so prints cannot corrupt it. A failure of the code
// is reported as one line naming the step, the line in the code and the exception (see
// pyFailure.format).
type Python struct {
	// Interpreter is the python executable (default python3).
	Interpreter string
	// Timeout bounds a run unless the tool sets timeout_seconds (default 5 minutes).
	Timeout time.Duration
	// MaxOutput bounds the captured stdout/stderr kept for errors (default 64 KiB).
	MaxOutput int
	// PassEnv names variables of the worker's environment the process also sees, beside
	// inheritedEnv (NOETL_WORKER_TOOL_ENV: a proxy, a PYTHONPATH).
	PassEnv []string
	// WorkerID is the worker's id, given to the process as NOETL_WORKER_ID.
	WorkerID string
	// ScriptDir is the directory script: paths are read from (NOETL_WORKER_SCRIPT_DIR);
	// empty: file scripts are refused.
	ScriptDir string
	// HTTP fetches script: URLs, under its egress policy (nil: refused).
	HTTP *HTTP
}

// Run implements Tool.
func (p *Python) Run(ctx context.Context, c *Call) (any, error) {
	code, err := p.pythonCode(ctx, c)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(code) == "" {
		return nil, &Error{Msg: "python: tool.code (or script) is required"}
	}
	libs, err := pythonLibs(c.Config["libs"])
	if err != nil {
		return nil, err
	}
	extraEnv, err := toolEnvVars("python", c.Config["env"])
	if err != nil {
		return nil, err
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
	errorFile := filepath.Join(dir, "error.json")
	if err := os.WriteFile(runner, []byte(runnerSource), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(userCode, []byte(code), 0o600); err != nil {
		return nil, err
	}
	cwd, err := toolCwd("python", dir, c.Config["cwd"])
	if err != nil {
		return nil, err
	}
	input := c.Input
	if input == nil {
		input = map[string]any{}
	}
	// The input is encoded as the interpreter reads it, never held whole a second time.
	stdin, feed := io.Pipe()
	encoded := make(chan error, 1)
	go func() {
		_, err := tabular.WriteJSON(feed, map[string]any{"input": input, "libs": libs})
		_ = feed.CloseWithError(err)
		encoded <- err
	}()
	defer func() { _ = stdin.Close() }()
	cmd := exec.CommandContext(ctx, interp, runner, userCode, resultFile, errorFile)
	cmd.Stdin = stdin
	cmd.Dir = cwd
	env := append(toolEnv(dir, p.PassEnv), extraEnv...)
	env = append(env, "NOETL_COMMAND_ID="+c.CommandID, "NOETL_WORKER_ID="+p.WorkerID, "PYTHONUNBUFFERED=1")
	cmd.Env = env
	max := p.MaxOutput
	if max <= 0 {
		max = 64 << 10
	}
	stdout := &tailBuffer{max: max}
	stderr := &tailBuffer{max: max}
	cmd.Stdout = io.MultiWriter(stdout, c.Log.Stdout())
	cmd.Stderr = io.MultiWriter(stderr, c.Log.Stderr())
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
		if f, ok := readFailure(errorFile); ok {
			return nil, &Error{Msg: f.format()}
		}
		// No failure report: the interpreter itself failed (or the code ended it), and
		// its stderr is all there is.
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

// pyFailure is the report the runner writes when the step's code fails: the exception and
// the code's own frames, outermost first (the runner's frames are never among them).
type pyFailure struct {
	Type    string    `json:"type"`
	Message string    `json:"message"`
	Frames  []pyFrame `json:"frames"`
	// During names what the runner was doing when no frame of the code was involved
	// (importing libs, calling main, writing the result).
	During string `json:"during"`
}

// pyFrame is one frame of the step's code; Name is empty at the code's top level.
type pyFrame struct {
	Line int    `json:"line"`
	Name string `json:"name"`
}

const (
	// maxFailureText bounds the exception text kept in a failure message.
	maxFailureText = 1000
	// maxFailureFrames bounds the frames a failure message lists.
	maxFailureFrames = 16
)

func readFailure(path string) (*pyFailure, bool) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	var f pyFailure
	if err := json.Unmarshal(raw, &f); err != nil || f.Type == "" {
		return nil, false
	}
	return &f, true
}

// format renders the failure as one line: the innermost position in the step's code, the
// exception, and with more than one frame the chain of the code's frames, innermost last.
// The worker puts the step and tool in front ("step start: tool python: "):
//
//	line 2: KeyError: 'missing'
//	line 2: KeyError: 'missing' (traceback: line 5 -> outer line 4 -> inner line 2)
//	calling main: TypeError: main() missing 1 required positional argument: 'x'
func (f *pyFailure) format() string {
	var b strings.Builder
	if n := len(f.Frames); n > 0 {
		b.WriteString("line " + strconv.Itoa(f.Frames[n-1].Line) + ": ")
	} else if f.During != "" {
		b.WriteString(f.During + ": ")
	}
	b.WriteString(f.Type)
	if text := oneLine(f.Message, maxFailureText); text != "" {
		b.WriteString(": " + text)
	}
	if len(f.Frames) > 1 {
		b.WriteString(" (traceback: " + strings.Join(frameChain(f.Frames, maxFailureFrames), " -> ") + ")")
	}
	return b.String()
}

// frameChain names the frames, a run of the same frame (recursion) once with its count, and
// keeps the outermost and innermost of a longer chain than max.
func frameChain(frames []pyFrame, max int) []string {
	var parts []string
	for i := 0; i < len(frames); {
		j := i + 1
		for j < len(frames) && frames[j] == frames[i] {
			j++
		}
		part := "line " + strconv.Itoa(frames[i].Line)
		if frames[i].Name != "" {
			part = frames[i].Name + " " + part
		}
		if j-i > 1 {
			part += " (x" + strconv.Itoa(j-i) + ")"
		}
		parts = append(parts, part)
		i = j
	}
	if len(parts) > max {
		head, tail := max/4, max-max/4-1
		skipped := len(parts) - head - tail
		parts = append(append(parts[:head:head], "... "+strconv.Itoa(skipped)+" more ..."), parts[len(parts)-tail:]...)
	}
	return parts
}

// oneLine joins the non-blank lines of s with spaces and cuts the result to max bytes.
func oneLine(s string, max int) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	s = strings.Join(lines, " ")
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
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

// inheritedEnv are the variables of the worker's environment a tool's process sees: what
// a program needs to find its executables and speak the locale, nothing that configures
// the worker. The worker's own settings hold its secrets (NOETL_INTERNAL_SECRET signs
// service principals; a credential may sit in any variable), and tenant code must never
// read them.
var inheritedEnv = []string{"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR"}

// toolEnv is the environment of a tool's process run in dir: inheritedEnv and pass from
// the worker's, with HOME and TMPDIR in dir.
func toolEnv(dir string, pass []string) []string {
	env := make([]string, 0, len(inheritedEnv)+len(pass)+2)
	for _, k := range append(slices.Clip(inheritedEnv), pass...) {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, "HOME="+dir, "TMPDIR="+dir)
}

// ParsePassEnv splits NOETL_WORKER_TOOL_ENV's comma-separated names (checked by
// CheckPassEnv).
func ParsePassEnv(s string) []string {
	var out []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// CheckPassEnv refuses a name that is not an environment variable name, and any of the
// worker's own settings (NOETL_*), which hold its secrets.
func CheckPassEnv(s string) error {
	for _, n := range ParsePassEnv(s) {
		if strings.HasPrefix(strings.ToUpper(n), "NOETL_") {
			return fmt.Errorf("%q: the worker's own settings are never passed to tools", n)
		}
		for i, r := range n {
			if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
				return fmt.Errorf("%q is not an environment variable name", n)
			}
		}
	}
	return nil
}

// pythonLibs checks a python tool's legacy libs: mapping, NoETL's imports: {alias:
// module} imports module as alias, {alias: {from: module, import: name}} imports name
// from module as alias. The runner does the imports.
func pythonLibs(v any) (map[string]any, error) {
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, &Error{Msg: fmt.Sprintf("python: libs must be a mapping of aliases to modules ({alias: module} or {alias: {from: module, import: name}}), not %T", v)}
	}
	for alias, spec := range m {
		if !pythonName(alias) {
			return nil, &Error{Msg: fmt.Sprintf("python: libs: %q is not a python name", alias)}
		}
		bad := &Error{Msg: fmt.Sprintf("python: libs.%s: want a module name or {from: module, import: name}", alias)}
		switch x := spec.(type) {
		case string:
			if strings.TrimSpace(x) == "" {
				return nil, bad
			}
		case map[string]any:
			from, _ := x["from"].(string)
			name, _ := x["import"].(string)
			if strings.TrimSpace(from) == "" || strings.TrimSpace(name) == "" {
				return nil, bad
			}
		default:
			return nil, bad
		}
	}
	return m, nil
}

// pythonName reports whether s is a python identifier (ASCII).
func pythonName(s string) bool {
	for i, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return s != ""
}
