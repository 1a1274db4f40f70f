package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	"github.com/noetl/noetl/internal/testkit"
)

const logsPlaybook = `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: chatty, path: tests/chatty}
color: blue
workflow:
  - step: start
    tool:
      kind: python
      code: |
        import sys
        print("first line")
        print("second line")
        print("oops", file=sys.stderr)
        result = 1
    next: [{step: each}]
  - step: each
    loop: {in: "{{ [1, 2] }}", iterator: n}
    tool:
      kind: python
      input: {n: "{{ n }}"}
      code: |
        print("item", n)
        result = n
    next: [{step: end}]
  - step: end
    tool: {kind: noop}
`

// TestLogsCommand prints an execution's step logs in every output format, for one step,
// and following a run to its end.
func TestLogsCommand(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("NOETL_API_KEY", "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := mesh.Start(ctx, mesh.Config{StateDir: t.TempDir(), PostgresURL: testkit.StartPostgres(t), NATSURL: testkit.StartNATS(t)})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	noetl := func(args ...string) (string, error) {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(io.Discard)
		root.SetArgs(append([]string{"--gateway", m.GRPCAddr, "--api-key", m.AdminKey}, args...))
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
	path := filepath.Join(t.TempDir(), "chatty.yaml")
	require.NoError(t, os.WriteFile(path, []byte(logsPlaybook), 0o600))
	// register prints each warning the registration answers with: here a key the engine
	// ignores.
	root := newRoot()
	var stderr bytes.Buffer
	root.SetOut(io.Discard)
	root.SetErr(&stderr)
	root.SetArgs([]string{"--gateway", m.GRPCAddr, "--api-key", m.AdminKey, "register", path})
	require.NoError(t, root.ExecuteContext(ctx))
	require.Contains(t, stderr.String(), "noetl: warning: "+path+": ")
	require.Contains(t, stderr.String(), `"color" is not read by this engine; it is ignored`)
	out, err := noetl("run", "tests/chatty")
	require.NoError(t, err, out)
	var run Outcome
	require.NoError(t, json.Unmarshal([]byte(out), &run))
	id := run.ExecutionID

	// --follow starts while the run may still be going and ends with it.
	out, err = noetl("logs", id, "--follow", "-o", "table")
	require.NoError(t, err)
	require.Regexp(t, `^STEP\s+STREAM\s+TEXT\n`, out)
	require.Regexp(t, `(?m)^start\s+python stdout\s+first line$`, out)

	out, err = noetl("logs", id, "-o", "table")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Regexp(t, `^STEP\s+STREAM\s+TEXT$`, lines[0])
	require.Regexp(t, `^start\s+python stdout\s+first line$`, lines[1])
	require.Regexp(t, `^start\s+python stdout\s+second line$`, lines[2])
	require.Regexp(t, `^start\s+python stderr\s+oops$`, lines[3])
	require.Contains(t, out, "item 1")
	require.Regexp(t, `(?m)^each\[1\]\s+python stdout\s+item 2$`, out)

	out, err = noetl("logs", id, "--step", "each") // not a terminal: JSON Lines
	require.NoError(t, err)
	var got []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var e map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &e), l)
		got = append(got, e)
	}
	require.Len(t, got, 2, out)
	texts := []string{got[0]["text"].(string), got[1]["text"].(string)}
	require.ElementsMatch(t, []string{"item 1\n", "item 2\n"}, texts)
	require.Equal(t, "each", got[0]["step"])
	require.Equal(t, "stdout", got[0]["stream"])

	out, err = noetl("logs", id, "--step", "start", "-o", "yaml")
	require.NoError(t, err)
	dec := yaml.NewDecoder(strings.NewReader(out))
	var docs []map[string]any
	for {
		var d map[string]any
		if err := dec.Decode(&d); err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
		docs = append(docs, d)
	}
	require.Len(t, docs, 2)
	require.Equal(t, "first line\nsecond line\n", docs[0]["text"])
	require.Equal(t, "stderr", docs[1]["stream"])

	out, err = noetl("logs", id, "--step", "nosuch")
	require.NoError(t, err)
	require.Empty(t, out, "a step with no logs prints nothing")
	_, err = noetl("logs", "not-an-id")
	require.ErrorContains(t, err, "execution_id")
}
