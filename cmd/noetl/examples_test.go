package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/internal/testkit"
)

// devGateway is the REST address the example headers and workloads name: the dev mesh's
// default. The test's mesh listens elsewhere, and the test points them there.
const devGateway = "http://127.0.0.1:8080"

// exampleEnv is what a check may use beyond the run's result.
type exampleEnv struct {
	ctx  context.Context
	base string // the gateway's REST base URL
}

// exampleChecks holds one expectation per file of examples/: the run completed and its
// result shows what the example is about. A playbook added to examples/ without one fails
// TestExamples.
var exampleChecks = map[string]func(t *testing.T, env exampleEnv, res map[string]any){
	"hello.yaml": func(t *testing.T, _ exampleEnv, res map[string]any) {
		require.Equal(t, map[string]any{"greeting": "Hello, World! Hello, World! Hello, World!", "words": float64(6)}, res)
	},
	"fanout.yaml": func(t *testing.T, _ exampleEnv, res map[string]any) {
		require.EqualValues(t, 5, res["documents"])
		require.EqualValues(t, 32, res["words"])
		require.Equal(t, []any{9.0, 5.0, 7.0, 3.0, 8.0}, res["by_index"], "the fan-in sees the iterations in index order")
	},
	"retry.yaml": func(t *testing.T, _ exampleEnv, res map[string]any) {
		require.EqualValues(t, 3, res["succeeded_on_attempt"])
		require.EqualValues(t, 2, res["failures_seen"])
		require.EqualValues(t, 42, res["value"])
	},
	"http_postgres.yaml": func(t *testing.T, env exampleEnv, res map[string]any) {
		require.EqualValues(t, 200, res["status_code"])
		// Postgres counted the paths of the document the http step fetched.
		var doc struct {
			Paths map[string]any `json:"paths"`
		}
		resp, err := http.Get(env.base + "/openapi.json")
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
		executions := 0
		for p := range doc.Paths {
			if strings.HasPrefix(p, "/v1/executions") {
				executions++
			}
		}
		require.NotZero(t, executions)
		require.EqualValues(t, len(doc.Paths), res["paths"], "%v", res)
		require.EqualValues(t, executions, res["execution_paths"], "%v", res)
	},
	"subplaybook.yaml": func(t *testing.T, _ exampleEnv, res map[string]any) {
		require.Equal(t, "Hello, sub-playbook! Hello, sub-playbook!", res["greeting"], "the child ran with the parent's input")
		require.EqualValues(t, 4, res["words"])
		require.Equal(t, "HELLO, SUB-PLAYBOOK! HELLO, SUB-PLAYBOOK!", res["shouted"])
	},
	"large_result.yaml": func(t *testing.T, env exampleEnv, res map[string]any) {
		require.EqualValues(t, 5000, res["row_count"], "read from the summary")
		require.EqualValues(t, 5000, res["rows_read"], "the consumer got every row")
		require.EqualValues(t, 15000, res["units"])
		require.Greater(t, res["stored_bytes"], float64(64<<10), "over the inline budget")
		ref, _ := res["ref"].(string)
		require.True(t, strings.HasPrefix(ref, "noetl://results/"), "the table travelled by reference: %v", res)
		// The header's suggestion: read the stored table as CSV.
		out, errOut, err := runNoetl(env.ctx, "result", "get", ref, "--format", "csv")
		require.NoError(t, err, errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 5001)
		require.Equal(t, "id,sku,qty,price,note", lines[0])
	},
	"credentials.yaml": func(t *testing.T, _ exampleEnv, res map[string]any) {
		require.EqualValues(t, 401, res["without_credential"])
		require.EqualValues(t, 200, res["with_credential"], "auth: noetl_viewer sent the stored key")
		require.Equal(t, "examples/credentials", res["path"])
		require.Equal(t, "EXECUTION_STATUS_RUNNING", res["status"])
	},
}

// TestExamples runs every playbook of examples/ as its header tells a newcomer to: the
// header's set-up commands (noetl, and curl against the REST API), then its `noetl run
// examples/X.yaml --wait`, through the CLI's code path against a dev mesh, and checks each
// result.
func TestExamples(t *testing.T) {
	t.Chdir("../..") // the headers' paths are relative to the repository
	files, err := filepath.Glob("examples/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	seen := map[string]bool{}
	for _, f := range files {
		seen[filepath.Base(f)] = true
		_, ok := exampleChecks[filepath.Base(f)]
		require.True(t, ok, "%s has no expectation in TestExamples", f)
	}
	for name := range exampleChecks {
		require.True(t, seen[name], "TestExamples expects examples/%s, which does not exist", name)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pg := testkit.StartPostgres(t)
	m, err := mesh.Start(ctx, mesh.Config{StateDir: t.TempDir(), PostgresURL: pg, NATSURL: testkit.StartNATS(t), HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	// What the headers' set-up takes from the machine: the admin key the dev mesh wrote,
	// and the dev mesh's Postgres.
	provided := map[string]string{"NOETL_API_KEY": m.AdminKey, "PG_URL": m.PostgresURL}
	t.Setenv("NOETL_API_KEY", m.AdminKey)
	t.Setenv("NOETL_GATEWAY", m.GRPCAddr)
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // never a real dev mesh's admin.key
	env := exampleEnv{ctx: ctx, base: "http://" + m.HTTPAddr}

	for _, f := range files {
		name := filepath.Base(f)
		t.Run(strings.TrimSuffix(name, ".yaml"), func(t *testing.T) {
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			pb, err := playbook.Parse(src)
			require.NoError(t, err)
			require.Equal(t, "examples/"+strings.TrimSuffix(name, ".yaml"), pb.Metadata.Path, "an example's catalog path mirrors its file")
			cmds := headerCommands(src)
			require.NotEmpty(t, cmds, "%s: the header says how to run it", f)
			run := cmds[len(cmds)-1]
			require.Equal(t, "noetl run "+f+" --wait", run, "%s: the header's last command runs the example", f)

			vars := map[string]string{}
			for _, c := range cmds[:len(cmds)-1] {
				setup(t, ctx, c, vars, provided, env.base)
			}
			args, err := shellWords(run, vars)
			require.NoError(t, err)
			args = args[1:]
			if pb.Workload["gateway"] == devGateway {
				args = append(args, "--set", "gateway="+env.base)
			}
			out, errOut, err := runNoetl(ctx, args...)
			require.NoError(t, err, "%s\n%s", out, errOut)
			var o Outcome
			require.NoError(t, json.Unmarshal([]byte(out), &o), out)
			require.Equal(t, "COMPLETED", o.Status, "%s: %s", o.ExecutionID, o.Error)
			var res map[string]any
			require.NoError(t, json.Unmarshal(o.Result, &res), "%s", o.Result)
			exampleChecks[name](t, env, res)
		})
	}
}

// runNoetl runs the CLI with args as the noetl binary would, returning what it printed.
func runNoetl(ctx context.Context, args ...string) (string, string, error) {
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// headerCommand is a shell command of an example's header: three spaces into a comment
// line, starting with noetl, curl, export or an assignment.
var headerCommand = regexp.MustCompile(`^#   (noetl |curl |export |[A-Z_][A-Z0-9_]*=)`)

// headerCommands returns the commands of a playbook's leading comment block in order, a
// command continued with a trailing backslash joined into one line.
func headerCommands(src []byte) []string {
	var cmds []string
	lines := strings.Split(string(src), "\n")
	for i := 0; i < len(lines) && strings.HasPrefix(lines[i], "#"); i++ {
		if !headerCommand.MatchString(lines[i]) {
			continue
		}
		cmd := strings.TrimSpace(strings.TrimPrefix(lines[i], "#"))
		for strings.HasSuffix(cmd, `\`) && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "#") {
			i++
			cmd = strings.TrimSuffix(cmd, `\`) + strings.TrimSpace(strings.TrimPrefix(lines[i], "#"))
		}
		cmds = append(cmds, cmd)
	}
	return cmds
}

var assignment = regexp.MustCompile(`^(?:export )?([A-Z_][A-Z0-9_]*)=(.*)$`)

// setup runs one set-up command of a header. An assignment of a value the machine provides
// (the admin key, the dev mesh's Postgres) takes the test's; one of $(noetl ...) runs the CLI
// and keeps what it printed. noetl commands run through the CLI's code path, curl commands
// against the test's gateway.
func setup(t *testing.T, ctx context.Context, cmd string, vars, provided map[string]string, base string) {
	t.Helper()
	if m := assignment.FindStringSubmatch(cmd); m != nil {
		name, rhs := m[1], m[2]
		if v, ok := provided[name]; ok {
			vars[name] = v
			return
		}
		inner, ok := strings.CutPrefix(rhs, "$(")
		inner, closed := strings.CutSuffix(inner, ")")
		require.True(t, ok && closed, "set-up %q: only $(noetl ...) assignments are understood", cmd)
		args, err := shellWords(inner, vars)
		require.NoError(t, err, cmd)
		require.Equal(t, "noetl", args[0], "set-up %q: only $(noetl ...) assignments are understood", cmd)
		out, errOut, err := runNoetl(ctx, args[1:]...)
		require.NoError(t, err, "set-up %q: %s", cmd, errOut)
		vars[name] = strings.TrimSpace(out)
		return
	}
	args, err := shellWords(cmd, vars)
	require.NoError(t, err, cmd)
	switch args[0] {
	case "noetl":
		_, errOut, err := runNoetl(ctx, args[1:]...)
		require.NoError(t, err, "set-up %q: %s", cmd, errOut)
	case "curl":
		curl(t, args[1:], base)
	default:
		t.Fatalf("set-up %q: unknown command", cmd)
	}
}

// curl does what curl with these arguments does (-H, -d, -X; -s, -S and -f change nothing
// here), against the test's gateway instead of the dev mesh's default address, and requires
// a 2xx answer.
func curl(t *testing.T, args []string, base string) {
	t.Helper()
	method, url := "", ""
	var body io.Reader
	header := http.Header{}
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-H" && i+1 < len(args):
			i++
			k, v, ok := strings.Cut(args[i], ":")
			require.True(t, ok, "curl -H %q", args[i])
			header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
		case (a == "-d" || a == "--data") && i+1 < len(args):
			i++
			require.True(t, json.Valid([]byte(args[i])), "curl -d: the body is not JSON: %s", args[i])
			body = strings.NewReader(args[i])
		case a == "-X" && i+1 < len(args):
			i++
			method = args[i]
		case a == "-s" || a == "-S" || a == "-sS" || a == "-f" || a == "-fsS":
		case strings.HasPrefix(a, "-"):
			t.Fatalf("curl: option %s is not understood by this test", a)
		default:
			require.True(t, strings.HasPrefix(a, devGateway+"/"), "curl %s: the examples call the dev mesh's gateway", a)
			url = base + strings.TrimPrefix(a, devGateway)
		}
	}
	require.NotEmpty(t, url, "curl without a URL")
	if method == "" {
		method = http.MethodGet
		if body != nil {
			method = http.MethodPost
		}
	}
	req, err := http.NewRequest(method, url, body)
	require.NoError(t, err)
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	require.True(t, resp.StatusCode/100 == 2, "curl %s %s: %d %s", method, url, resp.StatusCode, raw)
}

// shellWords splits a command into words as a POSIX shell does for the forms the headers use:
// single quotes (literal), double quotes, and $NAME / ${NAME} expanded from vars outside
// single quotes. An unset variable or a command substitution is an error.
func shellWords(line string, vars map[string]string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	expand := func(i int) (int, error) { // line[i] == '$'
		j := i + 1
		braced := j < len(line) && line[j] == '{'
		if braced {
			j++
		}
		k := j
		for k < len(line) && (line[k] == '_' || line[k] >= 'A' && line[k] <= 'Z' || line[k] >= 'a' && line[k] <= 'z' || line[k] >= '0' && line[k] <= '9') {
			k++
		}
		if k == j {
			return 0, fmt.Errorf("%q: only $NAME and ${NAME} are understood", line)
		}
		name := line[j:k]
		if braced {
			if k >= len(line) || line[k] != '}' {
				return 0, fmt.Errorf("%q: ${%s...} is not understood", line, name)
			}
			k++
		}
		v, ok := vars[name]
		if !ok {
			return 0, fmt.Errorf("%q: $%s is not set by an earlier command", line, name)
		}
		cur.WriteString(v)
		return k, nil
	}
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
			i++
		case c == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("%q: unterminated single quote", line)
			}
			cur.WriteString(line[i+1 : i+1+end])
			inWord = true
			i += end + 2
		case c == '"':
			inWord = true
			i++
			for {
				if i >= len(line) {
					return nil, fmt.Errorf("%q: unterminated double quote", line)
				}
				if line[i] == '"' {
					i++
					break
				}
				if line[i] == '$' {
					var err error
					if i, err = expand(i); err != nil {
						return nil, err
					}
					continue
				}
				if line[i] == '\\' || line[i] == '`' {
					return nil, fmt.Errorf("%q: escapes and backquotes are not understood", line)
				}
				cur.WriteByte(line[i])
				i++
			}
		case c == '$':
			var err error
			if i, err = expand(i); err != nil {
				return nil, err
			}
			inWord = true
		case strings.IndexByte("\\`|&;<>()*?[#~", c) >= 0:
			return nil, fmt.Errorf("%q: %q outside quotes is not understood", line, c)
		default:
			cur.WriteByte(c)
			inWord = true
			i++
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("empty command")
	}
	return words, nil
}
