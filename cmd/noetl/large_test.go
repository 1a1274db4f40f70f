package main

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/internal/tabular"
)

// largePlaybook returns a JSON document of workload.mb megabytes and a table of
// workload.rows rows from Postgres; the step after each consumes all of it.
const largePlaybook = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: large, path: tests/large}
workload: {mb: 1, rows: 1000, pg: ""}
workflow:
  - step: start
    tool:
      kind: python
      input: {mb: "{{ workload.mb }}"}
      code: |
        result = {"blob": "x" * (int(mb) * 1000000), "mb": int(mb)}
    next: [{step: blob_len}]
  - step: blob_len
    tool:
      kind: python
      input: {doc: "{{ start }}"}
      code: |
        result = {"len": len(doc["blob"]), "mb": doc["mb"]}
    next: [{step: table}]
  - step: table
    tool:
      kind: postgres
      connection_string: "{{ workload.pg }}"
      query: "SELECT g AS id, md5(g::text) AS name FROM generate_series(1, {{ workload.rows }}) g ORDER BY g"
      max_rows: 1000000
      as_objects: false
    next: [{step: total}]
  - step: total
    tool:
      kind: python
      input: {t: "{{ table }}"}
      code: |
        rows = t["rows"]
        result = {"n": len(rows), "sum": sum(r[0] for r in rows)}
`

// TestLargeResultsAcrossProcesses runs the services as separate processes and passes a
// 100 MB JSON document and a 1,000,000-row table between steps: the execution completes,
// every event stays under 256 KiB, the orchestrator's and statebuilder's resident sets
// grow by less than 20 MB during the run, and a Go Flight client reads the table with
// DoGet using a ticket from the gateway.
func TestLargeResultsAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under -short: moves 100 MB and a million rows between processes (CI runs it: make test has no -short)")
	}
	const mb, rows = 100, 1_000_000
	p := startProcesses(t)
	ctx := context.Background()
	conn, err := grpcx.DialSigned(p.grpcAddr, auth.Bearer(p.adminKey))
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	cat := apiv1.NewCatalogServiceClient(conn)
	exe := apiv1.NewExecutionServiceClient(conn)
	reg, err := cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: largePlaybook})
	require.NoError(t, err)
	run := func(mb, rows int) (*apiv1.Execution, time.Duration) {
		w, err := structpb.NewStruct(map[string]any{"mb": mb, "rows": rows, "pg": p.pgURL})
		require.NoError(t, err)
		began := time.Now()
		resp, err := exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath(), Workload: w})
		require.NoError(t, err)
		for {
			done, err := exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: resp.GetExecutionId(), Timeout: durationpb.New(time.Minute)})
			require.NoError(t, err)
			x := done.GetExecution()
			switch x.GetStatus() {
			case eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED:
				return x, time.Since(began)
			}
		}
	}

	// Warm up with small sizes, so that pools, caches and code are in place before the
	// baseline is read.
	warm, warmTook := run(1, 1000)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, warm.GetStatus(), "error: %v", warm.GetError())
	watched := []string{"orchestrator", "statebuilder"}
	base := map[string]int64{}
	for _, s := range services {
		base[s], err = rssBytes(p.pids[s])
		require.NoError(t, err)
	}
	peak := map[string]int64{}
	var mu sync.Mutex
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, s := range services {
				if n, err := rssBytes(p.pids[s]); err == nil {
					mu.Lock()
					peak[s] = max(peak[s], n)
					mu.Unlock()
				}
			}
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	x, took := run(mb, rows)
	stop()
	wg.Wait()
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
	t.Logf("warm-up run (1 MB, 1000 rows) %s; large run (%d MB, %d rows) %s", warmTook.Round(time.Millisecond), mb, rows, took.Round(time.Millisecond))
	for _, s := range watched {
		growth := peak[s] - base[s]
		t.Logf("%s RSS: %.1f MB before, %.1f MB at most during the run, growth %.1f MB", s, mib(base[s]), mib(peak[s]), mib(growth))
		require.Less(t, growth, int64(20<<20), "%s RSS growth", s)
	}
	for _, s := range []string{"worker", "resultstore", "materializer", "gateway"} {
		t.Logf("%s RSS (not bounded here): %.1f MB before, %.1f MB at most during the run", s, mib(base[s]), mib(peak[s]))
	}

	steps := x.GetSteps()
	require.Equal(t, map[string]any{"len": float64(mb * 1_000_000), "mb": float64(mb)}, steps["blob_len"].GetResult().AsInterface())
	require.Equal(t, map[string]any{"n": float64(rows), "sum": float64(rows * (rows + 1) / 2)}, steps["total"].GetResult().AsInterface())
	blob := steps["start"].GetResultRef()
	require.NotNil(t, blob, "the document went by reference")
	require.Equal(t, "application/json", blob.GetContentType())
	require.Greater(t, blob.GetSize(), int64(mb*1_000_000))
	table := steps["table"].GetResultRef()
	require.NotNil(t, table, "the table went by reference")
	require.Equal(t, tabular.ContentType, table.GetContentType())
	require.EqualValues(t, rows, table.GetRowCount())
	t.Logf("stored: document %.1f MB, table %.1f MB of Arrow IPC", mib(blob.GetSize()), mib(table.GetSize()))

	pg, err := pgx.Connect(ctx, p.pgURL)
	require.NoError(t, err)
	defer func() { _ = pg.Close(ctx) }()
	var largest, events int
	require.NoError(t, pg.QueryRow(ctx, `SELECT max(octet_length(body)), count(*) FROM noetl.event WHERE execution_id = $1`, x.GetExecutionId()).Scan(&largest, &events))
	t.Logf("largest of %d events: %d bytes", events, largest)
	timeline, err := pg.Query(ctx, `SELECT type, step, committed_at - min(committed_at) OVER () FROM noetl.event WHERE execution_id = $1 AND type LIKE 'call.%' ORDER BY seq`, x.GetExecutionId())
	require.NoError(t, err)
	for timeline.Next() {
		var typ, step string
		var at time.Duration
		require.NoError(t, timeline.Scan(&typ, &step, &at))
		t.Logf("  +%-8s %s %s", at.Round(10*time.Millisecond), typ, step)
	}
	require.NoError(t, timeline.Err())
	require.Less(t, largest, 256<<10, "the largest event")

	// A Go Flight client reads the table with a ticket from the gateway.
	res := apiv1.NewResultServiceClient(conn)
	info, err := res.GetResultFlightInfo(ctx, &apiv1.GetResultFlightInfoRequest{ResultId: table.GetUri()})
	require.NoError(t, err)
	require.Equal(t, "grpc://"+p.flightAddr, info.GetLocation())
	client, err := flight.NewClientWithMiddleware(strings.TrimPrefix(info.GetLocation(), "grpc://"), nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer func() { _ = client.Close() }()
	began := time.Now()
	n, sum, digest, err := readTable(ctx, client, info.GetTicket())
	require.NoError(t, err)
	t.Logf("DoGet read %d rows in %s", n, time.Since(began).Round(time.Millisecond))
	require.EqualValues(t, rows, n)
	require.EqualValues(t, int64(rows)*(rows+1)/2, sum)
	var want string
	require.NoError(t, pg.QueryRow(ctx, `SELECT md5(string_agg(md5(g::text), '' ORDER BY g)) FROM generate_series(1, $1::int) g`, rows).Scan(&want))
	require.Equal(t, want, digest, "md5 of the names in order")
}

// readTable reads an (id int64, name utf8) table with DoGet and returns its rows, the sum
// of its ids and the md5 of its names concatenated in order.
func readTable(ctx context.Context, c flight.Client, ticket []byte) (rows, sum int64, digest string, err error) {
	stream, err := c.DoGet(ctx, &flight.Ticket{Ticket: ticket})
	if err != nil {
		return 0, 0, "", err
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return 0, 0, "", err
	}
	defer rdr.Release()
	if got := rdr.Schema().String(); !strings.Contains(got, "id: type=int64") || !strings.Contains(got, "name: type=utf8") {
		return 0, 0, "", fmt.Errorf("unexpected schema %s", got)
	}
	h := md5.New()
	for rdr.Next() {
		rec := rdr.RecordBatch()
		rows += rec.NumRows()
		ids := rec.Column(0).(*array.Int64)
		names := rec.Column(1).(*array.String)
		for i := 0; i < ids.Len(); i++ {
			sum += ids.Value(i)
			_, _ = io.WriteString(h, names.Value(i))
		}
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return rows, sum, "", err
	}
	return rows, sum, hex.EncodeToString(h.Sum(nil)), nil
}

// mib is n bytes in MiB.
func mib(n int64) float64 { return float64(n) / (1 << 20) }
