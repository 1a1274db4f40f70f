package consume

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

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
// derived from the command, its delivery and the number, until it is stopped; one without
// sends none.
func TestHeartbeatsOfACommandThatCarriesAnInterval(t *testing.T) {
	_, js := testkit.StartJetStream(t)
	ctx := context.Background()
	c := &Consumer{JS: js, Partitions: 1, Log: slog.New(slog.DiscardHandler)}
	stream, err := js.Stream(ctx, natsx.StreamEvents)
	require.NoError(t, err)
	count := func() uint64 {
		info, err := stream.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs
	}

	plain := &eventv1.Command{CommandId: "c-plain", ExecutionId: "x1", Step: "s", Attempt: 1}
	c.heartbeats(ctx, plain, func() string { return "3.1" }, c.Log)()
	require.Zero(t, count(), "a command without an interval sends no heartbeat")

	cmd := &eventv1.Command{CommandId: "c-body", ExecutionId: "x1", Step: "drain", Attempt: 2, IssuedEventId: "e-issued",
		Iteration: &eventv1.Iteration{Epoch: 1, Index: domain.CursorIndex(3, 0)}, Heartbeat: durationpb.New(10 * time.Millisecond)}
	stop := c.heartbeats(ctx, cmd, func() string { return "3.1" }, c.Log)
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
		require.Equal(t, domain.HeartbeatEventID("c-body", "3.1", beat), ev.GetEventId())
		require.Equal(t, "c-body", ev.GetCommandId())
		require.EqualValues(t, 2, ev.GetAttempt())
		require.True(t, proto.Equal(cmd.GetIteration(), ev.GetIteration()), "the fold finds the body by its iteration")
		var p domain.HeartbeatPayload
		require.NoError(t, json.Unmarshal(ev.GetPayloadJson(), &p))
		require.Equal(t, beat, p.Beat)
		require.Equal(t, "3.1", p.Delivery)
	}
}

// A command its first worker gave back (it died, or stopped past its drain timeout) is
// delivered again, to its replacement, which numbers its beats from 1 again: their ids
// name the second delivery, so the events stream (which drops a message id it holds)
// keeps them beside the first delivery's, and so does the log.
func TestAReplacementDeliverysHeartbeatsAreNotTheFirstOnes(t *testing.T) {
	_, js := testkit.StartJetStream(t)
	ctx := context.Background()
	c := &Consumer{JS: js, Partitions: 1, Log: slog.New(slog.DiscardHandler)}
	events, err := js.Stream(ctx, natsx.StreamEvents)
	require.NoError(t, err)
	count := func() uint64 {
		info, err := events.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs
	}
	cmd := &eventv1.Command{CommandId: "c-body", ExecutionId: "x1", Pool: "default", Step: "drain", Attempt: 1, IssuedEventId: "e-issued",
		Iteration: &eventv1.Iteration{Epoch: 1, Index: domain.CursorIndex(0, 0)}, Heartbeat: durationpb.New(10 * time.Millisecond)}
	b, err := proto.Marshal(cmd)
	require.NoError(t, err)
	require.NoError(t, natsx.PublishAll(ctx, js, []natsx.Message{{Subject: natsx.CommandSubject("default", "x1", "c-body", 1), MsgID: "c-body", Data: b}}))
	cons, err := js.CreateOrUpdateConsumer(ctx, natsx.StreamCommands, jetstream.ConsumerConfig{
		Durable: DurableName("default"), FilterSubject: natsx.PoolSubjects("default"), AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: -1,
	})
	require.NoError(t, err)

	var deliveries []string
	for run := 1; run <= 2; run++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		md, err := m.Metadata()
		require.NoError(t, err)
		require.EqualValues(t, run, md.NumDelivered)
		d := delivery(m)
		deliveries = append(deliveries, d)
		before := count()
		stop := c.heartbeats(ctx, cmd, func() string { return d }, c.Log)
		testkit.WaitFor(t, 10*time.Second, func() error {
			if n := count() - before; n < 3 {
				return fmt.Errorf("delivery %d: %d heartbeats kept so far", run, n)
			}
			return nil
		})
		stop()
		if run == 1 {
			require.NoError(t, m.Nak(), "the first worker gives the command back")
		} else {
			require.NoError(t, m.Ack())
		}
	}
	require.NotEqual(t, deliveries[0], deliveries[1])

	cons2, err := events.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	ids := map[string]bool{}
	perDelivery := map[string]int32{}
	for range count() {
		m, err := cons2.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		ev := &eventv1.Event{}
		require.NoError(t, proto.Unmarshal(m.Data(), ev))
		var p domain.HeartbeatPayload
		require.NoError(t, json.Unmarshal(ev.GetPayloadJson(), &p))
		perDelivery[p.Delivery]++
		require.Equal(t, perDelivery[p.Delivery], p.Beat, "each delivery counts its beats from 1")
		require.Equal(t, domain.HeartbeatEventID("c-body", p.Delivery, p.Beat), ev.GetEventId())
		require.False(t, ids[ev.GetEventId()])
		ids[ev.GetEventId()] = true
	}
	require.GreaterOrEqual(t, perDelivery[deliveries[0]], int32(3))
	require.GreaterOrEqual(t, perDelivery[deliveries[1]], int32(3), "the replacement's beats 1, 2, 3 were kept")
}
