package mesh_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// TestALargeCommandContextTravelsByReference builds a command whose context (five 60 KB
// results its templates reference) exceeds what a command may carry: the orchestrator
// stores the context in the resultstore, the command carries its reference, and the worker
// loads it before rendering.
func TestALargeCommandContextTravelsByReference(t *testing.T) {
	h := start(t, false)
	var b strings.Builder
	b.WriteString("apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: big, path: tests/big}\nworkflow:\n")
	names := []string{"start", "b", "c", "d", "e"}
	for i, n := range names {
		next := "all"
		if i < len(names)-1 {
			next = names[i+1]
		}
		fmt.Fprintf(&b, "  - step: %s\n    tool: {kind: python, code: \"result = 'x' * 60000\"}\n    next: [{step: %s}]\n", n, next)
	}
	b.WriteString("  - step: all\n    tool: {kind: noop, result: \"{{ start }}{{ b }}{{ c }}{{ d }}{{ e }}\"}\n")
	x := h.run(t, b.String(), nil, "")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
	all := x.GetSteps()["all"]
	require.NotNil(t, all.GetResultRef(), "the 300 KB result of the last step travels by reference")
	require.Equal(t, int64(300002), all.GetResultRef().GetSize(), "five 60,000-character strings, JSON-quoted")
	conn, err := pgx.Connect(context.Background(), h.m.PostgresURL)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	var contexts int
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM noetl.result WHERE execution_id = $1 AND step = 'all' AND result_id LIKE '%-context'`, x.GetExecutionId()).Scan(&contexts))
	require.Equal(t, 1, contexts, "the command's context was stored by reference")
}
