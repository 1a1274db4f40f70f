// Package partition runs a materializer replica's partitions of NOETL_EVENTS: which ones it
// owns (leases, balancing, take-over), one consumer per owned partition, and the readiness
// the consumers report (lag, progress, leases).
//
// Invariants, per partition:
//   - Events are read in stream order from the partition's cursor on, with an ordered
//     consumer of the partition's own, and committed batch by batch in that order; a batch
//     that fails is read and committed again in place, never skipped.
//   - A batch's commands and commit notices are forwarded only after its transaction
//     committed, and only for events that are in the log (writer.Result).
//   - The cursor moves past a batch only after its commands and notices were forwarded (in
//     a later batch's transaction, or on its own when nothing more arrives), so a crash
//     anywhere in between makes the next owner read the batch again; the log drops what it
//     already holds as duplicates.
//   - A partition is consumed only while this replica holds its lease; a lease lost stops
//     the partition's consumer before another replica can take it over. Two consumers of
//     one partition by mistake still keep the log identical (the same events in the same
//     order, deduplicated by id).
package partition

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/commandbus"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/eventbus"
	"github.com/noetl/noetl/internal/failpoint"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/platform/telemetry"
	"github.com/noetl/noetl/services/materializer/internal/lease"
	"github.com/noetl/noetl/services/materializer/internal/writer"
)

// Config tunes a replica's partition consumers.
type Config struct {
	// Partitions is the number of partitions of NOETL_EVENTS.
	Partitions int
	// BatchSize bounds the events of one commit.
	BatchSize int
	// Committers is how many transactions commit the partitions' batches at once (group.go;
	// zero: one).
	Committers int
	// Group names the replicas that share the partitions (their leases and cursors).
	Group string
	// MaxLag is the consumer lag past which CheckLag fails.
	MaxLag int
	// StallAfter is how long a partition may commit nothing while its events are pending
	// before CheckProgress fails.
	StallAfter time.Duration
	// LagPoll is how often the consumers' lag is read (zero: natsx.DefaultLagPoll).
	LagPoll time.Duration
	// RenewEvery is how often the leases are renewed (a third of their TTL).
	RenewEvery time.Duration
	// Gate, when set, is called before each batch is committed and holds the consumer while
	// it blocks.
	Gate func(context.Context) error
	// Static, when set, are the partitions to consume without leases (Leases is then nil).
	Static []int
	// PurgeEvery is how often NOETL_EVENTS is purged of the events every group committed
	// (zero: DefaultPurgeEvery).
	PurgeEvery time.Duration
}

// Deps are what the consumers read and write through.
type Deps struct {
	Log    *slog.Logger
	NC     *nats.Conn
	JS     jetstream.JetStream
	Tracer trace.Tracer
	// Cursors are the partitions' stream positions, Writer commits the batches.
	Cursors lease.Cursors
	Writer  *writer.Writer
	// Leases are the partitions' leases; nil with Config.Static.
	Leases *lease.Table
	// Gone reports a replica of the group that has provably exited (replica.Gone).
	Gone func(replica string) bool
	// Registry receives the consumers' metrics.
	Registry prometheus.Registerer
}

// Replica consumes the partitions one materializer replica owns.
type Replica struct {
	own   *ownership
	lag   *lagMonitor
	sat   *saturation
	purge *purger
}

// New builds a replica's consumers; Run starts them.
func New(cfg Config, d Deps) *Replica {
	sat := &saturation{maxLag: uint64(cfg.MaxLag), stallAfter: cfg.StallAfter, now: time.Now}
	lag := newLagMonitor(cfg.Group, cfg.LagPoll, d.Registry, d.Log)
	lag.onPoll = sat.observe
	m := newMetrics(d.Registry)
	l := &loop{cfg: cfg, log: d.Log, nc: d.NC, js: d.JS, cursors: d.Cursors, w: d.Writer, m: m, tracer: d.Tracer, sat: sat, lag: lag}
	l.group = newCommitter(l.commit, cfg.BatchSize, cfg.Committers)
	own := &ownership{l: l, log: d.Log, m: m, static: cfg.Static, every: cfg.RenewEvery, table: d.Leases, gone: d.Gone}
	return &Replica{own: own, lag: lag, sat: sat, purge: newPurger(d.JS, d.Cursors, cfg.PurgeEvery, d.Log, d.Registry)}
}

// Run consumes the owned partitions until ctx ends, then hands the leases back.
func (r *Replica) Run(ctx context.Context) error {
	// The committer outlives the partitions: a partition that stops waits for nothing, and
	// a batch it handed over is committed or abandoned with the committer.
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.own.l.group.run(cctx)
	}()
	err := r.own.run(ctx)
	cancel()
	<-done
	return err
}

// RunPurge purges NOETL_EVENTS of committed events until ctx ends (purge.go).
func (r *Replica) RunPurge(ctx context.Context) error { return r.purge.run(ctx) }

// RunLag reads the consumers' lag until ctx ends.
func (r *Replica) RunLag(ctx context.Context) error { return r.lag.run(ctx) }

// CheckLag fails while the consumer lag is past Config.MaxLag (readiness).
func (r *Replica) CheckLag(ctx context.Context) error { return r.sat.checkLag(ctx) }

// CheckProgress fails while a partition with pending events has committed nothing for
// Config.StallAfter (readiness).
func (r *Replica) CheckProgress(ctx context.Context) error { return r.sat.checkProgress(ctx) }

// CheckLeases fails while the replica holds no lease it can consume (readiness).
func (r *Replica) CheckLeases(ctx context.Context) error { return r.own.checkLeases(ctx) }

type metrics struct {
	committed, duplicates, rejected prometheus.Counter
	superseded                      prometheus.Counter
	batch                           prometheus.Histogram
	commit                          prometheus.Histogram
	owned                           prometheus.Gauge
	acquired, released, lost        prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		committed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_materializer_events_committed_total", Help: "Events inserted into the log."}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_materializer_dedupe_hits_total", Help: "Events dropped as duplicates of logged events."}),
		rejected:   prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_materializer_rejected_total", Help: "Events dropped: after terminal, unknown execution or tenant mismatch."}),
		superseded: prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_materializer_superseded_total", Help: "Worker events dropped because their command had already ended the other way (a second run with another outcome)."}),
		batch:      prometheus.NewHistogram(prometheus.HistogramOpts{Name: "noetl_materializer_batch_size", Help: "Events per commit.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		commit:     prometheus.NewHistogram(prometheus.HistogramOpts{Name: "noetl_materializer_commit_seconds", Help: "Commit latency.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		owned:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "noetl_materializer_partitions_owned", Help: "Partitions of NOETL_EVENTS this replica consumes."}),
		acquired:   prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_materializer_lease_acquired_total", Help: "Partition leases taken (free, released or expired ones)."}),
		released:   prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_materializer_lease_released_total", Help: "Partition leases given up above the fair share, so another replica gets work."}),
		lost:       prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_materializer_lease_lost_total", Help: "Partition leases lost: taken by another replica after expiring, or not renewed in time."}),
	}
	reg.MustRegister(m.committed, m.duplicates, m.rejected, m.superseded, m.batch, m.commit, m.owned, m.acquired, m.released, m.lost)
	return m
}

// partitionSubject is the subject of partition p's events (natsx.EventSubject of the
// executions that hash to p).
func partitionSubject(p int) string { return natsx.PartitionEventSubject(p) }

type loop struct {
	cfg Config
	log *slog.Logger
	nc  *nats.Conn
	js  jetstream.JetStream
	// cursors are the partitions' stream positions.
	cursors lease.Cursors
	w       *writer.Writer
	m       *metrics
	tracer  trace.Tracer
	sat     *saturation
	lag     *lagMonitor
	// group commits the partitions' batches, several per transaction (group.go).
	group *committer
	// keptAt is when (Unix nanoseconds) NOETL_COMMANDS's keeper was last published
	// (natsx.KeepSubject).
	keptAt atomic.Int64
}

// consume runs partition p until ctx ends. It reads the partition's events in stream order
// from the cursor on, with an ordered consumer of its own (so a second replica that
// consumes the partition by mistake reads every event too, in the same order, instead of
// taking some of them), and commits them batch by batch. A batch that fails is retried in
// place: the partition's events are committed in stream order.
func (l *loop) consume(ctx context.Context, p int) error {
	cursor, err := l.cursors.Get(ctx, p)
	if err != nil {
		return fmt.Errorf("partition %d cursor: %w", p, err)
	}
	occ := jetstream.OrderedConsumerConfig{FilterSubjects: []string{partitionSubject(p)}, InactiveThreshold: time.Minute}
	if cursor > 0 {
		occ.DeliverPolicy, occ.OptStartSeq = jetstream.DeliverByStartSequencePolicy, cursor+1
	}
	cons, err := l.js.OrderedConsumer(ctx, natsx.StreamEvents, occ)
	if err != nil {
		return fmt.Errorf("partition %d consumer: %w", p, err)
	}
	// held counts the messages received and not yet committed and forwarded (a batch message
	// holds several events): the in-flight part of the partition's lag (the rest is the
	// consumer's pending count, in messages too).
	var held atomic.Int64
	l.lag.add(p, cons, &held, 2*l.cfg.BatchSize)
	defer l.lag.remove(p)
	ch := make(chan jetstream.Msg, 2*l.cfg.BatchSize)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		held.Add(1)
		select {
		case ch <- m:
		case <-ctx.Done():
		}
	}, jetstream.PullMaxMessages(l.cfg.BatchSize))
	if err != nil {
		return fmt.Errorf("partition %d consume: %w", p, err)
	}
	defer cc.Stop()
	// unrecorded is the stream sequence of the last batch committed and forwarded, when the
	// cursor is not there yet: a later batch's transaction moves it (a statement saved), at
	// most every cursorEvery, or, when no batch follows within cursorIdle, a write of its
	// own. A cursor left behind only makes the next owner read some events again (they are
	// duplicates then).
	var unrecorded uint64
	var recordedAt time.Time
	record := func(ctx context.Context) {
		if unrecorded == 0 {
			return
		}
		if err := l.cursors.Advance(ctx, p, unrecorded); err != nil {
			if ctx.Err() == nil {
				l.log.Warn("partition cursor not advanced", slog.Int("partition", p), slog.String("error", err.Error()))
			}
			return
		}
		unrecorded, recordedAt = 0, time.Now()
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		record(sctx)
	}()
	// A batch holds up to BatchSize events: a message may hold several (eventbus.Count); one
	// that would pass the bound opens the next batch (carry).
	batch := make([]jetstream.Msg, 0, l.cfg.BatchSize)
	var carry jetstream.Msg
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	defer idle.Stop()
	for {
		batch = batch[:0]
		n := 0
		if carry != nil {
			batch, n, carry = append(batch, carry), eventbus.Count(carry.Headers()), nil
		} else {
			if unrecorded != 0 {
				idle.Reset(cursorIdle)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-idle.C:
				record(ctx)
				continue
			case m := <-ch:
				idle.Stop()
				batch, n = append(batch, m), eventbus.Count(m.Headers())
			}
		}
	drain:
		for n < l.cfg.BatchSize {
			select {
			case m := <-ch:
				k := eventbus.Count(m.Headers())
				if n+k > l.cfg.BatchSize {
					carry = m
					break drain
				}
				batch, n = append(batch, m), n+k
			default:
				break drain
			}
		}
		if l.cfg.Gate != nil {
			if err := l.cfg.Gate(ctx); err != nil {
				return nil // stopping: the next owner reads the batch again from the cursor
			}
		}
		var cursor uint64
		if now := time.Now(); unrecorded != 0 && now.Sub(recordedAt) >= cursorEvery {
			cursor, recordedAt = unrecorded, now
		}
		last, err := l.process(ctx, p, batch, cursor)
		if err != nil {
			return nil // stopping
		}
		held.Add(-int64(len(batch)))
		if last > 0 {
			unrecorded = last
		}
	}
}

// cursorIdle is how long a partition may sit idle before its cursor is written on its own
// (a busy partition moves it in the next batch's transaction). Writing it after every
// quiet batch doubled the transactions of light, latency-bound loads.
const cursorIdle = 200 * time.Millisecond

// cursorEvery is how often a busy partition's batches move its cursor in their
// transaction: moving it in every one cost a statement per commit (a tenth of a chain
// step's Postgres time), and a takeover reads at most this much of the stream again.
const cursorEvery = 100 * time.Millisecond

// process commits one batch of partition p (moving the partition's cursor to cursor in the
// same transaction) and forwards what it caused, retrying until it succeeds or ctx ends.
// It returns the batch's last stream sequence, for the cursor.
func (l *loop) process(ctx context.Context, p int, msgs []jetstream.Msg, cursor uint64) (uint64, error) {
	evs := make([]*eventv1.Event, 0, len(msgs))
	keep := make([]jetstream.Msg, 0, len(msgs))
	bodies := make([][]byte, 0, len(msgs))
	for _, m := range msgs {
		bs, err := eventbus.Bodies(m.Headers(), m.Data())
		if err != nil {
			l.log.Error("dropping malformed event batch", slog.String("subject", m.Subject()))
			l.m.rejected.Inc()
			continue
		}
		for _, body := range bs {
			ev := &eventv1.Event{}
			if err := proto.Unmarshal(body, ev); err != nil || ev.GetExecutionId() == "" || ev.GetEventId() == "" {
				l.log.Error("dropping malformed event", slog.String("subject", m.Subject()))
				l.m.rejected.Inc()
				continue
			}
			evs = append(evs, ev)
			keep = append(keep, m) // a batch's events share its message (and its trace)
			bodies = append(bodies, body)
		}
	}
	var last uint64
	if md, err := msgs[len(msgs)-1].Metadata(); err == nil {
		last = md.Sequence.Stream
	}
	j := &job{partition: p, evs: evs, bodies: bodies, msgs: keep, cursor: writer.Cursor{Group: l.cfg.Group, Partition: p, StreamSeq: cursor}}
	backoff := 100 * time.Millisecond
	for {
		err := l.group.submit(ctx, j)
		if err == nil {
			break
		}
		l.log.Warn("batch will be retried", slog.Int("partition", p), slog.Int("events", len(evs)), slog.String("error", err.Error()))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	l.sat.advanced(p)
	return last, nil
}

// commit writes the batches of jobs (of distinct partitions) in one transaction, moving
// their partitions' cursors in it, then forwards the committed commands and the commit
// notices. An error means every batch must be processed again (as after a crash):
// whatever was committed comes back as duplicates, whose commands and notices are
// forwarded again.
func (l *loop) commit(ctx context.Context, jobs []*job) error {
	var evs []*eventv1.Event
	var bodies [][]byte
	var msgs []jetstream.Msg
	var cursors []writer.Cursor
	for _, j := range jobs {
		evs, bodies, msgs = append(evs, j.evs...), append(bodies, j.bodies...), append(msgs, j.msgs...)
		if j.cursor.StreamSeq > 0 {
			cursors = append(cursors, j.cursor)
		}
	}
	if len(evs) == 0 {
		return nil
	}
	spans := l.startSpans(ctx, evs, msgs)
	start := time.Now()
	res, err := l.w.Commit(writer.WithSpans(ctx, func(id string) context.Context { return spans.byExecution[id] }), evs, bodies, cursors...)
	if err != nil {
		spans.end(err)
		return fmt.Errorf("commit: %w", err)
	}
	if err := failpoint.Eval(failpoint.MaterializerAfterCommit); err != nil {
		spans.end(err)
		return err
	}
	l.m.commit.Observe(time.Since(start).Seconds())
	l.m.batch.Observe(float64(len(evs)))
	l.m.committed.Add(float64(res.Committed))
	for _, o := range res.Outcomes {
		switch o {
		case writer.Duplicate:
			l.m.duplicates.Inc()
		case writer.Rejected:
			l.m.rejected.Inc()
		case writer.Superseded:
			l.m.superseded.Inc()
		}
	}
	// Each forwarded message continues the trace of the event that caused it: a command
	// its command.issued (a pack of the commands of one execution and pool, commandbus, its
	// first command's), a notice the execution's last event in the batch.
	cmds := make([]*eventv1.Command, 0, len(res.Commands))
	encoded := make([][]byte, 0, len(res.Commands))
	for i, c := range res.Commands {
		if failpoint.Eval(failpoint.MaterializerLoseCommand) == nil {
			cmds, encoded = append(cmds, c), append(encoded, res.EncodedCommands[i])
		}
	}
	out, err := commandbus.Messages(cmds, encoded, l.cfg.Partitions, func(c *eventv1.Command) nats.Header {
		h := spans.header(spans.byEventID[c.GetIssuedEventId()])
		if t := res.DecisionTraces[c.GetExecutionId()]; h == nil && t != nil {
			h = nats.Header{} // a decision taken inside the commit: its command continues it
			for k, v := range t {
				h.Set(k, v)
			}
		}
		return h
	})
	if err != nil {
		spans.end(err)
		return fmt.Errorf("forward: %w", err)
	}
	if now := time.Now().UnixNano(); len(res.Commands) > 0 && now-l.keptAt.Load() >= int64(natsx.KeepEvery) {
		// After the commands, so it lands in the stream's last block with them.
		l.keptAt.Store(now)
		out = append(out, natsx.Message{Subject: natsx.KeepSubject})
	}
	// The notice of a commit whose decision was taken inside it is for the execution's
	// waiters and watchers only (the orchestrator answered it, so it holds that state, and
	// its next request confirms it): a core message after the forward, no stream write.
	var advanced []*eventv1.CommitNotice
	for _, n := range res.Notices {
		if failpoint.Eval(failpoint.MaterializerLoseNotice) != nil {
			continue
		}
		if res.Inline[n.GetExecutionId()] && !n.GetNeedsDecision() && !n.GetTerminal() {
			advanced = append(advanced, n)
			continue
		}
		b, _ := proto.Marshal(n)
		out = append(out, natsx.Message{Subject: natsx.CommittedSubject(n.GetExecutionId(), l.cfg.Partitions), MsgID: fmt.Sprintf("%s:%d", n.GetExecutionId(), n.GetSeq()), Data: b,
			Header: spans.header(spans.byExecution[n.GetExecutionId()])})
	}
	// Within a window, so the committers together stay below the JetStream client's limit
	// of unacknowledged async publishes (4,000), past which a publish fails as stalled and
	// the whole batch is processed again.
	if err := natsx.PublishWindowed(ctx, l.js, out, forwardWindow); err != nil {
		spans.end(err)
		return fmt.Errorf("forward: %w", err)
	}
	if err := failpoint.Eval(failpoint.MaterializerAfterPublish); err != nil {
		spans.end(err)
		return err
	}
	// Best effort, as any core message: a watch that misses one reads the log at the next
	// notice or reconnect (starts and terminal commits are announced on the stream).
	for _, n := range advanced {
		b, _ := proto.Marshal(n)
		_ = l.nc.Publish(natsx.AdvancedSubject(n.GetExecutionId(), l.cfg.Partitions), b)
	}
	// Committed cancellations stop running commands (best effort: a worker that misses it
	// finishes the command, and its events are dropped after the terminal event).
	for _, id := range res.Cancelled {
		_ = l.nc.Publish(natsx.CancelSubject(id), nil)
	}
	spans.end(nil)
	return nil
}

// forwardWindow is how many forwarded messages a commit has unacknowledged at most: with
// the materializer's 16 committers at most, 3,072 together, below the NATS client's 4,000.
const forwardWindow = 192

// batchSpans are the commit spans of one batch: one per distinct parent (the decision or
// tool run that published the events), from receipt to acknowledgement, so each
// execution's trace runs through the commit of its events.
type batchSpans struct {
	spans []trace.Span
	// byEventID and byExecution hold the context of the commit span of an event that issued
	// commands (command.issued, commands.issued) by id, and of an execution's last event in
	// the batch.
	byEventID   map[string]context.Context
	byExecution map[string]context.Context
}

func (l *loop) startSpans(ctx context.Context, evs []*eventv1.Event, msgs []jetstream.Msg) *batchSpans {
	// With tracing off the tracer records nothing but still hands each parent's context on,
	// so the trace passes through to the services that record it.
	bs := &batchSpans{byEventID: map[string]context.Context{}, byExecution: map[string]context.Context{}}
	type group struct {
		ctx    context.Context
		span   trace.Span
		first  *eventv1.Event
		events int
		// mixedExec and mixedStep: the group holds events of several executions, steps.
		mixedExec, mixedStep bool
	}
	groups := map[[24]byte]*group{}
	var order []*group
	var g *group
	for i, m := range msgs {
		// The events of one batch message are adjacent and share its trace: its header is
		// read once.
		if i == 0 || m != msgs[i-1] {
			parent := natsx.Extract(ctx, m.Headers())
			sc := trace.SpanContextFromContext(parent)
			var key [24]byte
			tid, sid := sc.TraceID(), sc.SpanID()
			copy(key[:16], tid[:])
			copy(key[16:], sid[:])
			if g = groups[key]; g == nil {
				g = &group{first: evs[i]}
				g.ctx, g.span = l.tracer.Start(parent, "commit", trace.WithSpanKind(trace.SpanKindConsumer))
				groups[key] = g
				order = append(order, g)
			}
		}
		g.events++
		g.mixedExec = g.mixedExec || evs[i].GetExecutionId() != g.first.GetExecutionId()
		g.mixedStep = g.mixedStep || evs[i].GetStep() != g.first.GetStep()
		if domain.IsIssue(evs[i].GetType()) { // the events whose context is looked up by id
			bs.byEventID[evs[i].GetEventId()] = g.ctx
		}
		bs.byExecution[evs[i].GetExecutionId()] = g.ctx
	}
	for _, g := range order {
		g.span.SetAttributes(telemetry.AttrEvents.Int(g.events))
		if !g.mixedExec {
			g.span.SetAttributes(telemetry.Execution(g.first.GetTenant(), g.first.GetExecutionId(), "", 0)...)
		}
		if !g.mixedStep && g.first.GetStep() != "" {
			g.span.SetAttributes(telemetry.AttrStep.String(g.first.GetStep()))
		}
		bs.spans = append(bs.spans, g.span)
	}
	return bs
}

// header returns a header carrying the trace of ctx, nil for no trace.
func (bs *batchSpans) header(ctx context.Context) nats.Header {
	if ctx == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	return natsx.Inject(ctx, nil)
}

// end ends the batch's spans, failed with err when it is not nil.
func (bs *batchSpans) end(err error) {
	for _, s := range bs.spans {
		telemetry.ErrorStatus(s, err)
		s.End()
	}
}
