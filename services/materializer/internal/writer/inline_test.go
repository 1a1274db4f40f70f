package writer

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/testkit"
)

// decider answers DecideCommitting with answer and records each request (a stand-in for
// the orchestrator; the database is real).
type decider struct {
	mu     sync.Mutex
	reqs   []*orchv1.DecideCommittingRequest
	answer func(*orchv1.CommittingExecution) *orchv1.Decision
	err    error
}

func (d *decider) DecideCommitting(_ context.Context, req *orchv1.DecideCommittingRequest, _ ...grpc.CallOption) (*orchv1.DecideCommittingResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reqs = append(d.reqs, proto.Clone(req).(*orchv1.DecideCommittingRequest))
	if d.err != nil {
		return nil, d.err
	}
	resp := &orchv1.DecideCommittingResponse{}
	for _, x := range req.GetExecutions() {
		resp.Decisions = append(resp.Decisions, d.answer(x))
	}
	return resp, nil
}

func (d *decider) requests() []*orchv1.DecideCommittingRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*orchv1.DecideCommittingRequest(nil), d.reqs...)
}

// next answers an execution with the next step's entry and command.
func next(x *orchv1.CommittingExecution) *orchv1.Decision {
	id := x.GetExecutionId()
	n := len(x.GetEvents())
	enter := ev(id, x.GetEvents()[n-1].GetEventId()+"-enter", domain.EventStepEnter)
	issued := ev(id, x.GetEvents()[n-1].GetEventId()+"-issued", domain.EventCommandIssued)
	issued.CommandId = x.GetEvents()[n-1].GetEventId() + "-cmd"
	issued.Command = &eventv1.Command{CommandId: issued.CommandId, ExecutionId: id, Tenant: "t1", Pool: "shared", IssuedEventId: issued.EventId}
	return &orchv1.Decision{ExecutionId: id, Decided: true, Events: []*eventv1.Event{enter, issued}}
}

func TestCommitDecidesInline(t *testing.T) {
	ctx := context.Background()
	db, err := pgxext.Open(ctx, testkit.StartMigratedPostgres(t), 4)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	d := &decider{answer: next}
	w := &Writer{DB: db, Decide: d}

	// The start is decided in its own commit: the state before is the empty one.
	res, err := w.Commit(ctx, []*eventv1.Event{ev("a", "a1", domain.EventPlaybookStarted)}, nil)
	require.NoError(t, err)
	require.Equal(t, []Outcome{Committed}, res.Outcomes, "outcomes stay index-aligned with the input")
	require.Equal(t, 3, res.Committed)
	require.Equal(t, 2, res.Decided)
	require.Len(t, res.Commands, 1)
	require.Equal(t, "a1-cmd", res.Commands[0].GetCommandId())
	require.Len(t, res.EncodedCommands, 1, "index-aligned with the commands")
	enc := &eventv1.Command{}
	require.NoError(t, proto.Unmarshal(res.EncodedCommands[0], enc), "the command as the decision's body encodes it")
	require.True(t, proto.Equal(res.Commands[0], enc))
	require.Len(t, res.Notices, 1)
	n := res.Notices[0]
	require.Equal(t, int64(3), n.GetSeq())
	require.False(t, n.GetNeedsDecision(), "the decision is committed with its cause")
	require.Empty(t, res.Inline, "a start's notice goes to the orchestrators")
	require.Len(t, n.GetEvents(), 3)
	for i, want := range []string{"a1", "a1-enter", "a1-issued"} {
		require.Equal(t, want, n.GetEvents()[i].GetEventId())
		require.Equal(t, int64(i+1), n.GetEvents()[i].GetSeq())
		require.Nil(t, n.GetEvents()[i].GetCommand(), "a notice carries no command")
	}
	reqs := d.requests()
	require.Len(t, reqs, 1)
	x := reqs[0].GetExecutions()[0]
	require.Equal(t, int64(0), x.GetSeqBefore())
	require.Equal(t, int64(1), x.GetEvents()[0].GetSeq(), "the committing events carry their seq")
	require.NotNil(t, x.GetEvents()[0].GetCommitTime())

	// The outcome: the request names the seq and id of the last event under the lock.
	res, err = w.Commit(ctx, []*eventv1.Event{ev("a", "a4", domain.EventCommandCompleted)}, nil)
	require.NoError(t, err)
	require.Equal(t, 3, res.Committed)
	require.Equal(t, map[string]bool{"a": true}, res.Inline, "a step's notice is for waiters only")
	require.Empty(t, res.Notices[0].GetEvents(), "which need only its seq")
	require.Equal(t, "a4-issued", res.Notices[0].GetLastEventId(), "and its head: the decision's last event")
	x = d.requests()[1].GetExecutions()[0]
	require.Equal(t, int64(3), x.GetSeqBefore())
	require.Equal(t, "a1-issued", x.GetLastEventId())
	require.Equal(t, int64(4), x.GetEvents()[0].GetSeq())

	// Stored as published: no seq or commit time inside the bodies, one commit time for all.
	rows, err := db.Query(ctx, `SELECT seq, event_id, body, committed_at FROM noetl.event WHERE execution_id = 'a' ORDER BY seq`)
	require.NoError(t, err)
	var ids []string
	times := map[string]bool{}
	for rows.Next() {
		var seq int64
		var id string
		var body []byte
		var at any
		require.NoError(t, rows.Scan(&seq, &id, &body, &at))
		var e eventv1.Event
		require.NoError(t, proto.Unmarshal(body, &e))
		require.Equal(t, id, e.GetEventId())
		require.Zero(t, e.GetSeq())
		ids = append(ids, id)
		if seq >= 4 {
			times[at.(interface{ String() string }).String()] = true
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"a1", "a1-enter", "a1-issued", "a4", "a4-enter", "a4-issued"}, ids)
	require.Len(t, times, 1, "the outcome and its decision are one commit")

	// A redelivered outcome is a duplicate. It was asked about before the lock, on the
	// head this writer committed, as if new; the answer is not taken, its command is
	// forwarded again and its notice asks for a decision in case the first one was lost.
	res, err = w.Commit(ctx, []*eventv1.Event{ev("a", "a4", domain.EventCommandCompleted)}, nil)
	require.NoError(t, err)
	require.Equal(t, []Outcome{Duplicate}, res.Outcomes)
	require.Zero(t, res.Decided)
	require.True(t, res.Notices[0].GetNeedsDecision())
	require.Empty(t, res.Inline)
	require.Equal(t, "a4-issued", res.Notices[0].GetLastEventId(), "duplicates only: the head read under the lock")

	// A head another writer moved: the early answer is on a state the lock does not find,
	// so it is not taken, nor asked again (the orchestrator speculated it; the notice
	// decides).
	other := &Writer{DB: db}
	_, err = other.Commit(ctx, []*eventv1.Event{ev("a", "a8", domain.EventStepSkipped)}, nil)
	require.NoError(t, err)
	asked := len(d.requests())
	res, err = w.Commit(ctx, []*eventv1.Event{ev("a", "a9", domain.EventCommandCompleted)}, nil)
	require.NoError(t, err)
	require.Equal(t, 1, res.Committed)
	require.Zero(t, res.Decided)
	require.True(t, res.Notices[0].GetNeedsDecision())
	require.Empty(t, res.Inline, "an answer not taken")
	reqs = d.requests()
	require.Len(t, reqs, asked+1, "asked once, early")
	require.Equal(t, int64(6), reqs[asked].GetExecutions()[0].GetSeqBefore(), "on the head it committed")

	// The next batch is asked on the head the lock found, and taken.
	res, err = w.Commit(ctx, []*eventv1.Event{ev("a", "a10", domain.EventCommandCompleted)}, nil)
	require.NoError(t, err)
	require.Equal(t, 2, res.Decided)
	require.False(t, res.Notices[0].GetNeedsDecision())
}

func TestCommitInlineRefusalsAndFailures(t *testing.T) {
	ctx := context.Background()
	db, err := pgxext.Open(ctx, testkit.StartMigratedPostgres(t), 4)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	undecided := func(x *orchv1.CommittingExecution) *orchv1.Decision {
		return &orchv1.Decision{ExecutionId: x.GetExecutionId(), Reason: "not_cached"}
	}
	d := &decider{answer: undecided}
	w := &Writer{DB: db, Decide: d}

	// Not decided: the batch commits alone and its notice asks for the decision.
	res, err := w.Commit(ctx, []*eventv1.Event{ev("a", "a1", domain.EventPlaybookStarted)}, nil)
	require.NoError(t, err)
	require.Equal(t, 1, res.Committed)
	require.True(t, res.Notices[0].GetNeedsDecision())

	// An answer with an event of another execution, or one that needs its rival outcome
	// probed, or one already in the batch, is not taken.
	for name, bad := range map[string]func(*orchv1.CommittingExecution) *eventv1.Event{
		"other execution": func(*orchv1.CommittingExecution) *eventv1.Event { return ev("zzz", "z1", domain.EventStepEnter) },
		"rival outcome": func(x *orchv1.CommittingExecution) *eventv1.Event {
			e := ev(x.GetExecutionId(), "f-"+x.GetEvents()[0].GetEventId(), domain.EventCommandFailed)
			e.CommandId = "c1"
			return e
		},
		"in the batch": func(x *orchv1.CommittingExecution) *eventv1.Event {
			return proto.Clone(x.GetEvents()[0]).(*eventv1.Event)
		},
	} {
		d.answer = func(x *orchv1.CommittingExecution) *orchv1.Decision {
			return &orchv1.Decision{ExecutionId: x.GetExecutionId(), Decided: true, Events: []*eventv1.Event{bad(x)}}
		}
		id := "out-" + name
		res, err := w.Commit(ctx, []*eventv1.Event{ev("a", id, domain.EventCommandCompleted)}, nil)
		require.NoError(t, err, name)
		require.Equal(t, 1, res.Committed, name)
		require.Zero(t, res.Decided, name)
		require.True(t, res.Notices[0].GetNeedsDecision(), name)
		require.Empty(t, res.Inline, name)
	}

	// Events answered after a terminal one are refused like any.
	d.answer = func(x *orchv1.CommittingExecution) *orchv1.Decision {
		id := x.GetExecutionId()
		return &orchv1.Decision{ExecutionId: id, Decided: true, Events: []*eventv1.Event{ev(id, "done", domain.EventPlaybookCompleted), ev(id, "late", domain.EventStepEnter)}}
	}
	res, err = w.Commit(ctx, []*eventv1.Event{ev("a", "last", domain.EventCommandCompleted)}, nil)
	require.NoError(t, err)
	require.Equal(t, 2, res.Committed)
	require.True(t, res.Notices[0].GetTerminal())
	require.False(t, res.Notices[0].GetNeedsDecision())
	require.Empty(t, res.Inline, "an answer not committed whole")
	var n int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM noetl.event WHERE execution_id = 'a' AND event_id = 'late'`).Scan(&n))
	require.Zero(t, n)

	// A failed call commits the batch alone and rests the decider: the next batch is not
	// asked at all.
	d.err, d.answer = errors.New("orchestrator unavailable"), next
	res, err = w.Commit(ctx, []*eventv1.Event{ev("b", "b1", domain.EventPlaybookStarted)}, nil)
	require.NoError(t, err)
	require.Equal(t, 1, res.Committed)
	require.True(t, res.Notices[0].GetNeedsDecision())
	asked := len(d.requests())
	d.err = nil
	res, err = w.Commit(ctx, []*eventv1.Event{ev("c", "c1", domain.EventPlaybookStarted)}, nil)
	require.NoError(t, err)
	require.True(t, res.Notices[0].GetNeedsDecision())
	require.Len(t, d.requests(), asked, "a resting decider is not asked")
	w.decideRestUntil.Store(0)
	res, err = w.Commit(ctx, []*eventv1.Event{ev("d", "d1", domain.EventPlaybookStarted)}, nil)
	require.NoError(t, err)
	require.False(t, res.Notices[0].GetNeedsDecision(), "asked again after its rest")
	require.Equal(t, 2, res.Decided)
}
