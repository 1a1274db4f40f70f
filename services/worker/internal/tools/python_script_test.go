package tools

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// runPython runs cfg with p and returns the result or the error.
func runPython(t *testing.T, p *Python, cfg map[string]any) (any, error) {
	t.Helper()
	return p.Run(context.Background(), &Call{Config: cfg, Input: map[string]any{"n": 20}})
}

// A script: of the worker's script directory runs as code would; a path outside it (by
// .., an absolute path or a symbolic link), a missing file and a worker without a script
// directory are refused, naming the path.
func TestPythonScriptFromTheScriptDirectory(t *testing.T) {
	t.Parallel()
	needPython(t)
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "jobs"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "jobs", "double.py"), []byte("result = {'doubled': n * 2}\n"), 0o600))
	outside := filepath.Join(t.TempDir(), "secret.py")
	require.NoError(t, os.WriteFile(outside, []byte("result = 'outside'\n"), 0o600))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "link.py")))
	p := &Python{ScriptDir: dir}

	for _, script := range []any{"jobs/double.py", "./jobs/double.py", map[string]any{"path": "jobs/double.py", "source": map[string]any{"type": "file"}}} {
		out, err := runPython(t, p, map[string]any{"script": script, "code": "result = 'the script wins'"})
		require.NoError(t, err, "%v", script)
		require.Equal(t, map[string]any{"doubled": float64(40)}, out, "%v", script)
	}
	for script, want := range map[string]string{
		"../secret.py": "must be a relative path inside the worker's script directory",
		outside:        "must be a relative path inside the worker's script directory",
		"link.py":      `python: script "link.py": `,
		"jobs/gone.py": `python: script "jobs/gone.py" not found in the worker's script directory`,
		"gs://b/x.py":  "script.source.type gcs is not supported",
		"s3://b/x.py":  "script.source.type s3 is not supported",
		"ftp://h/x.py": "python: script \"ftp://h/x.py\"",
	} {
		_, err := runPython(t, p, map[string]any{"script": script})
		require.ErrorContains(t, err, want, script)
	}
	_, err := runPython(t, &Python{}, map[string]any{"script": "jobs/double.py"})
	require.ErrorContains(t, err, "this worker has no script directory (NOETL_WORKER_SCRIPT_DIR)")
	_, err = runPython(t, p, map[string]any{"script": map[string]any{"source": map[string]any{"type": "file"}}})
	require.ErrorContains(t, err, "python: script.path is required")
	_, err = runPython(t, p, map[string]any{"script": 7.0})
	require.ErrorContains(t, err, "python: script must be a path, a URL or a mapping")
}

// A script: URL is fetched through the http tool's transport: the egress policy refuses a
// loopback server under the public policy before any request is sent, and lets it through
// under the loopback policy (with the source's headers); an answer other than 2xx fails
// the step naming the status.
func TestPythonScriptOverHTTP(t *testing.T) {
	t.Parallel()
	needPython(t)
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		switch r.URL.Path {
		case "/job.py":
			if r.Header.Get("Authorization") != "Bearer t0k3n" {
				http.Error(w, "who are you", http.StatusUnauthorized)
				return
			}
			_, _ = w.Write([]byte("result = {'fetched': n + 1}\n"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	script := map[string]any{"path": "job.py", "source": map[string]any{"type": "http", "endpoint": srv.URL + "/job.py", "headers": map[string]any{"Authorization": "Bearer t0k3n"}}}

	_, err := runPython(t, &Python{HTTP: &HTTP{Egress: EgressPublic}}, map[string]any{"script": script})
	require.ErrorContains(t, err, "python: script: GET "+srv.URL+"/job.py")
	require.EqualValues(t, 0, requests.Load(), "refused before any packet")

	p := &Python{HTTP: &HTTP{Egress: EgressLoopback}}
	out, err := runPython(t, p, map[string]any{"script": script})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"fetched": float64(21)}, out)

	_, err = runPython(t, p, map[string]any{"script": srv.URL + "/job.py"})
	require.ErrorContains(t, err, "python: script: GET "+srv.URL+"/job.py answered 401 Unauthorized")
	_, err = runPython(t, p, map[string]any{"script": srv.URL + "/missing.py"})
	require.ErrorContains(t, err, "answered 404 Not Found")
	_, err = runPython(t, p, map[string]any{"script": map[string]any{"path": srv.URL + "/job.py", "source": map[string]any{"method": "POST"}}})
	require.ErrorContains(t, err, `script.source.method "POST": a script is fetched with GET`)
}

// code_b64 (and code_base64) carry the code base64-encoded; they come before code.
func TestPythonCodeBase64(t *testing.T) {
	t.Parallel()
	needPython(t)
	enc := base64.StdEncoding.EncodeToString([]byte("result = n * 3\n"))
	for _, k := range []string{"code_b64", "code_base64"} {
		out, err := runPython(t, &Python{}, map[string]any{k: enc, "code": "result = 0"})
		require.NoError(t, err, k)
		require.Equal(t, float64(60), out, k)
	}
	_, err := runPython(t, &Python{}, map[string]any{"code_b64": "!!not base64"})
	require.ErrorContains(t, err, "python: code_b64 is not base64")
}

// cwd is a directory inside the command's working directory, made if missing; one
// outside it is refused.
func TestPythonCwd(t *testing.T) {
	t.Parallel()
	needPython(t)
	out, err := runPython(t, &Python{}, map[string]any{"cwd": "work/out", "code": "import os\nopen('f.txt', 'w').write('x')\nresult = os.getcwd()"})
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(out.(string), string(filepath.Separator)+filepath.Join("work", "out")), "%v", out)
	for _, cwd := range []any{"../up", "/etc", 3.0} {
		_, err := runPython(t, &Python{}, map[string]any{"cwd": cwd, "code": "result = 1"})
		require.ErrorContains(t, err, "python: cwd", "%v", cwd)
	}
}

// env values reach the process as text; a name that cannot be an environment variable is
// refused.
func TestPythonEnv(t *testing.T) {
	t.Parallel()
	needPython(t)
	out, err := runPython(t, &Python{}, map[string]any{"env": map[string]any{"MODE": "prod", "RETRIES": 3.0},
		"code": "import os\nresult = [os.environ['MODE'], os.environ['RETRIES']]"})
	require.NoError(t, err)
	require.Equal(t, []any{"prod", "3"}, out)
	_, err = runPython(t, &Python{}, map[string]any{"env": map[string]any{"A=B": "x"}, "code": "result = 1"})
	require.ErrorContains(t, err, `python: env: "A=B" is not an environment variable name`)
	_, err = runPython(t, &Python{}, map[string]any{"env": "MODE=prod", "code": "result = 1"})
	require.ErrorContains(t, err, "python: env must be a mapping")
}

// libs imports modules under the given names, as NoETL's python tool does: {alias:
// module} (import module as alias) and {alias: {from, import}} (from module import name
// as alias, a submodule or an attribute). Anything else is refused naming the alias.
func TestPythonLibs(t *testing.T) {
	t.Parallel()
	needPython(t)
	out, err := runPython(t, &Python{}, map[string]any{
		"libs": map[string]any{"j": "json", "os": "os", "jp": map[string]any{"from": "os", "import": "path"}, "dumps": map[string]any{"from": "json", "import": "dumps"}},
		"code": "result = [j.dumps(n), os.sep == jp.sep, dumps([1])]",
	})
	require.NoError(t, err)
	require.Equal(t, []any{"20", true, "[1]"}, out)
	for libs, want := range map[string]any{
		"python: libs must be a mapping of aliases to modules":               []any{"json"},
		`python: libs.x: want a module name or {from: module, import: name}`: map[string]any{"x": 3.0},
		`python: libs.y: want a module name or {from: module, import: name}`: map[string]any{"y": map[string]any{"from": "os"}},
		`python: libs: "a b" is not a python name`:                           map[string]any{"a b": "json"},
	} {
		_, err := runPython(t, &Python{}, map[string]any{"libs": want, "code": "result = 1"})
		require.ErrorContains(t, err, libs)
	}
	_, err = runPython(t, &Python{}, map[string]any{"libs": map[string]any{"q": map[string]any{"from": "json", "import": "no_such_name"}}, "code": "result = 1"})
	require.ErrorContains(t, err, "importing no_such_name from json as q (libs): ModuleNotFoundError")
}
