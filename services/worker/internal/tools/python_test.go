package tools

import (
	"context"
	"errors"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

func needPython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found")
	}
}

// TestPythonStreamsAnInputLargerThanAPipe gives the interpreter an input much larger than
// a pipe's buffer, streamed to its stdin as it reads.
func TestPythonStreamsAnInputLargerThanAPipe(t *testing.T) {
	needPython(t)
	blob := strings.Repeat("é<x>", 1<<18) // 1.25 MB of JSON text with escapes
	out, err := (&Python{}).Run(context.Background(), &Call{
		Config: map[string]any{"code": `result = {"len": len(doc["blob"]), "ok": doc["blob"] == "é<x>" * (1 << 18)}`},
		Input:  map[string]any{"doc": map[string]any{"blob": blob}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := out.(map[string]any)
	if got["len"] != float64(4<<18) || got["ok"] != true {
		t.Fatalf("result %v", got)
	}
}

// TestPythonSeesNoneOfTheWorkersEnvironment: tenant code runs in a process that inherits
// nothing of the worker's configuration (its internal secret signs service principals),
// only PATH and the locale, the step's own env and the command id.
func TestPythonSeesNoneOfTheWorkersEnvironment(t *testing.T) {
	needPython(t)
	t.Setenv("NOETL_INTERNAL_SECRET", "worker-internal-secret-value")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "cloud-secret-value")
	out, err := (&Python{}).Run(context.Background(), &Call{
		CommandID: "c1",
		Config:    map[string]any{"code": `import os; result = {"env": dict(os.environ)}`, "env": map[string]any{"MODE": "test"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	env, _ := out.(map[string]any)["env"].(map[string]any)
	for _, k := range []string{"NOETL_INTERNAL_SECRET", "AWS_SECRET_ACCESS_KEY"} {
		if _, ok := env[k]; ok {
			t.Errorf("the tool's process sees %s", k)
		}
	}
	if env["MODE"] != "test" || env["NOETL_COMMAND_ID"] != "c1" || env["PATH"] == nil {
		t.Errorf("the tool's process lacks its own variables: %v", env)
	}
	for k := range env {
		switch k {
		case "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR", "HOME", "TMPDIR", "MODE", "NOETL_COMMAND_ID", "NOETL_WORKER_ID", "PYTHONUNBUFFERED", "PWD", "SHLVL", "_":
		default:
			// pyenv's python3 shim sets its own PYENV_* variables on the way in.
			if !strings.HasPrefix(k, "LC_") && !strings.HasPrefix(k, "PYENV") && !strings.HasPrefix(k, "_PYENV") {
				t.Errorf("the tool's process sees %s, which it was not given", k)
			}
		}
	}
}

// TestPythonPassEnv: a variable named by NOETL_WORKER_TOOL_ENV reaches the process, and
// the worker's own settings can never be named.
func TestPythonPassEnv(t *testing.T) {
	needPython(t)
	t.Setenv("HTTPS_PROXY", "http://proxy.internal:3128")
	out, err := (&Python{PassEnv: ParsePassEnv(" HTTPS_PROXY ,")}).Run(context.Background(), &Call{
		Config: map[string]any{"code": `import os; result = os.environ.get("HTTPS_PROXY")`},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out != "http://proxy.internal:3128" {
		t.Fatalf("HTTPS_PROXY in the process: %v", out)
	}
	if err := CheckPassEnv("HTTPS_PROXY,noetl_internal_secret"); err == nil || !strings.Contains(err.Error(), `"noetl_internal_secret": the worker's own settings are never passed to tools`) {
		t.Fatalf("CheckPassEnv: %v", err)
	}
	if err := CheckPassEnv("A=B"); err == nil || !strings.Contains(err.Error(), `"A=B" is not an environment variable name`) {
		t.Fatalf("CheckPassEnv: %v", err)
	}
}

// TestPythonInputNotEncodable fails with a clear error when the input has no JSON form.
func TestPythonInputNotEncodable(t *testing.T) {
	needPython(t)
	_, err := (&Python{}).Run(context.Background(), &Call{
		Config: map[string]any{"code": "result = 1"},
		Input:  map[string]any{"x": math.NaN()},
	})
	var te *Error
	if !errors.As(err, &te) || !strings.Contains(te.Msg, "input is not JSON-encodable") {
		t.Fatalf("error %v", err)
	}
}

// TestPythonInterpreterThatReadsNoInput ends (without a result) when the interpreter exits
// before reading a large input: the encoder feeding its stdin is released.
func TestPythonInterpreterThatReadsNoInput(t *testing.T) {
	if _, err := exec.LookPath("true"); err != nil {
		t.Skip("true not found")
	}
	_, err := (&Python{Interpreter: "true"}).Run(context.Background(), &Call{
		Config: map[string]any{"code": "result = 1"},
		Input:  map[string]any{"blob": strings.Repeat("x", 4<<20)},
	})
	var te *Error
	if !errors.As(err, &te) || !strings.Contains(te.Msg, "no result written") {
		t.Fatalf("error %v", err)
	}
}

// pyFail runs code as step start and returns the failure message.
func pyFail(t *testing.T, code string) string {
	t.Helper()
	needPython(t)
	_, err := (&Python{}).Run(context.Background(), &Call{Kind: "python", Step: "start", Config: map[string]any{"code": code}})
	var te *Error
	if !errors.As(err, &te) {
		t.Fatalf("error %v, want a tool error", err)
	}
	// Nothing of the runner shows: not its file, its functions, its statements or the
	// directory it runs in.
	for _, s := range []string{"runner", "_main", "_run", "exec(", "compiled", "scope", "step.py", "noetl-py-", "Traceback", "__noetl", "\n"} {
		if strings.Contains(te.Msg, s) {
			t.Errorf("message %q holds %q", te.Msg, s)
		}
	}
	return te.Msg
}

// TestPythonFailureNamesTheLine reports an exception as the line of the step's code and
// the exception, one line, without the runner's frames.
func TestPythonFailureNamesTheLine(t *testing.T) {
	cases := []struct{ name, code, want string }{
		{"key error on line 2", "d = {}\nx = d['missing']\nresult = x\n",
			"line 2: KeyError: 'missing'"},
		{"nested calls list the code's frames, innermost last", "def inner(d):\n    return d['missing']\n\ndef outer(d):\n    return inner(d)\n\nresult = outer({})\n",
			"line 2: KeyError: 'missing' (traceback: line 7 -> outer line 5 -> inner line 2)"},
		{"syntax error", "x = 1\ny = 2\nz = = 3\n",
			"line 3: SyntaxError: invalid syntax"},
		{"top-level return keeps the line numbers", "x = 1\nif x:\n    return 1 / 0\n",
			"line 3: ZeroDivisionError: division by zero"},
		{"main and a library frame", "import json\n\ndef main():\n    return json.loads('{')\n",
			"line 4: json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"},
		{"step-defined exception, multi-line message", "class Bad(Exception):\n    pass\n\nraise Bad('first\\n  second\\n')\n",
			"line 4: Bad: first second"},
		{"recursion collapses", "def f(n):\n    return f(n + 1)\n\nf(0)\n",
			"line 2: RecursionError: maximum recursion depth exceeded (traceback: line 4 -> f line 2 (x"},
		{"main missing an argument", "def main(x):\n    return x\n",
			"calling main: TypeError: main() missing 1 required positional argument: 'x'"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := pyFail(t, tc.code)
			if strings.HasSuffix(tc.want, "(x") {
				if !strings.HasPrefix(got, tc.want) || !strings.HasSuffix(got, "))") {
					t.Fatalf("message %q, want %q...", got, tc.want)
				}
				return
			}
			if got != tc.want {
				t.Fatalf("message\n %q, want\n %q", got, tc.want)
			}
		})
	}
}

// TestPythonFailureLibs names what the runner was doing when no step frame is involved.
func TestPythonFailureLibs(t *testing.T) {
	needPython(t)
	_, err := (&Python{}).Run(context.Background(), &Call{Step: "load", Config: map[string]any{
		"code": "result = 1", "libs": map[string]any{"np": "no_such_module_noetl"},
	}})
	want := "importing no_such_module_noetl as np (libs): ModuleNotFoundError: No module named 'no_such_module_noetl'"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
	}
}

// TestPythonFailureWithoutReport keeps the interpreter's stderr when the code ends the
// interpreter itself.
func TestPythonFailureWithoutReport(t *testing.T) {
	needPython(t)
	_, err := (&Python{}).Run(context.Background(), &Call{Step: "s", Config: map[string]any{
		"code": "import sys\nprint('to stdout')\nsys.exit('bye from the step')\n",
	}})
	if err == nil || err.Error() != "python: bye from the step" {
		t.Fatalf("error %v", err)
	}
}

// TestPythonTimeout ends a run past its timeout_seconds with a retryable error.
func TestPythonTimeout(t *testing.T) {
	needPython(t)
	_, err := (&Python{}).Run(context.Background(), &Call{Step: "s", Config: map[string]any{
		"code": "import time\ntime.sleep(300)\n", "timeout_seconds": 0.2,
	}})
	var te *Error
	if !errors.As(err, &te) || te.Msg != "python: timed out after 200ms" || !te.Retryable {
		t.Fatalf("error %v", err)
	}
}

// TestFrameChain keeps the outermost and innermost frames of a long chain.
func TestFrameChain(t *testing.T) {
	var frames []pyFrame
	for i := 1; i <= 30; i++ {
		frames = append(frames, pyFrame{Line: i, Name: "f" + strconv.Itoa(i)})
	}
	got := frameChain(frames, 8)
	want := []string{"f1 line 1", "f2 line 2", "... 23 more ...", "f26 line 26", "f27 line 27", "f28 line 28", "f29 line 29", "f30 line 30"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("chain %v, want %v", got, want)
	}
}
