package eventbus_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/eventbus"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/testkit"
)

// Events go to their execution's partition subject under their id: the same event
// published twice is stored once, and PublishNewEvent says so.
// TestPublishPacksAPartitionsEventsAndDedupes checks that the events of one call share a
// batch message per partition (so a republished call is one message: the stream drops the
// copy), that a lone event travels plain under its id, and that PublishNew tells a repeat.
func TestPublishPacksAPartitionsEventsAndDedupes(t *testing.T) {
	_, js := testkit.StartJetStream(t)
	ctx := context.Background()
	evs := []*eventv1.Event{{EventId: "e1", ExecutionId: "x1", Type: "a"}, {EventId: "e2", ExecutionId: "x1", Type: "b"}}
	require.NoError(t, eventbus.Publish(ctx, js, 4, evs))
	require.NoError(t, eventbus.Publish(ctx, js, 4, evs)) // a retried decision: dropped
	dup, err := eventbus.PublishNew(ctx, js, 4, &eventv1.Event{EventId: "e3", ExecutionId: "x1", Type: "c"})
	require.NoError(t, err)
	require.False(t, dup)
	dup, err = eventbus.PublishNew(ctx, js, 4, &eventv1.Event{EventId: "e3", ExecutionId: "x1", Type: "c"})
	require.NoError(t, err)
	require.True(t, dup)

	s, err := js.Stream(ctx, natsx.StreamEvents)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, info.State.Msgs)
	want := [][]string{{"e1", "e2"}, {"e3"}}
	for seq := range want {
		m, err := s.GetMsg(ctx, uint64(seq+1))
		require.NoError(t, err)
		require.Equal(t, natsx.EventSubject("x1", 4), m.Subject)
		bodies, err := eventbus.Bodies(m.Header, m.Data)
		require.NoError(t, err)
		var got []string
		for _, b := range bodies {
			ev := &eventv1.Event{}
			require.NoError(t, proto.Unmarshal(b, ev))
			got = append(got, ev.GetEventId())
		}
		require.Equal(t, want[seq], got)
	}
	m, err := s.GetMsg(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, "e3", m.Header.Get(jetstream.MsgIDHeader), "a lone event is published under its own id")
	require.Empty(t, m.Header.Get(eventbus.BatchHeader))
}

// TestPublishBoundsEachBatch checks that more events of a partition than one batch holds
// go out as several messages, in order, and that an event over the message limit fails
// the publish before anything is published.
func TestPublishBoundsEachBatch(t *testing.T) {
	_, js := testkit.StartJetStream(t)
	ctx := context.Background()
	big := &eventv1.Event{EventId: "big", ExecutionId: "x1", Type: "a", PayloadJson: make([]byte, natsx.MaxMessageBytes+1)}
	require.ErrorIs(t, eventbus.Publish(ctx, js, 4, []*eventv1.Event{{EventId: "small", ExecutionId: "x1", Type: "a"}, big}), natsx.ErrMessageTooLarge)
	var evs []*eventv1.Event
	for i := range eventbus.MaxBatchEvents + 10 {
		evs = append(evs, &eventv1.Event{EventId: fmt.Sprintf("e%d", i), ExecutionId: "x1", Type: "a"})
	}
	require.NoError(t, eventbus.Publish(ctx, js, 4, evs))
	s, err := js.Stream(ctx, natsx.StreamEvents)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, info.State.Msgs, "nothing of the refused publish, then two batches")
	var got []string
	for seq := uint64(1); seq <= 2; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		bodies, err := eventbus.Bodies(m.Header, m.Data)
		require.NoError(t, err)
		for _, b := range bodies {
			ev := &eventv1.Event{}
			require.NoError(t, proto.Unmarshal(b, ev))
			got = append(got, ev.GetEventId())
		}
	}
	require.Len(t, got, len(evs))
	for i, id := range got {
		require.Equal(t, evs[i].GetEventId(), id)
	}
}
