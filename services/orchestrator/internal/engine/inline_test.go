package engine

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/domain"
)

// An execution the engine cannot decide on exactly the state the log holds is answered
// undecided, and a cached state that does not stand where the materializer's lock says is
// dropped, so the notice's decision reads it afresh.
func TestInlineDecisionRefusals(t *testing.T) {
	e := New(Config{}, slog.New(slog.DiscardHandler), nil, nil, nil, prometheus.NewRegistry())
	ctx := context.Background()

	// Not running: every execution undecided.
	resp := e.DecideCommitting(ctx, &orchv1.DecideCommittingRequest{Executions: []*orchv1.CommittingExecution{{ExecutionId: "x"}}})
	require.Len(t, resp.GetDecisions(), 1)
	require.False(t, resp.GetDecisions()[0].GetDecided())
	require.Equal(t, "not_running", resp.GetDecisions()[0].GetReason())

	s := &shard{decided: map[string]int64{}, states: newStateCache(1 << 20)}
	ask := func(x *orchv1.CommittingExecution) *orchv1.Decision {
		return e.decideInline(ctx, s, &inlineRequest{ctx: ctx, exec: x})
	}
	outcome := ev(3, domain.EventCommandCompleted, "a")

	d := ask(&orchv1.CommittingExecution{ExecutionId: "x", Tenant: "t", SeqBefore: 2, LastEventId: "step.entera"})
	require.Equal(t, "no_events", d.GetReason())
	d = ask(&orchv1.CommittingExecution{ExecutionId: "x", Tenant: "t", SeqBefore: 2, LastEventId: "step.entera", Events: []*eventv1.Event{outcome}})
	require.Equal(t, "not_cached", d.GetReason())

	// Cached at another seq, or with another last event: dropped.
	st := started(t)
	require.NoError(t, domain.Apply(st, ev(2, domain.EventStepEnter, "a")))
	s.states.put(st)
	d = ask(&orchv1.CommittingExecution{ExecutionId: "x", Tenant: "t", SeqBefore: 2, LastEventId: "other", Events: []*eventv1.Event{outcome}})
	require.Equal(t, "moved", d.GetReason())
	require.Nil(t, s.states.get("x"))
	s.states.put(st)
	d = ask(&orchv1.CommittingExecution{ExecutionId: "x", Tenant: "t", SeqBefore: 5, LastEventId: "step.entera", Events: []*eventv1.Event{outcome}})
	require.Equal(t, "moved", d.GetReason())
	require.Nil(t, s.states.get("x"))

	// Committing events that do not continue the state, or of another tenant: dropped.
	s.states.put(st)
	d = ask(&orchv1.CommittingExecution{ExecutionId: "x", Tenant: "t", SeqBefore: 2, LastEventId: "step.entera", Events: []*eventv1.Event{ev(4, domain.EventCommandCompleted, "a")}})
	require.Equal(t, "gap", d.GetReason())
	require.Nil(t, s.states.get("x"))
	st = started(t)
	require.NoError(t, domain.Apply(st, ev(2, domain.EventStepEnter, "a")))
	s.states.put(st)
	d = ask(&orchv1.CommittingExecution{ExecutionId: "x", Tenant: "other", SeqBefore: 2, LastEventId: "step.entera", Events: []*eventv1.Event{outcome}})
	require.Equal(t, "tenant", d.GetReason())
	require.Nil(t, s.states.get("x"))

	// A request the materializer gave up on is not decided.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	d = e.decideInline(ctx, s, &inlineRequest{ctx: gone, exec: &orchv1.CommittingExecution{ExecutionId: "x", Events: []*eventv1.Event{outcome}}})
	require.Equal(t, "expired", d.GetReason())

	// A committing terminal event is decided with nothing to follow it, and speculated; the
	// state's index of active steps noted it.
	st = started(t)
	s.states.put(st)
	activeOf(s, st)
	d = ask(&orchv1.CommittingExecution{ExecutionId: "x", Tenant: "t", SeqBefore: 1, LastEventId: "playbook.started", Events: []*eventv1.Event{ev(2, domain.EventPlaybookCompleted, "")}})
	require.True(t, d.GetDecided())
	require.Empty(t, d.GetEvents())
	require.True(t, s.states.speculative("x"))
	require.True(t, s.states.entries["x"].active.Tracks(st))
}

// A commit whose decision was taken inside it sends the orchestrator no notice: the next
// request, naming the head the speculated events lead to, confirms them, so an execution
// decided inline step after step keeps its cached state however long it runs.
func TestInlineRequestConfirmsWhatTheStateSpeculated(t *testing.T) {
	e := New(Config{}, slog.New(slog.DiscardHandler), nil, nil, nil, prometheus.NewRegistry())
	ctx := context.Background()
	s := &shard{decided: map[string]int64{}, states: newStateCache(1 << 20)}
	ask := func(x *orchv1.CommittingExecution) *orchv1.Decision {
		return e.decideInline(ctx, s, &inlineRequest{ctx: ctx, exec: x})
	}
	// As many speculated events as a state may hold unconfirmed, with no notice since.
	st := started(t)
	s.states.put(st)
	last := ""
	for i := range maxSpeculated {
		next := ev(st.GetSeq()+1, domain.EventCommandStarted, "a")
		next.EventId = fmt.Sprintf("e%d", i)
		require.NoError(t, domain.Apply(st, next))
		s.states.speculate("x", next.GetSeq(), next.GetEventId(), 1)
		last = next.GetEventId()
	}
	require.NotNil(t, s.states.get("x"))
	seq := st.GetSeq()

	// A request at the head they lead to confirms them: its own committing event is then
	// the only one speculated, where without the confirmation it would pass the bound.
	d := ask(&orchv1.CommittingExecution{ExecutionId: "x", Tenant: "t", SeqBefore: seq, LastEventId: last, Events: []*eventv1.Event{ev(seq+1, domain.EventPlaybookCompleted, "")}})
	require.True(t, d.GetDecided(), d.GetReason())
	require.NotNil(t, s.states.get("x"))
	require.Len(t, s.states.entries["x"].spec, 1)

	// A request from an older head: the log went otherwise than speculated, the state goes.
	d = ask(&orchv1.CommittingExecution{ExecutionId: "x", Tenant: "t", SeqBefore: seq, LastEventId: last, Events: []*eventv1.Event{ev(seq+1, domain.EventPlaybookCompleted, "")}})
	require.Equal(t, "moved", d.GetReason())
	require.Nil(t, s.states.get("x"))
}

// A decision too large to ride in its commit is kept for the notice path, which takes it on
// the same state only (its execution, seq and last event id), once; any other state
// decides afresh, and the kept one is forgotten either way.
func TestLargeDecisionIsTakenOnlyOnItsState(t *testing.T) {
	st := started(t)
	events := []*eventv1.Event{ev(0, domain.EventStepEnter, "a")}
	keep := func() *shard {
		return &shard{large: &largeDecision{id: "x", seq: st.GetSeq(), lastID: st.GetLastEventId(), events: events}}
	}
	s := keep()
	require.Equal(t, events, s.takeLarge(st))
	require.Nil(t, s.takeLarge(st), "taken once")

	moved := started(t)
	require.NoError(t, domain.Apply(moved, ev(2, domain.EventStepEnter, "a")))
	s = keep()
	require.Nil(t, s.takeLarge(moved), "another seq")
	require.Nil(t, s.large, "forgotten")
	other := started(t)
	other.ExecutionId = "y"
	require.Nil(t, keep().takeLarge(other), "another execution")
	other = started(t)
	other.LastEventId = "elsewhere"
	require.Nil(t, keep().takeLarge(other), "another last event")
	require.Nil(t, (*shard)(nil).takeLarge(st), "no shard (a reconcile's drive)")

	// The notice that asks for it must carry the events it followed as committed: a commit
	// retried at another time, or a notice without events, decides afresh.
	at := timestamppb.New(time.Unix(100, 0))
	kept := func() *shard {
		return &shard{large: &largeDecision{id: "x", seq: 1, lastID: "a", commitTime: at, events: events}}
	}
	carrying := func(ct *timestamppb.Timestamp) *eventv1.CommitNotice {
		return &eventv1.CommitNotice{ExecutionId: "x", Seq: 1, Events: []*eventv1.Event{{EventId: "a", Seq: 1, CommitTime: ct}}}
	}
	s = kept()
	s.keepLargeFor(carrying(timestamppb.New(time.Unix(100, 0))))
	require.NotNil(t, s.large, "the commit as speculated")
	s.keepLargeFor(&eventv1.CommitNotice{ExecutionId: "y"})
	require.NotNil(t, s.large, "another execution's notice leaves it")
	s.keepLargeFor(carrying(timestamppb.New(time.Unix(101, 0))))
	require.Nil(t, s.large, "a commit at another time")
	s = kept()
	s.keepLargeFor(&eventv1.CommitNotice{ExecutionId: "x", Seq: 1})
	require.Nil(t, s.large, "a notice without its events")
}

// answerBound is never below a decision's encoded size, however many and however large
// its events (up to the per-execution bound), so the call's bound holds without measuring
// the events again.
func TestAnswerBoundIsAnUpperBound(t *testing.T) {
	for _, sizes := range [][]int{{}, {0}, {10, 20, 30}, {1 << 20, 1 << 20, 1<<20 + 7}, {127, 128, 16383, 16384, 2097151}} {
		d := &orchv1.Decision{ExecutionId: "01a23f0c-68aa-7055-a14c-d9147bf0605a", Decided: true, Trace: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
		total := 0
		for i, n := range sizes {
			e := &eventv1.Event{EventId: fmt.Sprintf("e%d", i), PayloadJson: make([]byte, n)}
			d.Events = append(d.Events, e)
			total += proto.Size(e)
		}
		for range 200 { // and many small ones
			e := &eventv1.Event{EventId: "x"}
			d.Events = append(d.Events, e)
			total += proto.Size(e)
		}
		require.GreaterOrEqual(t, answerBound(d, total), proto.Size(d), "sizes %v", sizes)
	}
}
