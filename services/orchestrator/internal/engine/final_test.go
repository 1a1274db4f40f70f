package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
)

// ended is the state of execution x after its start and its end at seq 2, and the
// terminal event.
func ended(t *testing.T) (*sbv1.ExecutionState, *eventv1.Event) {
	st := started(t)
	end := ev(2, domain.EventPlaybookCompleted, "")
	require.NoError(t, domain.Apply(st, end))
	require.True(t, domain.IsTerminalStatus(st.GetStatus()))
	return st, end
}

// A shard hands out the state an execution ended in only at the head its terminal notice
// named, of the tenant asked for, and always a copy.
func TestFinalStateIsHandedOutOnlyAtTheTerminalHead(t *testing.T) {
	s := &shard{states: newStateCache(1 << 20)}
	st, end := ended(t)
	s.states.put(st)
	s.states.speculate("x", 2, end.GetEventId(), 10) // the end decided inside its commit

	ask := func(tenant string, seq int64, lastID string) *sbv1.ExecutionState {
		return s.final(&finalRequest{id: "x", tenant: tenant, seq: seq, lastID: lastID})
	}
	// Before the terminal notice reached the engine, the speculated state stands at the
	// head the waiter's notice named: the log holds it.
	got := ask("t", 2, end.GetEventId())
	require.True(t, proto.Equal(st, got))
	got.Seq = 99
	require.EqualValues(t, 2, st.GetSeq(), "a copy: the cached state is the shard's")

	require.Nil(t, ask("t", 2, "another-event"), "another event ended the log (say a cancellation)")
	require.Nil(t, ask("t", 3, end.GetEventId()), "the log ended further on")
	require.Nil(t, ask("other", 2, end.GetEventId()), "another tenant's execution")
	require.NotNil(t, ask("", 2, end.GetEventId()), "no tenant asked: any")
	require.Nil(t, s.final(&finalRequest{id: "y", seq: 2, lastID: end.GetEventId()}), "nothing held")

	// A state at the head that has not ended (a terminal notice does not name it) is
	// never handed out.
	s2 := &shard{states: newStateCache(1 << 20)}
	s2.states.put(started(t))
	require.Nil(t, s2.final(&finalRequest{id: "x", seq: 1, lastID: "playbook.started"}))
}

// The terminal notice moves the state to the ended keep when it confirms it: by naming its
// head (an end decided inside the commit carries no events) or by carrying the events up
// to it. A notice that contradicts what the state speculated keeps nothing.
func TestTerminalNoticeKeepsTheStateItConfirms(t *testing.T) {
	t.Run("named head", func(t *testing.T) {
		s := &shard{states: newStateCache(1 << 20)}
		st, end := ended(t)
		s.states.put(st)
		s.states.speculate("x", 2, end.GetEventId(), 10)
		s.keepEnded(&eventv1.CommitNotice{ExecutionId: "x", Seq: 2, Terminal: true, LastEventId: end.GetEventId()}, 0)
		require.Nil(t, s.states.get("x"), "moved out of the cache of running states")
		require.NotNil(t, s.final(&finalRequest{id: "x", seq: 2, lastID: end.GetEventId()}))
	})
	t.Run("carried events", func(t *testing.T) {
		s := &shard{states: newStateCache(1 << 20)}
		s.states.put(started(t))
		end := ev(2, domain.EventPlaybookCompleted, "")
		n, size := carried(end)
		n.Terminal = true
		s.keepEnded(n, size)
		require.NotNil(t, s.final(&finalRequest{id: "x", seq: 2, lastID: end.GetEventId()}))
	})
	t.Run("contradicted", func(t *testing.T) {
		s := &shard{states: newStateCache(1 << 20)}
		st, end := ended(t)
		s.states.put(st)
		s.states.speculate("x", 2, end.GetEventId(), 10)
		// The log ended at seq 2 with another event: the speculated end was not committed.
		s.keepEnded(&eventv1.CommitNotice{ExecutionId: "x", Seq: 2, Terminal: true, LastEventId: "playbook.cancelled"}, 0)
		require.Nil(t, s.ended.get("x"))
		require.Nil(t, s.final(&finalRequest{id: "x", seq: 2, lastID: "playbook.cancelled"}))
	})
	t.Run("gap", func(t *testing.T) {
		s := &shard{states: newStateCache(1 << 20)}
		s.states.put(started(t))
		// The notice names a head the state is not at and carries nothing to reach it.
		s.keepEnded(&eventv1.CommitNotice{ExecutionId: "x", Seq: 5, Terminal: true, LastEventId: "e5"}, 0)
		require.Nil(t, s.ended.get("x"))
	})
}

// The ended keep is bounded in count and bytes, forgetting the oldest first, and keeps
// nothing larger than its budget.
func TestEndedKeepIsBounded(t *testing.T) {
	var k endedKeep
	for i := range endedKeepCount + 10 {
		k.keep(&sbv1.ExecutionState{ExecutionId: string(rune('a'+i%26)) + string(rune(i))}, 1)
	}
	require.Len(t, k.order, endedKeepCount)
	require.Len(t, k.byID, endedKeepCount)
	require.Nil(t, k.get("a"+string(rune(0))), "the oldest went first")

	k = endedKeep{}
	k.keep(&sbv1.ExecutionState{ExecutionId: "big"}, endedKeepBytes+1)
	require.Nil(t, k.get("big"))
	k.keep(&sbv1.ExecutionState{ExecutionId: "a"}, endedKeepBytes/2)
	k.keep(&sbv1.ExecutionState{ExecutionId: "b"}, endedKeepBytes/2)
	k.keep(&sbv1.ExecutionState{ExecutionId: "c"}, endedKeepBytes/2)
	require.Nil(t, k.get("a"))
	require.NotNil(t, k.get("b"))
	require.NotNil(t, k.get("c"))
	require.LessOrEqual(t, k.bytes, int64(endedKeepBytes))
	k.keep(&sbv1.ExecutionState{ExecutionId: "c", Seq: 2}, 1) // kept again: replaced
	require.EqualValues(t, 2, k.get("c").GetSeq())
	require.Len(t, k.order, 2)
	require.Equal(t, endedKeepBytes/2+1, int(k.bytes))
}

// FinalState asks the execution's shard, in order with its notices, and answers nil
// without shards (an engine not running) or when the caller leaves.
func TestFinalStateAsksTheExecutionsShard(t *testing.T) {
	e := &Engine{}
	require.Nil(t, e.FinalState(context.Background(), "x", "t", 2, "e"), "not running")

	shards := []*shard{{in: make(chan notice, 1), states: newStateCache(1 << 20)}, {in: make(chan notice, 1), states: newStateCache(1 << 20)}}
	st, end := ended(t)
	own := shards[shardOf("x", len(shards))]
	own.ended.keep(st, 10)
	e.setShards(shards)
	done := make(chan struct{})
	defer close(done)
	for _, s := range shards {
		go func() {
			for {
				select {
				case n := <-s.in:
					n.final.reply <- s.final(n.final)
				case <-done:
					return
				}
			}
		}()
	}
	got := e.FinalState(context.Background(), "x", "t", 2, end.GetEventId())
	require.True(t, proto.Equal(st, got))
	require.Nil(t, e.FinalState(context.Background(), "x", "t", 2, ""), "no head named: nothing to match")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e.setShards([]*shard{{in: make(chan notice)}}) // nobody reads it
	require.Nil(t, e.FinalState(ctx, "x", "t", 2, end.GetEventId()))
}
