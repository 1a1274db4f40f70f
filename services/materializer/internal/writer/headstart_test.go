package writer

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/domain"
)

// A one-round-trip commit with a decision to wait for sends its head (BEGIN, guards, the
// batch's own rows) first and the rest after the decision, in one transaction: it commits
// exactly what the commit without a head start would, and a head the log refuses writes
// nothing.
func TestHeadStartCommitsWhatOneRoundTripWould(t *testing.T) {
	ctx := context.Background()
	d := &decider{answer: next}
	w := newWriter(t)
	w.Decide = d
	commit := func(evs ...*eventv1.Event) *Result {
		t.Helper()
		res, err := w.Commit(ctx, evs, nil)
		require.NoError(t, err)
		return res
	}
	outcome := func(id string) *eventv1.Event {
		e := ev("a", id, domain.EventCommandCompleted)
		e.CommandId = id + "-cmd"
		return e
	}

	// A chain: the start commits in two round trips, each step after it with a head start.
	commit(ev("a", "a0", domain.EventPlaybookStarted))
	require.Zero(t, w.HeadStarts(), "a start is never predicted")
	want := []string{"a0", "a0-enter", "a0-issued"}
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("a%d", i)
		res := commit(outcome(id))
		require.Equal(t, []Outcome{Committed}, res.Outcomes)
		require.Equal(t, 3, res.Committed)
		require.Equal(t, 2, res.Decided)
		require.Len(t, res.Commands, 1)
		require.Equal(t, id+"-cmd", res.Commands[0].GetCommandId(), "the decision's command is forwarded")
		require.Equal(t, int64(3+3*i), res.Notices[0].GetSeq())
		want = append(want, id, id+"-enter", id+"-issued")
	}
	require.Equal(t, uint64(5), w.HeadStarts())
	ids, last := logOf(t, w, "a")
	require.Equal(t, want, ids, "in seq order, gap-free")
	require.Equal(t, int64(len(want)), last, "the projection moved with the log")
	taken, missed := w.FastStats()
	require.Equal(t, [2]uint64{5, 0}, [2]uint64{taken, missed})

	// A redelivered outcome: the head's insert meets the log's key, nothing of the attempt
	// is written, and the batch is committed again as a duplicate.
	res := commit(outcome("a5"))
	require.Equal(t, []Outcome{Duplicate}, res.Outcomes)
	require.Equal(t, uint64(6), w.HeadStarts())
	_, missed = w.FastStats()
	require.Equal(t, uint64(1), missed)
	ids, last = logOf(t, w, "a")
	require.Equal(t, want, ids)
	require.Equal(t, int64(len(want)), last)

	// The next outcome finds the head the lock read and goes in one round trip again.
	res = commit(outcome("a6"))
	require.Equal(t, 2, res.Decided)
	want = append(want, "a6", "a6-enter", "a6-issued")

	// Another writer moved the log: the head's guard aborts the transaction, and the batch
	// commits after the other's event.
	other := &Writer{DB: w.DB}
	_, err := other.Commit(ctx, []*eventv1.Event{ev("a", "b1", domain.EventStepSkipped)}, nil)
	require.NoError(t, err)
	want = append(want, "b1")
	starts := w.HeadStarts()
	res = commit(outcome("a7"))
	require.Equal(t, []Outcome{Committed}, res.Outcomes)
	require.Equal(t, starts+1, w.HeadStarts())
	_, missed = w.FastStats()
	require.Equal(t, uint64(2), missed)
	want = append(want, "a7") // the early answer, on the old head, is not taken
	ids, last = logOf(t, w, "a")
	require.Equal(t, want, ids)
	require.Equal(t, int64(len(want)), last)

	// A decision with rows enough to copy: the head is read first, and the rest is copied
	// inside the same transaction.
	commit(outcome("a8")) // on the head the lock found: decided, and the heads known again
	want = append(want, "a8", "a8-enter", "a8-issued")
	d.answer = func(x *orchv1.CommittingExecution) *orchv1.Decision {
		var evs []*eventv1.Event
		for k := range copyMin + 6 {
			e := ev(x.GetExecutionId(), fmt.Sprintf("wide-%d", k), domain.EventCommandIssued)
			e.CommandId = e.EventId + "-cmd"
			e.Command = &eventv1.Command{CommandId: e.CommandId, ExecutionId: x.GetExecutionId(), Tenant: "t1", Pool: "shared", IssuedEventId: e.EventId}
			evs = append(evs, e)
		}
		return &orchv1.Decision{ExecutionId: x.GetExecutionId(), Decided: true, Events: evs}
	}
	starts = w.HeadStarts()
	res = commit(outcome("a9"))
	require.Equal(t, starts+1, w.HeadStarts())
	require.Equal(t, copyMin+6, res.Decided)
	require.Len(t, res.Commands, copyMin+6)
	want = append(want, "a9")
	for k := range copyMin + 6 {
		want = append(want, fmt.Sprintf("wide-%d", k))
	}
	ids, last = logOf(t, w, "a")
	require.Equal(t, want, ids)
	require.Equal(t, int64(len(want)), last)

	// A batch of several executions is not latency-bound: it goes in one round trip
	// without a head start.
	commit(ev("z", "z0", domain.EventPlaybookStarted))
	starts = w.HeadStarts()
	taken, _ = w.FastStats()
	ze := ev("z", "z1", domain.EventCommandCompleted)
	ze.CommandId = "z1-cmd"
	d.answer = next
	res = commit(outcome("a10"), ze)
	require.Equal(t, 4, res.Decided, "both decided")
	require.Equal(t, starts, w.HeadStarts())
	taken2, _ := w.FastStats()
	require.Equal(t, taken+1, taken2, "in one round trip")
	want = append(want, "a10", "a10-enter", "a10-issued")

	// A decider that fails: the head's transaction commits the batch alone, and its notice
	// asks for the decision.
	d.err = errors.New("orchestrator unavailable")
	res = commit(outcome("a11"))
	require.Equal(t, 1, res.Committed)
	require.Zero(t, res.Decided)
	require.True(t, res.Notices[0].GetNeedsDecision())
	want = append(want, "a11")
	ids, last = logOf(t, w, "a")
	require.Equal(t, want, ids)
	require.Equal(t, int64(len(want)), last)
	_, missed = w.FastStats()
	require.Equal(t, uint64(2), missed, "no commit went twice since the guard's refusal")
}
