package consume

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/commandbus"
	"github.com/noetl/noetl/internal/eventbus"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/testkit"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// BenchmarkFanOutThroughAWorker: per operation, a 1,000-wide fan-out of no-op commands,
// forwarded in packs as the materializer forwards them, run by one worker of 64 slots, until
// every outcome is on NOETL_EVENTS (an embedded JetStream, in this process: its CPU counts).
func BenchmarkFanOutThroughAWorker(b *testing.B) {
	const n = 1000
	nc, js := testkit.StartJetStream(b)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	c := testConsumer(nc, js, 64, tools.Registry{"noop": tools.Noop{}})
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })

	// The worker's outcomes as they reach the stream's subjects; arrived wakes the operation
	// once they reach its count.
	var outcomes, want atomic.Int64
	arrived := make(chan struct{}, 1)
	sub, err := nc.Subscribe("noetl.events.>", func(m *nats.Msg) {
		bodies, err := eventbus.Bodies(m.Header, m.Data)
		if err == nil && outcomes.Add(int64(len(bodies))) >= want.Load() {
			select {
			case arrived <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sub.Unsubscribe() })

	run := func(op int) {
		exec := fmt.Sprintf("x%d", op)
		cmds := make([]*eventv1.Command, n)
		for i := range cmds {
			cmds[i] = &eventv1.Command{CommandId: fmt.Sprintf("%s-c%d", exec, i), ExecutionId: exec, Tenant: "t", Pool: "shared", Step: "start", Attempt: 1,
				PlaybookPath: "bench/fanout", Iteration: &eventv1.Iteration{Epoch: 1, Index: int32(i)}, InputJson: []byte(`null`),
				Tools:       []*eventv1.ToolCall{{Kind: "noop", ConfigJson: []byte(`{}`)}},
				ContextJson: fmt.Appendf(nil, `{"execution_id":%q,"workload":{"n":1000},"ctx":{},"iter":{"_index":%d,"_total":1000,"i":%d},"iterator":"i"}`, exec, i, i)}
		}
		msgs, err := commandbus.Messages(cmds, nil, 1, nil)
		if err != nil {
			b.Fatal(err)
		}
		want.Store(outcomes.Load() + n)
		if err := natsx.PublishAll(ctx, js, msgs); err != nil {
			b.Fatal(err)
		}
		timeout := time.After(time.Minute)
		for outcomes.Load() < want.Load() { // a signal left by the operation before is only a wake-up
			select {
			case <-arrived:
			case <-timeout:
				b.Fatalf("%d of %d outcomes in a minute", outcomes.Load()-want.Load()+n, n)
			}
		}
	}
	run(-1) // warm up: the consumer, the stream's files, the worker's goroutines
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		run(i)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/command")
}
