package consume

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/testkit"
)

// A command with a heartbeat interval reports numbered command.heartbeat events, with ids
// derived from the command and the number, until it is stopped; one without sends none.
func TestHeartbeatsOfACommandThatCarriesAnInterval(t *testing.T) {
	nc, err := nats.Connect(testkit.StartNATS(t))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, natsx.EnsureStreams(ctx, js, natsx.StreamConfig{}))
	c := &Consumer{JS: js, Partitions: 1, Log: slog.New(slog.DiscardHandler)}
	stream, err := js.Stream(ctx, natsx.StreamEvents)
	require.NoError(t, err)
	count := func() uint64 {
		info, err := stream.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs
	}

	plain := &eventv1.Command{CommandId: "c-plain", ExecutionId: "x1", Step: "s", Attempt: 1}
	c.heartbeats(ctx, plain, c.Log)()
	require.Zero(t, count(), "a command without an interval sends no heartbeat")

	cmd := &eventv1.Command{CommandId: "c-body", ExecutionId: "x1", Step: "drain", Attempt: 2, IssuedEventId: "e-issued",
		Iteration: &eventv1.Iteration{Epoch: 1, Index: domain.CursorIndex(3, 0)}, Heartbeat: durationpb.New(10 * time.Millisecond)}
	stop := c.heartbeats(ctx, cmd, c.Log)
	testkit.WaitFor(t, 10*time.Second, func() error {
		if n := count(); n < 3 {
			return fmt.Errorf("%d heartbeats so far", n)
		}
		return nil
	})
	stop()
	n := count()
	require.Equal(t, n, count(), "no heartbeat after stop")
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	for beat := int32(1); beat <= int32(n); beat++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		ev := &eventv1.Event{}
		require.NoError(t, proto.Unmarshal(m.Data(), ev))
		require.Equal(t, domain.EventCommandHeartbeat, ev.GetType())
		require.Equal(t, domain.HeartbeatEventID("c-body", beat), ev.GetEventId())
		require.Equal(t, "c-body", ev.GetCommandId())
		require.EqualValues(t, 2, ev.GetAttempt())
		require.True(t, proto.Equal(cmd.GetIteration(), ev.GetIteration()), "the fold finds the body by its iteration")
		var p domain.HeartbeatPayload
		require.NoError(t, json.Unmarshal(ev.GetPayloadJson(), &p))
		require.Equal(t, beat, p.Beat)
	}
}
