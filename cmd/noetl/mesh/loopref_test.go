package mesh_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// TestALargeLoopCollectionTravelsByReference loops over a collection of about 90 KB: the
// orchestrator stores it once in the resultstore, step.enter and the state carry its
// reference and length, and every iteration still gets its own item.
func TestALargeLoopCollectionTravelsByReference(t *testing.T) {
	h := start(t, false)
	x := h.run(t, `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: bigloop, path: tests/bigloop}
workflow:
  - step: start
    loop:
      in: "{{ ['x' * 300] * 300 }}"
      iterator: it
      spec: {mode: parallel, max_in_flight: 50}
    tool: {kind: noop, result: "{{ it | length }}"}
`, nil, "")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
	res := x.GetSteps()["start"].GetResult().GetListValue().GetValues()
	require.Len(t, res, 300)
	for i, v := range res {
		require.Equal(t, float64(300), v.GetNumberValue(), "iteration %d", i)
	}
	conn, err := pgx.Connect(context.Background(), h.m.PostgresURL)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	var stored, maxEvent int
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM noetl.result WHERE execution_id = $1 AND step = 'start' AND result_id LIKE '%-items'`, x.GetExecutionId()).Scan(&stored))
	require.Equal(t, 1, stored, "the collection was stored by reference")
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT max(octet_length(body)) FROM noetl.event WHERE execution_id = $1`, x.GetExecutionId()).Scan(&maxEvent))
	require.Less(t, maxEvent, 64<<10, "no event carries the collection")
}
