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

	"github.com/noetl/noetl/cmd/noetl/mesh"
	"github.com/noetl/noetl/internal/testkit"
)

const rerunChain = `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: rerun, path: tests/rerun}
workflow:
  - step: start
    tool: {kind: noop, result: {n: 1}}
    next: middle
  - step: middle
    tool: {kind: noop, result: {n: "{{ start.n + 1 }}"}}
    next: end
  - step: end
    tool: {kind: noop, result: {n: "{{ middle.n + 1 }}"}}
`

// TestRunLabelsListAndRerun runs `noetl run --label`, lists by label with `noetl
// executions list --label` (every given label must match), and reruns with `noetl rerun
// --from`, whose output and `noetl status` name the origin and the reused steps.
func TestRunLabelsListAndRerun(t *testing.T) {
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
	file := filepath.Join(t.TempDir(), "rerun.yaml")
	require.NoError(t, os.WriteFile(file, []byte(rerunChain), 0o600))
	run := func(args ...string) Outcome {
		out, err := noetl(append([]string{"run", "--wait"}, args...)...)
		require.NoError(t, err, out)
		var o Outcome
		require.NoError(t, json.Unmarshal([]byte(out), &o), out)
		return o
	}
	prod := run(file, "--label", "team=data", "--label", "env=prod")
	dev := run("tests/rerun", "--label", "team=data", "--label", "env=dev")
	run("tests/rerun")

	ids := func(args ...string) []string {
		out, err := noetl(append([]string{"executions", "list", "-o", "json"}, args...)...)
		require.NoError(t, err, out)
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line == "" {
				continue
			}
			var x map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &x), line)
			got = append(got, x["executionId"].(string))
		}
		return got
	}
	require.Len(t, ids(), 3)
	require.Equal(t, []string{dev.ExecutionID, prod.ExecutionID}, ids("--label", "team=data"))
	require.Equal(t, []string{prod.ExecutionID}, ids("--label", "team=data", "--label", "env=prod"))
	require.Empty(t, ids("--label", "team=web"))
	out, err := noetl("executions", "list", "-o", "table", "--label", "env=prod")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^`+prod.ExecutionID+`\s.*\senv=prod,team=data$`, out)
	_, err = noetl("executions", "list", "--label", "team")
	require.EqualError(t, err, `--label "team": want key=value`)
	_, err = noetl("run", "tests/rerun", "--label", "Team=x")
	require.ErrorContains(t, err, `labels: label key "Team" must match`)

	out, err = noetl("rerun", prod.ExecutionID, "--from", "end", "--wait")
	require.NoError(t, err, out)
	var re Outcome
	require.NoError(t, json.Unmarshal([]byte(out), &re), out)
	require.Equal(t, "COMPLETED", re.Status)
	require.Equal(t, prod.ExecutionID, re.RerunOf)
	require.Equal(t, "end", re.FromStep)
	require.Equal(t, []string{"middle", "start"}, re.ReusedSteps)
	require.JSONEq(t, string(prod.Result), string(re.Result))
	out, err = noetl("status", re.ExecutionID, "-o", "table")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^Rerun of:\s+`+prod.ExecutionID+` from step end$`, out)
	require.Regexp(t, `(?m)^Labels:\s+env=prod,team=data$`, out)
	require.Regexp(t, `(?m)^middle\s+COMPLETED \(reused\)\s`, out)
	require.Contains(t, ids("--label", "env=prod"), re.ExecutionID, "a rerun keeps the labels")

	out, err = noetl("rerun", prod.ExecutionID)
	require.NoError(t, err, out)
	var plain Outcome
	require.NoError(t, json.Unmarshal([]byte(out), &plain), out)
	require.Equal(t, "RUNNING", plain.Status)
	require.Empty(t, plain.ReusedSteps)

	_, err = noetl("rerun", prod.ExecutionID, "--from", "nope")
	require.ErrorContains(t, err, `has no step "nope"`)
}
