package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/testkit"
)

const resultsPlaybook = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: results, path: tests/results}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        result = [{"id": i, "name": "n,%d" % i} for i in range(3000)]
    next: [{step: doc}]
  - step: doc
    tool:
      kind: python
      code: |
        result = {"meta": {"k": "v"}, "blob": "y" * 100000}
`

// TestResultCommands reads a stored table and a stored JSON result with `noetl result`.
func TestResultCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	m, err := mesh.Start(ctx, mesh.Config{StateDir: t.TempDir(), PostgresURL: testkit.StartPostgres(t), NATSURL: testkit.StartNATS(t)})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	c, err := dialAddr(m.GRPCAddr, m.AdminKey)
	require.NoError(t, err)
	defer func() { _ = c.conn.Close() }()
	reg, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: resultsPlaybook})
	require.NoError(t, err)
	started, err := c.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath()})
	require.NoError(t, err)
	done, err := c.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: started.GetExecutionId(), Timeout: durationpb.New(time.Minute)})
	require.NoError(t, err)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, done.GetExecution().GetStatus(), "%v", done.GetExecution().GetError())
	table := done.GetExecution().GetSteps()["start"].GetResultRef().GetUri()
	doc := done.GetExecution().GetSteps()["doc"].GetResultRef().GetUri()
	require.NotEmpty(t, table)
	require.NotEmpty(t, doc)

	noetl := func(args ...string) (string, error) {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&bytes.Buffer{})
		root.SetArgs(append([]string{"--gateway", m.GRPCAddr, "--api-key", m.AdminKey, "result"}, args...))
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}

	// JSON: exactly what the step returned.
	out, err := noetl("get", table)
	require.NoError(t, err)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 3000)
	require.Equal(t, map[string]any{"id": float64(2999), "name": "n,2999"}, rows[2999])

	// CSV, to a file.
	dir := t.TempDir()
	csvPath := filepath.Join(dir, "t.csv")
	_, err = noetl("get", table, "--format", "csv", "-o", csvPath)
	require.NoError(t, err)
	b, err := os.ReadFile(csvPath)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 3001)
	require.Equal(t, "id,name", lines[0])
	require.Equal(t, `7,"n,7"`, lines[8])

	// Arrow IPC, readable by any Arrow reader.
	arrowPath := filepath.Join(dir, "t.arrow")
	_, err = noetl("get", table, "--format", "arrow", "-o", arrowPath)
	require.NoError(t, err)
	f, err := os.Open(arrowPath)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	rdr, err := ipc.NewReader(f)
	require.NoError(t, err)
	var n int64
	for rdr.Next() {
		n += rdr.RecordBatch().NumRows()
	}
	rdr.Release()
	require.EqualValues(t, 3000, n)

	// The location can be overridden (a port-forward), and a bad one is a clear error.
	out, err = noetl("get", table, "--flight-location", "grpc://"+m.FlightAddr, "--format", "csv")
	require.NoError(t, err)
	require.Equal(t, "id,name", strings.SplitN(out, "\n", 2)[0])
	_, err = noetl("get", table, "--flight-location", "http://"+m.FlightAddr)
	require.ErrorContains(t, err, `scheme "http" is not supported`)

	// A JSON result: the bytes as stored, a part by pointer, and no CSV.
	out, err = noetl("get", doc)
	require.NoError(t, err)
	require.Equal(t, `{"blob":"`+strings.Repeat("y", 100000)+`","meta":{"k":"v"}}`, out)
	out, err = noetl("get", doc, "--pointer", "/meta/k")
	require.NoError(t, err)
	require.Equal(t, "\"v\"\n", out)
	_, err = noetl("get", doc, "--format", "csv")
	require.ErrorContains(t, err, "not a table")
	_, err = noetl("get", "no-such-result")
	require.ErrorContains(t, err, "NotFound")

	out, err = noetl("flight-info", table)
	require.NoError(t, err)
	var info map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &info))
	require.Equal(t, "grpc://"+m.FlightAddr, info["location"])
	require.NotEmpty(t, info["ticket"])
	require.Equal(t, "3000", info["ref"].(map[string]any)["rowCount"])
	out, err = noetl("flight-info", table, "-o", "yaml")
	require.NoError(t, err)
	var infoYAML map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(out), &infoYAML), out)
	require.Equal(t, "grpc://"+m.FlightAddr, infoYAML["location"])
	out, err = noetl("flight-info", table, "-o", "table")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^Rows:\s+3000$`, out)
	require.Regexp(t, `(?m)^Location:\s+grpc://`, out)
}
