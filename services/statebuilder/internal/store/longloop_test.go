package store

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/testkit"
)

// TestLongLoopSnapshotsStayFlat folds a loop of 15,000 iterations (too many for the list of
// results to fit the inline budget) over a collection held by reference, reading the state
// as the log grows: the cached state and every snapshot keep the same size, however many
// iterations are done (snapshot cost does not grow with the log).
func TestLongLoopSnapshotsStayFlat(t *testing.T) {
	url := testkit.StartMigratedPostgres(t)
	ctx := context.Background()
	s := newStore(t, url, Options{SnapshotEvery: 1000})
	const exec, n = "loop", 15000
	_, err := s.db.Exec(ctx, `INSERT INTO noetl.execution (execution_id, tenant) VALUES ($1, 't')`, exec)
	require.NoError(t, err)

	var rows [][]any
	add := func(ev *eventv1.Event) {
		ev.ExecutionId, ev.Tenant = exec, "t"
		ev.EventId = fmt.Sprintf("e%d", len(rows)+1)
		body, err := proto.Marshal(ev)
		require.NoError(t, err)
		rows = append(rows, []any{exec, int64(len(rows) + 1), ev.GetEventId(), "t", ev.GetType(), body})
	}
	add(&eventv1.Event{Type: domain.EventPlaybookStarted, PayloadJson: []byte(`{"path":"p","version":1,"workload":{}}`)})
	enter, err := json.Marshal(domain.EnterPayload{Epoch: 1, Loop: &domain.LoopPayload{Iterator: "i", Total: n, ItemsRef: &domain.RefView{URI: "noetl://results/t/loop/e2-items"}}})
	require.NoError(t, err)
	add(&eventv1.Event{Type: domain.EventStepEnter, Step: "s", PayloadJson: enter})
	for i := int32(0); i < n; i++ {
		it := &eventv1.Iteration{Epoch: 1, Index: i}
		cmd := domain.CommandID(exec, "s", 1, i, 1)
		for _, typ := range []string{domain.EventCommandIssued, domain.EventCommandStarted, domain.EventCallDone, domain.EventCommandCompleted} {
			ev := &eventv1.Event{Type: typ, Step: "s", CommandId: cmd, Iteration: it}
			if typ == domain.EventCallDone {
				ev.ResultJson = []byte(fmt.Sprintf(`{"i":%d}`, i))
			}
			add(ev)
		}
	}
	cols := []string{"execution_id", "seq", "event_id", "tenant", "type", "body"}
	var sizes, snaps []int
	for from := 0; from < len(rows); from += 10000 {
		to := min(from+10000, len(rows))
		_, err := s.db.CopyFrom(ctx, pgx.Identifier{"noetl", "event"}, cols, pgx.CopyFromRows(rows[from:to]))
		require.NoError(t, err)
		got, err := s.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: exec, MinSeq: int64(to)})
		require.NoError(t, err)
		sizes = append(sizes, proto.Size(got.GetState()))
		var snap int
		require.NoError(t, s.db.QueryRow(ctx, `SELECT octet_length(body) FROM noetl.state_snapshot WHERE execution_id = $1`, exec).Scan(&snap))
		snaps = append(snaps, snap)
	}
	t.Logf("state sizes %v, snapshot sizes %v", sizes, snaps)
	require.Len(t, sizes, 7)
	for i := 1; i < len(sizes)-1; i++ {
		require.InDelta(t, sizes[0], sizes[i], 16, "state sizes %v", sizes)
		require.InDelta(t, snaps[0], snaps[i], 16, "snapshot sizes %v", snaps)
	}
	st := s.items[exec].Value.(*entry).state.GetSteps()["s"]
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_COMPLETED, st.GetStatus())
	require.Less(t, sizes[len(sizes)-1], 2048, "the finished loop's state holds a summary, not 15,000 results")
}
