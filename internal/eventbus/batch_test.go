package eventbus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/testkit"
)

func newStreams(t *testing.T) jetstream.JetStream {
	t.Helper()
	_, js := testkit.StartJetStream(t)
	return js
}

// runBatcher runs a Batcher of loops loops over new streams of four partitions until the
// test ends.
func runBatcher(t *testing.T, loops int) (jetstream.JetStream, *Batcher, context.Context) {
	t.Helper()
	js := newStreams(t)
	b := NewBatcher(js, 4, loops)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go b.Run(ctx)
	return js, b, ctx
}

// streamEvents reads every NOETL_EVENTS message back: the events each holds, by message.
func streamEvents(t *testing.T, js jetstream.JetStream) [][]*eventv1.Event {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, natsx.StreamEvents)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var out [][]*eventv1.Event
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		bodies, err := Bodies(m.Header, m.Data)
		require.NoError(t, err)
		require.Equal(t, len(bodies), Count(m.Header), "message %d: header count", seq)
		var evs []*eventv1.Event
		for _, b := range bodies {
			ev := &eventv1.Event{}
			require.NoError(t, proto.Unmarshal(b, ev))
			require.Equal(t, natsx.EventSubject(ev.GetExecutionId(), 4), m.Subject, "an event travels on its partition's subject")
			evs = append(evs, ev)
		}
		out = append(out, evs)
	}
	return out
}

// TestBatcherPacksWaitingEventsByPartition checks that the events waiting together go out
// as one batch message per partition, every event once, each caller's in its order.
func TestBatcherPacksWaitingEventsByPartition(t *testing.T) {
	js := newStreams(t)
	b := NewBatcher(js, 4, 1)
	const callers = 300 // more than one round's MaxBatchEvents
	var wg sync.WaitGroup
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() {
			exec := fmt.Sprintf("x%d", i%7)
			errs[i] = b.Publish(context.Background(), []*eventv1.Event{
				{EventId: fmt.Sprintf("%d/a", i), ExecutionId: exec, Type: "a"},
				{EventId: fmt.Sprintf("%d/b", i), ExecutionId: exec, Type: "b"},
			})
		})
	}
	// Every caller waits before the loop starts, so the rounds are full.
	testkit.WaitFor(t, 10*time.Second, func() error {
		if n := b.queue.Waiting(); n != callers {
			return fmt.Errorf("%d callers waiting", n)
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Run(ctx)
	}()
	wg.Wait()
	cancel()
	<-done
	for i, err := range errs {
		require.NoError(t, err, "caller %d", i)
	}
	msgs := streamEvents(t, js)
	seen := map[string]int{}
	batches := 0
	for _, evs := range msgs {
		if len(evs) > 1 {
			batches++
		}
		require.LessOrEqual(t, len(evs), MaxBatchEvents)
		for k, ev := range evs {
			seen[ev.GetEventId()]++
			if ev.GetType() == "a" { // a caller's second event follows its first
				require.Less(t, k+1, len(evs), "event %s ends its message", ev.GetEventId())
				require.Equal(t, ev.GetEventId()[:len(ev.GetEventId())-1]+"b", evs[k+1].GetEventId())
			}
		}
	}
	require.Len(t, seen, 2*callers)
	for id, n := range seen {
		require.Equal(t, 1, n, "event %s", id)
	}
	// Three rounds (of 128, 128 and 44 callers) over at most four partitions each.
	require.LessOrEqual(t, len(msgs), 3*4)
	require.Positive(t, batches)
}

// TestBatcherLonePublishIsAPlainEvent checks that an event published alone travels as
// Publish sends it (no batch header, its own id as the deduplication id), so a retried
// publish of it is dropped by the stream.
func TestBatcherLonePublishIsAPlainEvent(t *testing.T) {
	js, b, ctx := runBatcher(t, 2)
	ev := &eventv1.Event{EventId: "e1", ExecutionId: "x1", Type: "a"}
	require.NoError(t, b.Publish(ctx, []*eventv1.Event{ev}))
	require.NoError(t, b.Publish(ctx, []*eventv1.Event{ev}))
	s, err := js.Stream(ctx, natsx.StreamEvents)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, info.State.Msgs, "the retried publish is a duplicate")
	m, err := s.GetMsg(ctx, 1)
	require.NoError(t, err)
	require.Empty(t, m.Header.Get(BatchHeader))
	require.Equal(t, "e1", m.Header.Get(jetstream.MsgIDHeader))
}

// TestBatcherRefusesAnEventTooLarge checks that an event over the message limit fails its
// own caller with ErrMessageTooLarge and publishes none of that caller's events.
func TestBatcherRefusesAnEventTooLarge(t *testing.T) {
	js, b, ctx := runBatcher(t, 1)
	big := &eventv1.Event{EventId: "big", ExecutionId: "x1", Type: "a", PayloadJson: make([]byte, natsx.MaxMessageBytes+1)}
	err := b.Publish(ctx, []*eventv1.Event{{EventId: "small", ExecutionId: "x1", Type: "a"}, big})
	require.True(t, errors.Is(err, natsx.ErrMessageTooLarge), "got %v", err)
	require.Empty(t, streamEvents(t, js))
}

// TestBatcherStopFailsWaitingCalls checks that a call waiting when Run stops gets Run's
// context error instead of hanging.
func TestBatcherStopFailsWaitingCalls(t *testing.T) {
	js := newStreams(t)
	b := NewBatcher(js, 4, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- b.Publish(context.Background(), []*eventv1.Event{{EventId: "e1", ExecutionId: "x1", Type: "a"}})
	}()
	testkit.WaitFor(t, 10*time.Second, func() error {
		if b.queue.Waiting() == 0 {
			return errors.New("no call waiting yet")
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b.Run(ctx)
	require.ErrorIs(t, <-errc, context.Canceled)
}

// TestBodies checks how a message is read: a plain event as itself, a batch as its events,
// and a batch that does not decode as an error.
func TestBodies(t *testing.T) {
	got, err := Bodies(nil, []byte("x"))
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("x")}, got)
	require.Equal(t, 1, Count(nil))
	data, err := proto.Marshal(&eventv1.EventBatch{Events: [][]byte{[]byte("a"), []byte("b")}})
	require.NoError(t, err)
	h := nats.Header{BatchHeader: []string{"2"}}
	got, err = Bodies(h, data)
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("a"), []byte("b")}, got)
	require.Equal(t, 2, Count(h))
	_, err = Bodies(h, []byte{0xff, 0xff})
	require.ErrorIs(t, err, ErrMalformedBatch)
	_, err = Bodies(h, nil)
	require.ErrorIs(t, err, ErrMalformedBatch)
	require.Equal(t, 1, Count(nats.Header{BatchHeader: []string{"x"}}))
}
