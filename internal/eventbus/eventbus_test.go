package eventbus_test

import (
	"context"
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
func TestPublishEventsOnePerID(t *testing.T) {
	_, js, err := natsx.Connect(testkit.StartNATS(t), "test")
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, natsx.EnsureStreams(ctx, js, natsx.StreamConfig{}))
	evs := []*eventv1.Event{{EventId: "e1", ExecutionId: "x1", Type: "a"}, {EventId: "e2", ExecutionId: "x1", Type: "b"}}
	require.NoError(t, eventbus.Publish(ctx, js, 4, evs))
	require.NoError(t, eventbus.Publish(ctx, js, 4, evs[:1]))
	dup, err := eventbus.PublishNew(ctx, js, 4, evs[1])
	require.NoError(t, err)
	require.True(t, dup)
	dup, err = eventbus.PublishNew(ctx, js, 4, &eventv1.Event{EventId: "e3", ExecutionId: "x1", Type: "c"})
	require.NoError(t, err)
	require.False(t, dup)

	s, err := js.Stream(ctx, natsx.StreamEvents)
	require.NoError(t, err)
	for seq, want := range []string{"e1", "e2", "e3"} {
		m, err := s.GetMsg(ctx, uint64(seq+1))
		require.NoError(t, err)
		require.Equal(t, natsx.EventSubject("x1", 4), m.Subject)
		require.Equal(t, want, m.Header.Get(jetstream.MsgIDHeader))
		got := &eventv1.Event{}
		require.NoError(t, proto.Unmarshal(m.Data, got))
		require.Equal(t, want, got.GetEventId())
	}
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, info.State.Msgs)
}
