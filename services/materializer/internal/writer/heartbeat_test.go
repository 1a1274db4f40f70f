package writer

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/testkit"
)

// A batch of heartbeats alone is committed but asks for no decision: a heartbeat only
// moves a cursor lease's end, which the lease's timer reads. With a worker's outcome in
// the batch, the notice asks for one.
func TestHeartbeatsAloneNeedNoDecision(t *testing.T) {
	ctx := context.Background()
	db, err := pgxext.Open(ctx, testkit.StartMigratedPostgres(t), 4)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	w := &Writer{DB: db}
	_, err = w.Commit(ctx, []*eventv1.Event{ev("h", "h1", domain.EventPlaybookStarted)}, nil)
	require.NoError(t, err)

	res, err := w.Commit(ctx, []*eventv1.Event{ev("h", domain.HeartbeatEventID("c1", 1), domain.EventCommandHeartbeat), ev("h", domain.HeartbeatEventID("c1", 2), domain.EventCommandHeartbeat)}, nil)
	require.NoError(t, err)
	require.Equal(t, []Outcome{Committed, Committed}, res.Outcomes)
	require.Len(t, res.Notices, 1)
	require.EqualValues(t, 3, res.Notices[0].GetSeq())
	require.False(t, res.Notices[0].GetNeedsDecision(), "heartbeats alone decide nothing")

	res, err = w.Commit(ctx, []*eventv1.Event{ev("h", domain.HeartbeatEventID("c1", 3), domain.EventCommandHeartbeat), ev("h", "h-done", domain.EventCommandCompleted)}, nil)
	require.NoError(t, err)
	require.Len(t, res.Notices, 1)
	require.True(t, res.Notices[0].GetNeedsDecision(), "an outcome in the batch does")
}
