package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/services/orchestrator/internal/decide"
)

// carried is a commit notice of execution x up to the last of evs, carrying them, and its
// encoded size, as the engine hands them to applyCarried.
func carried(evs ...*eventv1.Event) (*eventv1.CommitNotice, int64) {
	n := &eventv1.CommitNotice{ExecutionId: "x", Tenant: "t", Events: evs}
	if len(evs) > 0 {
		n.Seq = evs[len(evs)-1].GetSeq()
	}
	return n, int64(proto.Size(n))
}

func ev(seq int64, typ, step string) *eventv1.Event {
	e := &eventv1.Event{EventId: typ + step, ExecutionId: "x", Tenant: "t", Seq: seq, Type: typ, Step: step}
	if typ == domain.EventPlaybookStarted {
		e.PayloadJson = []byte(`{"path":"p","version":1}`)
	}
	return e
}

func started(t *testing.T) *sbv1.ExecutionState {
	st := domain.NewState("x")
	require.NoError(t, domain.Apply(st, ev(1, domain.EventPlaybookStarted, "")))
	return st
}

// The events a notice carries advance the cached state when they continue it gap-free,
// those it already holds are skipped, and a notice that leaves a gap leaves the state to be
// read from the log.
func TestNoticeEventsAdvanceTheCachedState(t *testing.T) {
	c := newStateCache(1 << 20)
	require.False(t, c.applyCarried(carried(ev(2, domain.EventStepEnter, "a"))), "nothing cached: nothing to advance")
	require.Nil(t, c.get("x"))

	// The notice of an execution's start builds its state from nothing.
	require.True(t, c.applyCarried(carried(ev(1, domain.EventPlaybookStarted, ""))))
	require.EqualValues(t, 1, c.get("x").GetSeq())
	require.Equal(t, "p", c.get("x").GetPlaybookPath())
	c.drop("x")

	c.put(started(t))
	require.True(t, c.applyCarried(carried(ev(2, domain.EventStepEnter, "a"), ev(3, domain.EventStepSkipped, "b"))))
	st := c.get("x")
	require.EqualValues(t, 3, st.GetSeq())
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_RUNNING, st.GetSteps()["a"].GetStatus())

	// A redelivered notice overlapping the state: only what is new is folded.
	require.True(t, c.applyCarried(carried(ev(3, domain.EventStepSkipped, "b"), ev(4, domain.EventStepSkipped, "c"))))
	require.EqualValues(t, 4, c.get("x").GetSeq())
	require.True(t, c.applyCarried(carried(ev(2, domain.EventStepEnter, "a"))), "an old notice: the state is past it")

	// A notice after a gap (one this replica never received) changes nothing.
	require.False(t, c.applyCarried(carried(ev(6, domain.EventStepSkipped, "d"))))
	require.EqualValues(t, 4, c.get("x").GetSeq())
	// Nor does a notice without its events (a batch over the notice budget).
	require.False(t, c.applyCarried(&eventv1.CommitNotice{ExecutionId: "x", Seq: 5}, 0))
	require.NotNil(t, c.get("x"), "kept, to be advanced from the log")
}

// The cached state's active steps follow the events folded into it: after the first
// decision's walk, a decision reads them from the index (no walk of every step), and they
// are those a walk finds.
func TestTheCachedStateKeepsItsActiveSteps(t *testing.T) {
	s := &shard{states: newStateCache(1 << 20)}
	st := started(t)
	s.states.put(st)
	e := s.states.entries["x"]
	require.False(t, e.active.Tracks(st), "nothing noted yet")
	require.Empty(t, activeOf(s, st).NeededCollections(), "the first decision walks the state")
	require.True(t, e.active.Tracks(st))

	require.True(t, s.states.applyCarried(carried(ev(2, domain.EventStepEnter, "a"), ev(3, domain.EventStepSkipped, "b"))))
	require.True(t, e.active.Tracks(st), "the notice's events were noted")
	require.Equal(t, decide.ActiveOf(st), activeOf(s, st))

	// A fold the cache did not see (the state advanced from the log): the next decision walks.
	require.NoError(t, domain.Apply(st, ev(4, domain.EventStepSkipped, "c")))
	require.False(t, e.active.Tracks(st))
	require.Equal(t, decide.ActiveOf(st), activeOf(s, st))
	require.True(t, e.active.Tracks(st))

	// A state that is not the cached one is walked.
	other := started(t)
	require.Equal(t, decide.ActiveOf(other), activeOf(s, other))
	require.Equal(t, decide.ActiveOf(other), activeOf(nil, other))
}

// A fold error drops the state, which is then read afresh.
func TestAFoldErrorDropsTheCachedState(t *testing.T) {
	c := newStateCache(1 << 20)
	c.put(started(t))
	bad := ev(2, domain.EventStepEnter, "a")
	bad.PayloadJson = []byte(`{not json`)
	require.False(t, c.applyCarried(carried(bad)))
	require.Nil(t, c.get("x"))
	require.Zero(t, c.bytes)
}

// The cache is bounded in bytes: a put or a fold that passes the budget drops what it
// holds, and a state larger than the budget is not kept at all.
func TestStateCacheIsBoundedInBytes(t *testing.T) {
	one := int64(len(mustSize(t)))
	c := newStateCache(3*one + one/2)
	for _, id := range []string{"a", "b", "c"} {
		st := started(t)
		st.ExecutionId = id
		c.put(st)
	}
	require.Len(t, c.entries, 3)
	require.LessOrEqual(t, c.bytes, c.budget)
	st := started(t)
	st.ExecutionId = "d"
	c.put(st)
	require.Len(t, c.entries, 1, "past the budget the cache starts over")
	require.NotNil(t, c.get("d"))

	huge := started(t)
	huge.ExecutionId = "e"
	huge.WorkloadJson = make([]byte, 4*one)
	c.put(huge)
	require.Nil(t, c.get("e"), "a state larger than the whole budget is not cached")
	require.LessOrEqual(t, c.bytes, c.budget)

	c.drop("d")
	require.Zero(t, c.bytes)
}

func mustSize(t *testing.T) []byte {
	c := newStateCache(1 << 20)
	c.put(started(t))
	return make([]byte, c.bytes)
}

// Speculated events are confirmed by the notice that carries them; a notice that carries
// another event at a speculated seq, or does not carry one it covers, drops the state.
func TestSpeculatedEventsAreConfirmedByNotices(t *testing.T) {
	fold := func(c *stateCache, evs ...*eventv1.Event) {
		for _, e := range evs {
			require.NoError(t, domain.Apply(c.get("x"), e))
			c.speculate("x", e.GetSeq(), e.GetEventId(), int64(proto.Size(e)))
		}
	}
	enterA, skipB, skipC := ev(2, domain.EventStepEnter, "a"), ev(3, domain.EventStepSkipped, "b"), ev(4, domain.EventStepSkipped, "c")

	c := newStateCache(1 << 20)
	c.put(started(t))
	fold(c, enterA, skipB, skipC)
	require.True(t, c.speculative("x"))
	// The first commit's notice confirms its two events; the third stays speculated.
	require.True(t, c.applyCarried(carried(enterA, skipB)))
	require.True(t, c.speculative("x"))
	require.EqualValues(t, 4, c.get("x").GetSeq())
	require.True(t, c.applyCarried(carried(skipC)))
	require.False(t, c.speculative("x"))
	require.EqualValues(t, 4, c.get("x").GetSeq())

	// Another event at a speculated seq: the log went otherwise.
	c.put(started(t))
	fold(c, enterA, skipB)
	require.False(t, c.applyCarried(carried(enterA, ev(3, domain.EventStepSkipped, "other"))))
	require.Nil(t, c.get("x"))

	// A notice over a speculated seq that carries no events cannot confirm it.
	c.put(started(t))
	fold(c, enterA)
	n, size := carried()
	n.Seq = 2
	require.False(t, c.applyCarried(n, size))
	require.Nil(t, c.get("x"))

	// Unconfirmed events are bounded.
	c.put(started(t))
	for i := range maxSpeculated {
		c.speculate("x", int64(i+2), "e", 1)
	}
	require.NotNil(t, c.get("x"))
	c.speculate("x", maxSpeculated+2, "e", 1)
	require.Nil(t, c.get("x"), "past maxSpeculated the state is dropped")
}

// A notice that carries no events (a commit over the notice budget) but names as the
// log's head an event the state speculated at that seq confirms the events speculated up
// to it; one that names another event there, or a head the state did not speculate,
// confirms nothing and the state is dropped as before.
func TestANoticeHeadConfirmsWhatWasSpeculatedUpToIt(t *testing.T) {
	fold := func(c *stateCache, evs ...*eventv1.Event) {
		for _, e := range evs {
			require.NoError(t, domain.Apply(c.get("x"), e))
			c.speculate("x", e.GetSeq(), e.GetEventId(), int64(proto.Size(e)))
		}
	}
	head := func(seq int64, lastID string) (*eventv1.CommitNotice, int64) {
		n := &eventv1.CommitNotice{ExecutionId: "x", Tenant: "t", Seq: seq, LastEventId: lastID}
		return n, int64(proto.Size(n))
	}
	enterA, skipB, skipC := ev(2, domain.EventStepEnter, "a"), ev(3, domain.EventStepSkipped, "b"), ev(4, domain.EventStepSkipped, "c")

	// The head the state stands at: everything is confirmed.
	c := newStateCache(1 << 20)
	c.put(started(t))
	fold(c, enterA, skipB)
	require.True(t, c.applyCarried(head(3, skipB.GetEventId())))
	require.False(t, c.speculative("x"))
	require.EqualValues(t, 3, c.get("x").GetSeq())

	// A head inside what was speculated (the state went on past that commit): the events
	// up to it are confirmed, the later one stays speculated, and the state is kept.
	c.put(started(t))
	fold(c, enterA, skipB, skipC)
	require.True(t, c.applyCarried(head(3, skipB.GetEventId())))
	require.True(t, c.speculative("x"))
	require.EqualValues(t, 4, c.get("x").GetSeq())
	require.True(t, c.applyCarried(head(4, skipC.GetEventId())))
	require.False(t, c.speculative("x"))

	// Another event at the head's seq: the log went otherwise.
	c.put(started(t))
	fold(c, enterA, skipB)
	require.False(t, c.applyCarried(head(3, "other")))
	require.Nil(t, c.get("x"))

	// A head past everything speculated, with no events carried: not confirmed.
	c.put(started(t))
	fold(c, enterA)
	require.False(t, c.applyCarried(head(3, skipB.GetEventId())))
	require.Nil(t, c.get("x"))

	// A notice without a head (an older materializer's) confirms nothing by it.
	c.put(started(t))
	fold(c, enterA)
	require.False(t, c.applyCarried(head(2, "")))
	require.Nil(t, c.get("x"))
}
