package executions

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/testkit"
)

// A start that waits ends on its own subscription: here the one notice of the execution
// is already terminal, so the start's own wait for its commit folds the end, and the wait
// that follows takes it from there (Watch.Known) instead of waiting out its time. It
// reads no head and the final state once, at the terminal seq.
func TestStartThatWaitsEndsOnItsOwnSubscription(t *testing.T) {
	nc, js := testkit.StartJetStream(t)
	l := &headLog{execs: map[string]*sbv1.ExecutionState{}}
	s := &Service{NC: nc, JS: js, Partitions: 16, State: l, StartTimeout: 30 * time.Second, Waiters: make(chan struct{}, 1)}

	// The test is the materializer: when the start is published it commits the whole
	// execution at once and sends one terminal notice.
	started := make(chan string, 1)
	sub, err := nc.Subscribe("noetl.events.>", func(m *nats.Msg) {
		ev := &eventv1.Event{}
		if proto.Unmarshal(m.Data, ev) == nil && ev.GetType() == "playbook.started" {
			started <- ev.GetExecutionId()
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())
	// The test waits for this commit to finish before it ends: its connection closes
	// at cleanup, and a flush still under way would fail on it.
	committed := make(chan struct{})
	go func() {
		defer close(committed)
		id := <-started
		l.mu.Lock()
		l.execs[id] = &sbv1.ExecutionState{ExecutionId: id, Tenant: "t", Seq: 5, Status: eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING}
		l.mu.Unlock()
		l.commit(t, nc, id, 5, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED)
	}()

	wait, release := s.reserveWait(time.Minute)
	require.Equal(t, time.Minute, wait)
	id, existing, watch, err := s.publishStartWatched(context.Background(), "t", "", "", []byte(`{"path":"p","version":1}`), nil, nil, true)
	require.NoError(t, err)
	require.False(t, existing)
	require.NotNil(t, watch, "a start that waits keeps its subscription")
	t0 := time.Now()
	st := s.awaitStarted(context.Background(), id, "t", watch, wait)
	release()
	select {
	case <-committed:
	case <-time.After(30 * time.Second):
		t.Fatal("the start was never seen by the test's materializer")
	}
	require.NotNil(t, st, "the end was seen")
	require.Less(t, time.Since(t0), wait, "the wait took the end its start had folded")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, st.GetStatus())
	require.Equal(t, int64(5), st.GetSeq())
	require.Equal(t, 0, l.heads, "no head read")
	require.Equal(t, []int64{5}, l.states, "one state read, at the terminal seq")
}

// A start that asks to wait while every wait is taken starts alone: no wait is kept, and
// giving back what it did not take leaves the others' waits alone.
func TestStartThatWaitsFindsNoRoomAndStartsAlone(t *testing.T) {
	s := &Service{Waiters: make(chan struct{}, 1)}
	wait, release := s.reserveWait(time.Minute)
	require.Equal(t, time.Minute, wait)
	none, releaseNone := s.reserveWait(time.Minute)
	require.Zero(t, none, "the one wait is taken")
	releaseNone()
	require.Len(t, s.Waiters, 1, "the first start still holds its wait")
	release()
	require.Empty(t, s.Waiters)
	unasked, releaseUnasked := s.reserveWait(0)
	require.Zero(t, unasked)
	releaseUnasked()
	require.Empty(t, s.Waiters, "a start without a wait takes none")
}
