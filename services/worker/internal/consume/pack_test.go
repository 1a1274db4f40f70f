package consume

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/commandbus"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/eventbus"
	"github.com/noetl/noetl/internal/failpoint"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/playbook/template"
	"github.com/noetl/noetl/internal/testkit"
	"github.com/noetl/noetl/services/worker/internal/execute"
	"github.com/noetl/noetl/services/worker/internal/results"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// testConsumer is a consumer of pool "shared" over one partition, running tools with
// concurrency slots, its reports discarded.
func testConsumer(nc *nats.Conn, js jetstream.JetStream, concurrency int, tools tools.Registry) *Consumer {
	tracer := noop.NewTracerProvider().Tracer("test")
	return &Consumer{NC: nc, JS: js, Pool: "shared", Concurrency: concurrency, Partitions: 1, Log: slog.New(slog.DiscardHandler),
		Tracer: tracer, InFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "in_flight"}),
		Exec: &execute.Executor{Pool: "shared", Renderer: template.NewRenderer(), Tools: tools,
			Results: &results.Store{InlineMaxBytes: 64 << 10}, Tracer: tracer, Metrics: execute.NewMetrics("shared")}}
}

// gate is a tool that returns once its channel is closed.
type gate chan struct{}

func (g gate) Run(ctx context.Context, _ *tools.Call) (any, error) {
	select {
	case <-g:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// A pack's commands all run and publish their outcomes, and the pack leaves the stream
// only once the last of them has: while one still runs, the others' outcomes are out and
// the pack is still claimed. When one of them could not publish (a failpoint after its
// publish), the whole pack goes back to the pool and runs again.
func TestAPackIsAckedOnceEveryCommandPublished(t *testing.T) {
	t.Cleanup(failpoint.Reset)
	nc, js := testkit.StartJetStream(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	const n = commandbus.MinPack
	pack := func(exec, lastTool string) []natsx.Message {
		var cmds []*eventv1.Command
		for i := range n {
			kind := "noop"
			if i == n-1 {
				kind = lastTool
			}
			cmds = append(cmds, &eventv1.Command{CommandId: fmt.Sprintf("%s-c%d", exec, i), ExecutionId: exec, Tenant: "t", Pool: "shared", Step: "s", Attempt: 1,
				PlaybookPath: "p", Iteration: &eventv1.Iteration{Index: int32(i)}, InputJson: []byte(`null`),
				Tools:       []*eventv1.ToolCall{{Kind: kind, ConfigJson: []byte(`{"kind":"` + kind + `"}`)}},
				ContextJson: []byte(`{"execution_id":"` + exec + `","workload":{},"ctx":{}}`)})
		}
		msgs, err := commandbus.Messages(cmds, nil, 1, nil)
		require.NoError(t, err)
		require.Len(t, msgs, 1, "one pack")
		return msgs
	}
	release := make(gate)
	c := testConsumer(nc, js, 4, tools.Registry{"noop": tools.Noop{}, "gate": release})
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	commands, err := js.Stream(ctx, natsx.StreamCommands)
	require.NoError(t, err)
	events, err := js.Stream(ctx, natsx.StreamEvents)
	require.NoError(t, err)
	queued := func() uint64 {
		info, err := commands.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs
	}
	completed := func(exec string) map[string]int {
		info, err := events.Info(ctx)
		require.NoError(t, err)
		out := map[string]int{}
		for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
			m, err := events.GetMsg(ctx, seq)
			require.NoError(t, err)
			bodies, err := eventbus.Bodies(m.Header, m.Data)
			require.NoError(t, err)
			for _, b := range bodies {
				ev := &eventv1.Event{}
				require.NoError(t, proto.Unmarshal(b, ev))
				if ev.GetType() == domain.EventCommandCompleted && ev.GetExecutionId() == exec {
					out[ev.GetCommandId()]++
				}
			}
		}
		return out
	}
	waitEmpty := func() {
		testkit.WaitFor(t, 30*time.Second, func() error {
			if k := queued(); k > 0 {
				return fmt.Errorf("%d messages still in NOETL_COMMANDS", k)
			}
			return nil
		})
	}
	delivered := func() uint64 {
		cons, err := js.Consumer(ctx, natsx.StreamCommands, DurableName("shared"))
		require.NoError(t, err)
		info, err := cons.Info(ctx)
		require.NoError(t, err)
		return info.Delivered.Consumer
	}

	require.NoError(t, natsx.PublishAll(ctx, js, pack("x1", "gate")))
	testkit.WaitFor(t, 30*time.Second, func() error {
		if got := completed("x1"); len(got) < n-1 {
			return fmt.Errorf("%d outcomes so far", len(got))
		}
		return nil
	})
	require.EqualValues(t, 1, queued(), "one command still runs: the pack is still claimed")
	close(release)
	waitEmpty()
	require.Len(t, completed("x1"), n)
	require.EqualValues(t, 1, delivered())

	failpoint.Enable(failpoint.WorkerAfterPublish, 1)
	require.NoError(t, natsx.PublishAll(ctx, js, pack("x2", "noop")))
	waitEmpty()
	require.Equal(t, 1, failpoint.Hits(failpoint.WorkerAfterPublish))
	require.EqualValues(t, 3, delivered(), "the second pack was handed back once, then acked")
	got := completed("x2")
	require.Len(t, got, n, "every command of the pack completed: %v", got)
	for id, k := range got {
		require.LessOrEqual(t, k, 2, "%s: one outcome per run", id)
	}
	cancel()
	require.NoError(t, <-done)
}

// A worker's claimed buffer holds at most MinPack commands per slot whatever the packs'
// size, and at least one message.
func TestAWorkerClaimsAheadAtMostFourCommandsASlot(t *testing.T) {
	for _, c := range []int{0, 1, 3, 4, 16, 64, 100, 256} {
		n := claimAhead(c)
		require.GreaterOrEqual(t, n, 1, "concurrency %d", c)
		if c >= commandbus.MaxPack/commandbus.MinPack {
			require.LessOrEqual(t, n*commandbus.MaxPack, c*commandbus.MinPack, "concurrency %d", c)
		}
	}
	require.Equal(t, 16, claimAhead(64), "the default concurrency")
}
