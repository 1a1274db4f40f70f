package writer

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
)

// A batch of heartbeats alone is committed but asks for no decision: a heartbeat only
// moves a cursor lease's end, which the lease's timer reads. With a worker's outcome in
// the batch, the notice asks for one.
func TestHeartbeatsAloneNeedNoDecision(t *testing.T) {
	ctx := context.Background()
	w := newWriter(t)
	_, err := w.Commit(ctx, []*eventv1.Event{ev("h", "h1", domain.EventPlaybookStarted)}, nil)
	require.NoError(t, err)

	res, err := w.Commit(ctx, []*eventv1.Event{ev("h", domain.HeartbeatEventID("c1", "5.1", 1), domain.EventCommandHeartbeat), ev("h", domain.HeartbeatEventID("c1", "5.1", 2), domain.EventCommandHeartbeat)}, nil)
	require.NoError(t, err)
	require.Equal(t, []Outcome{Committed, Committed}, res.Outcomes)
	require.Len(t, res.Notices, 1)
	require.EqualValues(t, 3, res.Notices[0].GetSeq())
	require.False(t, res.Notices[0].GetNeedsDecision(), "heartbeats alone decide nothing")

	res, err = w.Commit(ctx, []*eventv1.Event{ev("h", domain.HeartbeatEventID("c1", "5.1", 3), domain.EventCommandHeartbeat), ev("h", "h-done", domain.EventCommandCompleted)}, nil)
	require.NoError(t, err)
	require.Len(t, res.Notices, 1)
	require.True(t, res.Notices[0].GetNeedsDecision(), "an outcome in the batch does")
}

// A command delivered again to a replacement worker (its first worker died) heartbeats
// from beat 1 again: those beats are committed, not dropped as the first delivery's
// duplicates, while the same delivery publishing a beat again is one event.
func TestAReplacementDeliverysHeartbeatsAreCommitted(t *testing.T) {
	ctx := context.Background()
	w := newWriter(t)
	_, err := w.Commit(ctx, []*eventv1.Event{ev("r", "r1", domain.EventPlaybookStarted)}, nil)
	require.NoError(t, err)
	beat := func(delivery string, n int32) *eventv1.Event {
		return ev("r", domain.HeartbeatEventID("c1", delivery, n), domain.EventCommandHeartbeat)
	}
	first, replacement := domain.HeartbeatDelivery(5, 1), domain.HeartbeatDelivery(5, 2)
	res, err := w.Commit(ctx, []*eventv1.Event{beat(first, 1), beat(first, 2)}, nil)
	require.NoError(t, err)
	require.Equal(t, []Outcome{Committed, Committed}, res.Outcomes)
	res, err = w.Commit(ctx, []*eventv1.Event{beat(first, 2), beat(replacement, 1), beat(replacement, 2), beat(replacement, 3)}, nil)
	require.NoError(t, err)
	require.Equal(t, []Outcome{Duplicate, Committed, Committed, Committed}, res.Outcomes, "the first delivery's retried beat is one event; the replacement's beats are its own")
}
