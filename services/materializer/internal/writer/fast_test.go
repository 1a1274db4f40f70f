package writer

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
)

// logOf is the event ids of an execution's log in seq order, and its projected last seq.
func logOf(t *testing.T, w *Writer, exec string) ([]string, int64) {
	t.Helper()
	rows, err := w.DB.Query(context.Background(), `SELECT event_id FROM noetl.event WHERE execution_id = $1 ORDER BY seq`, exec)
	require.NoError(t, err)
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	var last int64
	require.NoError(t, w.DB.QueryRow(context.Background(), `SELECT last_seq FROM noetl.execution WHERE execution_id = $1`, exec).Scan(&last))
	return ids, last
}

// A batch of an execution whose last commit was this writer's goes in one round trip and
// commits what two would have; where the log moved under it (another writer, a
// redelivery, a rival outcome), the guarded transaction writes nothing and the batch is
// committed as the log stands.
func TestOneRoundTripCommitsAsTwoWouldAndFallsBackWhenTheLogMoved(t *testing.T) {
	ctx := context.Background()
	w := newWriter(t)
	commit := func(evs ...*eventv1.Event) *Result {
		t.Helper()
		res, err := w.Commit(ctx, evs, nil)
		require.NoError(t, err)
		return res
	}
	stats := func(taken, missed uint64) {
		t.Helper()
		gotTaken, gotMissed := w.FastStats()
		require.Equal(t, [2]uint64{taken, missed}, [2]uint64{gotTaken, gotMissed}, "one-round-trip commits taken, missed")
	}

	// A start is never predicted; the commit after it is.
	commit(ev("a", "a1", domain.EventPlaybookStarted))
	stats(0, 0)
	res := commit(ev("a", "a2", domain.EventStepEnter), issued("a", "a3"))
	stats(1, 0)
	require.Equal(t, []Outcome{Committed, Committed}, res.Outcomes)
	require.Equal(t, int64(3), res.Notices[0].GetSeq())
	require.Equal(t, "a3", res.Notices[0].GetLastEventId())
	require.Len(t, res.Commands, 1, "the command issued is forwarded")
	ids, last := logOf(t, w, "a")
	require.Equal(t, []string{"a1", "a2", "a3"}, ids)
	require.Equal(t, int64(3), last)

	// Another writer appends: the head this writer holds is stale, the guard refuses it,
	// nothing of the first try is written, and the batch lands after the other's event.
	other := &Writer{DB: w.DB}
	_, err := other.Commit(ctx, []*eventv1.Event{ev("a", "b1", domain.EventStepSkipped)}, nil)
	require.NoError(t, err)
	res = commit(ev("a", "a4", domain.EventStepEnter))
	stats(2, 1)
	require.Equal(t, []Outcome{Committed}, res.Outcomes)
	require.Equal(t, int64(5), res.Notices[0].GetSeq())
	ids, last = logOf(t, w, "a")
	require.Equal(t, []string{"a1", "a2", "a3", "b1", "a4"}, ids)
	require.Equal(t, int64(5), last)

	// A redelivered event: the insert meets the log's key, and the retry finds it logged.
	// (Without a decider the lock reads no event id, so a commit of duplicates alone
	// leaves no head: the next commit goes in two round trips.)
	res = commit(ev("a", "a4", domain.EventStepEnter))
	stats(3, 2)
	require.Equal(t, []Outcome{Duplicate}, res.Outcomes)
	require.Equal(t, int64(5), res.Notices[0].GetSeq())
	commit(ev("a", "a5", domain.EventStepEnter))
	stats(3, 2)

	// A command's second outcome: the guard finds its rival in the log (whoever wrote it),
	// and the retry supersedes the outcome.
	done := ev("a", domain.EventID("c1", domain.EventCommandCompleted), domain.EventCommandCompleted)
	done.CommandId = "c1"
	res = commit(done)
	stats(4, 2)
	require.Equal(t, []Outcome{Committed}, res.Outcomes)
	rival := &eventv1.Event{ExecutionId: "a", EventId: domain.OutcomeRival(done), Tenant: "t1", Type: domain.EventCommandFailed, CommandId: "c1"}
	require.Equal(t, done.GetEventId(), domain.OutcomeRival(rival), "the test's two outcomes are each other's rivals")
	res = commit(rival)
	stats(5, 3)
	require.Equal(t, []Outcome{Superseded}, res.Outcomes, "the guard finds the logged rival whoever wrote it")
	rival2 := &eventv1.Event{ExecutionId: "a", EventId: domain.EventID("c2", domain.EventCommandFailed), Tenant: "t1", Type: domain.EventCommandFailed, CommandId: "c2"}
	done2 := ev("a", domain.OutcomeRival(rival2), domain.EventCommandCompleted)
	done2.CommandId = "c2"
	_, err = other.Commit(ctx, []*eventv1.Event{done2}, nil)
	require.NoError(t, err)
	res = commit(rival2)
	stats(5, 3) // no head: the last commit added nothing
	require.Equal(t, []Outcome{Superseded}, res.Outcomes)

	// The terminal event, predicted, ends the head: what follows it is classified under
	// the lock.
	commit(ev("a", "a8", domain.EventStepEnter))
	stats(5, 3)
	commit(ev("a", "a9", domain.EventPlaybookCompleted))
	stats(6, 3)
	res = commit(ev("a", "a10", domain.EventStepEnter))
	stats(6, 3)
	require.Equal(t, []Outcome{Rejected}, res.Outcomes)
	ids, last = logOf(t, w, "a")
	require.Equal(t, []string{"a1", "a2", "a3", "b1", "a4", "a5", done.GetEventId(), done2.GetEventId(), "a8", "a9"}, ids)
	require.Equal(t, int64(10), last)

	// Another tenant's event is not predicted: the lock classifies it.
	stranger := ev("b", "x1", domain.EventStepEnter)
	stranger.Tenant = "t2"
	commit(ev("b", "b0", domain.EventPlaybookStarted))
	res = commit(stranger)
	stats(6, 3)
	require.Equal(t, []Outcome{Rejected}, res.Outcomes)
}

// A batch large enough to COPY goes with its guards run first: redelivered whole, the COPY
// meets the log's key and the batch is found duplicate by the retry, not failed.
func TestOneRoundTripCopiesLargeBatchesAndFallsBackOnTheirRedelivery(t *testing.T) {
	ctx := context.Background()
	w := newWriter(t)
	_, err := w.Commit(ctx, []*eventv1.Event{ev("a", "a0", domain.EventPlaybookStarted)}, nil)
	require.NoError(t, err)
	_, err = w.Commit(ctx, []*eventv1.Event{ev("a", "a00", domain.EventStepEnter)}, nil)
	require.NoError(t, err)

	var batch []*eventv1.Event
	for i := range copyMin + 6 {
		batch = append(batch, ev("a", fmt.Sprintf("a%04d", i+1), domain.EventStepEnter))
	}
	res, err := w.Commit(ctx, batch, nil)
	require.NoError(t, err)
	require.Equal(t, len(batch), res.Committed)
	taken, missed := w.FastStats()
	require.Equal(t, [2]uint64{2, 0}, [2]uint64{taken, missed})

	// The heads stay (a duplicate-only commit without a decider reads no event id, so
	// commit one more event to renew them), then the batch comes again.
	_, err = w.Commit(ctx, []*eventv1.Event{ev("a", "a999", domain.EventStepEnter)}, nil)
	require.NoError(t, err)
	res, err = w.Commit(ctx, batch, nil)
	require.NoError(t, err)
	require.Zero(t, res.Committed)
	for _, o := range res.Outcomes {
		require.Equal(t, Duplicate, o)
	}
	taken, missed = w.FastStats()
	require.Equal(t, [2]uint64{4, 1}, [2]uint64{taken, missed})
	ids, last := logOf(t, w, "a")
	require.Len(t, ids, len(batch)+3)
	require.Equal(t, int64(len(batch)+3), last)
}
