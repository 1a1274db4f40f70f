package consume

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/commandbus"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/eventbus"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/testkit"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// An outcome that cannot be published is tried again, not run again: here NOETL_EVENTS is
// missing when the command finishes, so its publishes fail until the stream is declared
// again; then the outcome goes out once, and the command, delivered once, is acked.
func TestAnOutcomeThatCannotBePublishedIsTriedAgainNotRunAgain(t *testing.T) {
	nc, js := testkit.StartJetStream(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, js.DeleteStream(ctx, natsx.StreamEvents))

	retries := prometheus.NewCounter(prometheus.CounterOpts{Name: "retries"})
	c := testConsumer(nc, js, 2, tools.Registry{"noop": tools.Noop{}})
	c.OutcomeRetries = retries
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	cmd := &eventv1.Command{CommandId: "x-c0", ExecutionId: "x", Tenant: "t", Pool: "shared", Step: "s", Attempt: 1, PlaybookPath: "p", InputJson: []byte(`null`),
		Tools:       []*eventv1.ToolCall{{Kind: "noop", ConfigJson: []byte(`{"kind":"noop"}`)}},
		ContextJson: []byte(`{"execution_id":"x","workload":{},"ctx":{}}`)}
	msgs, err := commandbus.Messages([]*eventv1.Command{cmd}, nil, 1, nil)
	require.NoError(t, err)
	require.NoError(t, natsx.PublishAll(ctx, js, msgs))

	testkit.WaitFor(t, 30*time.Second, func() error {
		if n := testutil.ToFloat64(retries); n < 2 {
			return fmt.Errorf("%v publishes tried again so far", n)
		}
		return nil
	})
	require.NoError(t, natsx.EnsureStreams(ctx, js, natsx.StreamConfig{}))
	events, err := js.Stream(ctx, natsx.StreamEvents)
	require.NoError(t, err)
	commands, err := js.Stream(ctx, natsx.StreamCommands)
	require.NoError(t, err)
	// waitMsgs waits until stream holds a count of messages that done accepts.
	waitMsgs := func(stream jetstream.Stream, done func(uint64) bool, what string) {
		testkit.WaitFor(t, 30*time.Second, func() error {
			info, err := stream.Info(ctx)
			if err != nil {
				return err
			}
			if !done(info.State.Msgs) {
				return fmt.Errorf("%s: %d messages", what, info.State.Msgs)
			}
			return nil
		})
	}
	waitMsgs(events, func(n uint64) bool { return n > 0 }, "waiting for the outcome")
	waitMsgs(commands, func(n uint64) bool { return n == 0 }, "the command is still claimed")
	info, err := events.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, info.State.Msgs, "one outcome message")
	m, err := events.GetMsg(ctx, info.State.FirstSeq)
	require.NoError(t, err)
	bodies, err := eventbus.Bodies(m.Header, m.Data)
	require.NoError(t, err)
	require.Len(t, bodies, 1)
	ev := &eventv1.Event{}
	require.NoError(t, proto.Unmarshal(bodies[0], ev))
	require.Equal(t, domain.EventCommandCompleted, ev.GetType())
	require.Equal(t, "x-c0", ev.GetCommandId())
	cons, err := js.Consumer(ctx, natsx.StreamCommands, DurableName("shared"))
	require.NoError(t, err)
	ci, err := cons.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, ci.Delivered.Consumer, "delivered once: the tool ran once")
	cancel()
	require.NoError(t, <-done)
}
