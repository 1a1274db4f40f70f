// Package consume claims a pool's commands from NOETL_COMMANDS and runs them: each with
// its claim kept alive, its execution's cancellation routed to it, command.started
// reported for a long run, and its outcome published before it is acked (a failed
// publish is tried again for up to 30 s first). A message that holds a pack of commands
// (commandbus) is acked once all of them have published their outcomes, and handed back
// whole when one could not: its commands run again, which commands allow (the log keeps
// one outcome of each).
package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/commandbus"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/eventbus"
	"github.com/noetl/noetl/internal/failpoint"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/platform/telemetry"
	"github.com/noetl/noetl/services/worker/internal/execute"
	"github.com/noetl/noetl/services/worker/internal/retry"
	"github.com/noetl/noetl/services/worker/internal/scrub"
)

// Consumer runs a pool's commands.
type Consumer struct {
	// NC receives the cancellation announcements.
	NC *nats.Conn
	// JS holds NOETL_COMMANDS, whose commands are claimed, and NOETL_EVENTS, where their
	// outcomes go.
	JS jetstream.JetStream
	// Pool is the pool whose commands are claimed.
	Pool string
	// Concurrency is how many commands run at once.
	Concurrency int
	// Partitions is the number of execution partitions of NOETL_EVENTS.
	Partitions int
	// DrainTimeout is how long a stopping consumer lets its running commands finish and
	// publish their outcomes after it stops claiming; the commands still running then are
	// cancelled and left for redelivery (zero: at once).
	DrainTimeout time.Duration
	// Exec runs each command.
	Exec *execute.Executor
	// Log receives the consumer's reports.
	Log *slog.Logger
	// Tracer starts a span per command.
	Tracer trace.Tracer
	// InFlight counts the commands being run (noetl_worker_in_flight).
	InFlight prometheus.Gauge
	// OutcomeRetries counts the publishes of an outcome tried again after a failure
	// (noetl_worker_outcome_publish_retries_total); nil counts none.
	OutcomeRetries prometheus.Counter

	cancels *cancels
	// batch publishes the outcomes of the commands that finish together in one message per
	// partition (eventbus.Batcher); nil publishes each command's events alone.
	batch *eventbus.Batcher
}

// publishLoops is how many rounds of outcomes a worker's batcher publishes at once.
const publishLoops = 4

// startedAfter is how long a command runs before its worker reports command.started.
const startedAfter = 2 * time.Second

// claimEvery is how often a worker tells NATS that a command it runs is still in progress
// (the consumer's ack wait is 60 s).
const claimEvery = 20 * time.Second

// DurableName is the durable consumer of a pool on NOETL_COMMANDS.
func DurableName(pool string) string { return "worker-" + pool }

// Run claims the pool's commands and runs up to Concurrency of them at once until ctx
// ends; then it stops claiming, hands back the messages claimed but not started, and
// waits for the running commands (see Config.DrainTimeout) before it returns.
func (c *Consumer) Run(ctx context.Context) error {
	var cons jetstream.Consumer
	err := natsx.Declare(ctx, func(ctx context.Context) (err error) {
		cons, err = c.JS.CreateOrUpdateConsumer(ctx, natsx.StreamCommands, jetstream.ConsumerConfig{
			Durable:       DurableName(c.Pool),
			FilterSubject: natsx.PoolSubjects(c.Pool),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       60 * time.Second,
			MaxDeliver:    -1,
			MaxAckPending: 8 * c.Concurrency,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("commands consumer: %w", err)
	}
	c.cancels = newCancels()
	stopCancels, err := c.cancels.subscribe(c.NC)
	if err != nil {
		return fmt.Errorf("cancellations: %w", err)
	}
	defer stopCancels()
	it, err := cons.Messages(jetstream.PullMaxMessages(claimAhead(c.Concurrency)))
	if err != nil {
		return err
	}
	// Commands run in runCtx, which keeps ctx's values but not its end: when ctx ends the
	// worker stops claiming at once, and the commands it runs finish and publish their
	// outcomes for up to DrainTimeout, after which runCtx ends them (handle then leaves
	// them for redelivery).
	runCtx, cancelRuns := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRuns()
	var running atomic.Int64
	consumed := make(chan struct{})
	defer close(consumed)
	go func() {
		select {
		case <-consumed:
			return
		case <-ctx.Done():
		}
		// Drain rather than Stop: the messages the iterator holds already come out of Next
		// and are handed back below, instead of waiting out the ack wait.
		it.Drain()
		c.Log.Info("worker draining", slog.Int64("running", running.Load()), slog.Duration("drain_timeout", c.DrainTimeout))
		t := time.NewTimer(c.DrainTimeout)
		defer t.Stop()
		select {
		case <-consumed:
		case <-t.C:
			if n := running.Load(); n > 0 {
				c.Log.Warn("drain timeout: cancelling the running commands, left for redelivery", slog.Int64("running", n))
			}
			cancelRuns()
			it.Stop()
		}
	}()
	// The batcher outlives the running commands (its stop is deferred before their wait),
	// so that a draining worker's outcomes are published.
	c.batch = eventbus.NewBatcher(c.JS, c.Partitions, publishLoops)
	batchCtx, stopBatch := context.WithCancel(context.WithoutCancel(ctx))
	batchDone := make(chan struct{})
	go func() {
		defer close(batchDone)
		c.batch.Run(batchCtx)
	}()
	defer func() {
		stopBatch()
		<-batchDone
	}()
	// Concurrency long-lived goroutines run the commands: a goroutine per command paid for
	// its start and, the run being deep, for growing its stack every time.
	work := make(chan task)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(work)
	for range max(c.Concurrency, 1) {
		wg.Go(func() {
			for t := range work {
				running.Add(1)
				c.InFlight.Inc()
				t.claim.done(c.handle(runCtx, t.cmd, t.claim))
				c.InFlight.Dec()
				running.Add(-1)
			}
		})
	}
	for {
		m, err := it.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			if ctx.Err() == nil {
				c.Log.Warn("command consumer", slog.String("error", err.Error()))
			}
			continue
		}
		if ctx.Err() != nil {
			// Claimed before the stop but not started: another worker runs it now.
			_ = m.Nak()
			continue
		}
		cmds, err := commandbus.Commands(m.Headers(), m.Data())
		if err != nil {
			c.Log.Error("dropping malformed command", slog.String("error", err.Error()))
			_ = m.Term()
			continue
		}
		cl := newClaim(m, len(cmds), natsx.Extracted(m.Headers()))
		for _, cmd := range cmds {
			select {
			case work <- task{cmd: cmd, claim: cl}:
			case <-ctx.Done():
				cl.done(handBack) // not started: the message goes back to the pool
			}
		}
	}
}

// claimAhead is how many NOETL_COMMANDS messages a worker of concurrency slots holds
// claimed beyond those it runs: in packs of up to MaxPack, at most MinPack times
// concurrency commands (for four slots or more), so one worker does not take a wide
// fan-out's packs from its pool's other workers.
func claimAhead(concurrency int) int {
	return max(concurrency*commandbus.MinPack/commandbus.MaxPack, 1)
}

// task is one command of a claimed message, for a running goroutine.
type task struct {
	cmd   *eventv1.Command
	claim *claim
}

// verdict is what a command's run asks of the message that carried it: an ack, or to hand
// it back to the pool at once or after a delay.
type verdict struct {
	ack   bool
	delay time.Duration
}

var (
	acked    = verdict{ack: true}
	handBack = verdict{}
)

// claim is a claimed NOETL_COMMANDS message whose commands (one, or a pack's) run: it keeps
// the claim alive while any of them is queued or running, and once the last has ended
// acks the message if every one of them published its outcome, and hands it back (with
// the longest delay asked) otherwise.
type claim struct {
	m jetstream.Msg
	// remote is the trace context of the message's header, the parent of each of its
	// commands' spans (extracted once for a pack's commands).
	remote natsx.Remote
	mu     sync.Mutex
	left   int
	back   bool
	delay  time.Duration
	timer  *time.Timer
}

func newClaim(m jetstream.Msg, commands int, remote natsx.Remote) *claim {
	cl := &claim{m: m, left: commands, remote: remote}
	// Keep the claim alive while a long tool runs (a timer that re-arms itself, rather than
	// a goroutine and a ticker per message).
	cl.mu.Lock()
	cl.timer = time.AfterFunc(claimEvery, func() {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		if cl.left > 0 {
			_ = m.InProgress()
			cl.timer.Reset(claimEvery)
		}
	})
	cl.mu.Unlock()
	return cl
}

// done records the verdict of one of the message's commands and settles the message
// after the last.
func (cl *claim) done(v verdict) {
	cl.mu.Lock()
	cl.left--
	if !v.ack {
		cl.back = true
		cl.delay = max(cl.delay, v.delay)
	}
	last, back, delay := cl.left == 0, cl.back, cl.delay
	cl.mu.Unlock()
	if !last {
		return
	}
	cl.timer.Stop()
	switch {
	case !back:
		_ = cl.m.Ack()
	case delay > 0:
		_ = cl.m.NakWithDelay(delay)
	default:
		_ = cl.m.Nak()
	}
}

// consumerSpan starts a command's span: one slice for every command, not one per call.
var consumerSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}

// handle runs one claimed command and publishes its outcome, and says whether the message
// that carried it may be acked. ctx is the run context of consume: it ends only when a
// stopping worker's drain timeout passed, and a command it ended is handed back for
// another worker rather than failed.
func (c *Consumer) handle(ctx context.Context, cmd *eventv1.Command, cl *claim) verdict {
	m := cl.m
	// The run continues the trace of the commit that forwarded the command.
	kind := "noop"
	if len(cmd.GetTools()) > 0 {
		kind = cmd.GetTools()[0].GetKind()
	}
	ctx, span := c.Tracer.Start(cl.remote.Into(ctx), "step "+cmd.GetStep(), consumerSpan...)
	defer span.End()
	if span.IsRecording() { // the attributes are built only for a span that keeps them
		span.SetAttributes(telemetry.Execution(cmd.GetTenant(), cmd.GetExecutionId(), cmd.GetStep(), cmd.GetAttempt())...)
		span.SetAttributes(telemetry.AttrTool.String(kind), telemetry.AttrPool.String(c.Pool), telemetry.AttrCommandID.String(cmd.GetCommandId()))
	}
	// Every secret resolved for this command is masked in what leaves the worker: events,
	// the stored result, span errors and these log lines.
	sc := c.Exec.NewScrubber()
	ctx = scrub.NewContext(ctx, sc)
	log := slog.New(sc.Handler(c.Log.Handler()))
	// A committed cancellation of the execution stops the tool.
	// Its cause tells tools a cancelled execution (tools.ErrExecutionCancelled) from a
	// stopping worker whose drain timeout passed (ctx's own end).
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer c.cancels.watch(cmd.GetExecutionId(), cancel)()
	// A run that lasts is reported while it runs: command.started once the tool has run for
	// startedAfter, so the log shows a worker holding the command (the reconciler
	// re-publishes only commands no worker started). A short run reports only its outcome.
	// The outcome is published after any command.started in flight, so the stream keeps
	// their order.
	var startedMu sync.Mutex
	ran := false
	startedTimer := time.AfterFunc(startedAfter, func() {
		startedMu.Lock()
		defer startedMu.Unlock()
		if !ran {
			if err := c.publish(ctx, []*eventv1.Event{execute.CommandEvent(cmd, domain.EventCommandStarted)}); err != nil && ctx.Err() == nil {
				log.Warn("publish command.started", slog.String("execution_id", cmd.GetExecutionId()), slog.String("error", err.Error()))
			}
		}
	})
	stopBeats := c.heartbeats(ctx, cmd, func() string { return delivery(m) }, log) // heartbeat.go
	events := c.Exec.Execute(runCtx, cmd)
	stopBeats()
	startedTimer.Stop()
	startedMu.Lock()
	ran = true
	startedMu.Unlock()
	if ctx.Err() != nil {
		// The worker is stopping and its drain timeout passed: the tool was cancelled by
		// the shutdown, not by the execution, so its outcome is not the command's.
		// Publishing it would fail the step (and the redelivered run would log a second
		// outcome); leave the command to be redelivered to another worker instead.
		log.Info("stopping: command left for redelivery", slog.String("execution_id", cmd.GetExecutionId()), slog.String("step", cmd.GetStep()))
		return handBack
	}
	if last := events[len(events)-1]; last.GetError() != nil {
		telemetry.ErrorStatus(span, errors.New(last.GetError().GetMessage()))
	}
	if err := failpoint.Eval(failpoint.WorkerAfterTool); err != nil {
		return verdict{delay: 100 * time.Millisecond}
	}
	err := c.publishOutcome(ctx, events, log)
	if errors.Is(err, natsx.ErrMessageTooLarge) {
		// Retrying cannot shrink the outcome: fail the command with a message that fits.
		log.Warn("command outcome too large to publish", slog.String("execution_id", cmd.GetExecutionId()), slog.String("step", cmd.GetStep()), slog.String("error", err.Error()))
		events = execute.ScrubEvents(sc, execute.FailTooLarge(events, err))
		err = c.publishOutcome(ctx, events, log)
	}
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("publish outcome failed; command will be redelivered", slog.String("execution_id", cmd.GetExecutionId()), slog.String("error", err.Error()))
		}
		return verdict{delay: 500 * time.Millisecond}
	}
	if err := failpoint.Eval(failpoint.WorkerAfterPublish); err != nil {
		return verdict{delay: 100 * time.Millisecond}
	}
	return acked
}

// outcomeRetryFor is how long a worker tries to publish a command's outcome (a lost
// acknowledgement, a stream leader being elected, a reconnect) before it hands the command
// back, which runs its tool again.
const outcomeRetryFor = 30 * time.Second

// publishOutcome publishes a command's outcome, trying again (retry.Do) for up to
// outcomeRetryFor while ctx lasts: the tool has run, and a failed publish would otherwise
// run it again. The same events are published under the same message ids, so a publish
// that did land and lost only its ack is not logged twice. An outcome too large for a
// message is not tried again.
func (c *Consumer) publishOutcome(ctx context.Context, events []*eventv1.Event, log *slog.Logger) error {
	attempts := 0
	_, err := retry.Do(ctx, outcomeRetryFor, func(err error) bool { return !errors.Is(err, natsx.ErrMessageTooLarge) },
		func(err error, next time.Duration) {
			log.Warn("publish outcome failed; trying again", slog.String("execution_id", events[0].GetExecutionId()), slog.String("error", err.Error()), slog.Duration("retry_in", next))
		},
		func() (struct{}, error) {
			if attempts++; attempts > 1 && c.OutcomeRetries != nil {
				c.OutcomeRetries.Inc()
			}
			return struct{}{}, c.publish(ctx, events)
		})
	return err
}

// publish publishes a command's events to NOETL_EVENTS, together with those of the other
// commands that finish meanwhile (c.batch).
func (c *Consumer) publish(ctx context.Context, events []*eventv1.Event) error {
	if c.batch == nil {
		return eventbus.Publish(ctx, c.JS, c.Partitions, events)
	}
	return c.batch.Publish(ctx, events)
}
