package mesh_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// loopResultsBook loops 2,000 times, each iteration returning a 107-byte string: the list
// of results (about 220 KB) is past the inline budget, so the loop's result is held by
// reference; the next step reads the whole list and its length through templates.
const loopResultsBook = `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: loopresults, path: tests/loopresults}
workflow:
  - step: start
    loop:
      in: "{{ range(2000) | list }}"
      iterator: i
      spec: {mode: parallel, max_in_flight: 100}
    tool: {kind: noop, result: "{{ 'r' ~ i ~ '-' ~ ('x' * 100) }}"}
    next: [{step: check}]
  - step: check
    tool:
      kind: python
      input: {rows: "{{ start }}", n: "{{ start | length }}", second: "{{ start[1] }}"}
      code: |
        want = ["r%d-%s" % (i, "x" * 100) for i in range(2000)]
        result = {"n": len(rows), "n_tpl": n, "second": second, "last": rows[-1], "in_order": rows == want}
`

// TestLoopResultsPastTheInlineBudgetTravelByReference runs a loop whose list of iteration
// results exceeds the inline budget: the orchestrator assembles the list in the resultstore
// when the loop completes, the loop's result is its reference, the next step receives the
// full list in index order, and no event in the log carries the list.
func TestLoopResultsPastTheInlineBudgetTravelByReference(t *testing.T) {
	h := start(t, false)
	ctx := context.Background()
	x := h.run(t, loopResultsBook, nil, "")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())

	pad := strings.Repeat("x", 100)
	require.Equal(t, map[string]any{"n": float64(2000), "n_tpl": float64(2000), "second": "r1-" + pad, "last": "r1999-" + pad, "in_order": true},
		x.GetSteps()["check"].GetResult().AsInterface(), "the next step saw the whole list in index order")

	ref := x.GetSteps()["start"].GetResultRef()
	require.NotNil(t, ref, "the loop's result is held by reference")
	require.Nil(t, x.GetSteps()["start"].GetResult())
	require.Equal(t, "application/json", ref.GetContentType())
	require.JSONEq(t, `{"_summary":"array","length":2000}`, string(ref.GetExtractedJson()))
	require.Greater(t, ref.GetSize(), int64(64<<10))
	require.NotEmpty(t, ref.GetSha256())

	conn, err := h.m.Dial()
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	got, err := apiv1.NewResultServiceClient(conn).GetResult(ctx, &apiv1.GetResultRequest{ResultId: ref.GetUri(), Pointer: "/1234"})
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("r1234-%s", pad), got.GetValue().GetStringValue())

	db, err := pgx.Connect(ctx, h.m.PostgresURL)
	require.NoError(t, err)
	defer func() { _ = db.Close(ctx) }()
	var maxEvent, events int
	require.NoError(t, db.QueryRow(ctx, `SELECT max(octet_length(body)), count(*) FROM noetl.event WHERE execution_id = $1`, x.GetExecutionId()).Scan(&maxEvent, &events))
	require.Less(t, maxEvent, 64<<10, "no event carries the list")
	// Informative: the time from the loop's last completion to its step.exit (assembling
	// and storing the list, then deciding).
	var assembleMs float64
	require.NoError(t, db.QueryRow(ctx, `SELECT extract(epoch FROM
		(SELECT committed_at FROM noetl.event WHERE execution_id = $1 AND step = 'start' AND type = 'step.exit') -
		(SELECT max(committed_at) FROM noetl.event WHERE execution_id = $1 AND step = 'start' AND type = 'command.completed')) * 1000`, x.GetExecutionId()).Scan(&assembleMs))
	t.Logf("%d events, largest %d bytes; list of %d bytes by reference, step.exit %.0f ms after the last iteration", events, maxEvent, ref.GetSize(), assembleMs)
}
