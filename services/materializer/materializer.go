// Package materializer is the NoETL materializer service, the only writer of the event
// log. It consumes NOETL_EVENTS in batches, commits each batch in one transaction, then
// forwards committed commands to NOETL_COMMANDS and commit notices to NOETL_COMMITTED, and
// only then acks the batch. A crash anywhere in between loses nothing (the batch is
// redelivered) and duplicates nothing (the log dedupes by event id).
package materializer

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/failpoint"
	"github.com/noetl/noetl/internal/platform/app"
	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/platform/telemetry"
	"github.com/noetl/noetl/services/materializer/internal/writer"
)

// Defaults of the saturation settings.
const (
	DefaultMaxLag     = 100000
	DefaultStallAfter = time.Minute
)

// Config is the materializer's configuration.
type Config struct {
	AdminAddr   string
	NATSURL     string
	PostgresURL string
	Partitions  int
	BatchSize   int
	Consumer    string
	// MaxLag is the consumer lag (events pending plus in flight) past which /readyz
	// reports the materializer saturated.
	MaxLag int
	// StallAfter is how long the loop may commit nothing while events are pending before
	// /readyz reports it stalled.
	StallAfter time.Duration
	// Trace chooses where spans go.
	Trace telemetry.Config

	// AdminListener, when set, is used instead of AdminAddr (in-process meshes).
	AdminListener net.Listener `json:"-"`
	// Gate, when set, is called before each batch is committed and holds the loop while it
	// blocks, as a stuck commit would (tests pause the consumer with it).
	Gate func(context.Context) error `json:"-"`
	// LagPoll is how often the consumer's lag is read (zero: natsx.DefaultLagPoll).
	LagPoll time.Duration `json:"-"`
}

// Flags binds the configuration to flags and NOETL_* env vars.
func (c *Config) Flags(fs *config.FlagSet) {
	fs.String(&c.AdminAddr, "admin", "NOETL_MATERIALIZER_ADMIN", "127.0.0.1:9063", "admin HTTP listen address (/livez, /readyz, /metrics)")
	fs.String(&c.NATSURL, "nats", "NOETL_NATS_URL", "nats://127.0.0.1:4222", "NATS URL")
	fs.Secret(&c.PostgresURL, "pg", "NOETL_PG_URL", "", "Postgres URL")
	fs.Int(&c.Partitions, "partitions", "NOETL_PARTITIONS", natsx.DefaultPartitions, "execution partitions")
	fs.Int(&c.BatchSize, "batch-size", "NOETL_MATERIALIZER_BATCH", 1024, "maximum events per commit")
	fs.String(&c.Consumer, "consumer", "NOETL_MATERIALIZER_CONSUMER", "materializer", "durable consumer name on NOETL_EVENTS")
	fs.Int(&c.MaxLag, "max-lag", "NOETL_MATERIALIZER_MAX_LAG", DefaultMaxLag, "consumer lag (events pending plus in flight) past which /readyz fails")
	fs.Duration(&c.StallAfter, "stall-after", "NOETL_MATERIALIZER_STALL_AFTER", DefaultStallAfter, "how long nothing may be committed while events are pending before /readyz fails")
	c.Trace.Flags(fs)
}

type metrics struct {
	committed, duplicates, rejected prometheus.Counter
	batch                           prometheus.Histogram
	commit                          prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		committed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_materializer_events_committed_total", Help: "Events inserted into the log."}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_materializer_dedupe_hits_total", Help: "Events dropped as duplicates of logged events."}),
		rejected:   prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_materializer_rejected_total", Help: "Events dropped: after terminal, unknown execution or tenant mismatch."}),
		batch:      prometheus.NewHistogram(prometheus.HistogramOpts{Name: "noetl_materializer_batch_size", Help: "Events per commit.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		commit:     prometheus.NewHistogram(prometheus.HistogramOpts{Name: "noetl_materializer_commit_seconds", Help: "Commit latency.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
	}
	reg.MustRegister(m.committed, m.duplicates, m.rejected, m.batch, m.commit)
	return m
}

// Run runs the materializer until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	log = log.With(slog.String("service", "materializer"))
	if err := config.Required(&cfg, "PostgresURL", "NATSURL"); err != nil {
		return err
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1024
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "materializer"
	}
	if cfg.MaxLag <= 0 {
		cfg.MaxLag = DefaultMaxLag
	}
	if cfg.StallAfter <= 0 {
		cfg.StallAfter = DefaultStallAfter
	}
	tel, err := telemetry.Setup(ctx, "materializer", cfg.Trace)
	if err != nil {
		return err
	}
	defer tel.Close(log)
	db, err := pgxext.Open(ctx, cfg.PostgresURL, 8, true, log)
	if err != nil {
		return err
	}
	defer db.Close()
	nc, js, err := natsx.Connect(cfg.NATSURL, "materializer")
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := natsx.EnsureStreams(ctx, js, natsx.StreamConfig{}); err != nil {
		return err
	}
	adminLis, err := app.Listen(cfg.AdminListener, cfg.AdminAddr)
	if err != nil {
		return err
	}
	srv := app.NewServer("materializer", log, nil, adminLis, tel.ServerOption())
	srv.AddCheck("postgres", pgxext.Check(db))
	srv.AddCheck("nats", natsx.Check(nc))
	sat := &saturation{maxLag: uint64(cfg.MaxLag), stallAfter: cfg.StallAfter, now: time.Now}
	lag := natsx.NewLagMonitor(js, natsx.StreamEvents, cfg.Consumer, "", cfg.LagPoll, srv.Registry, log)
	lag.OnPoll = sat.observe
	srv.AddCheck("consumer-lag", sat.checkLag)
	srv.AddCheck("progress", sat.checkProgress)
	m := &loop{cfg: cfg, log: log, nc: nc, js: js, w: &writer.Writer{DB: db}, m: newMetrics(srv.Registry), tracer: tel.Tracer(), sat: sat}
	log.Info("materializer consuming", slog.String("admin", srv.AdminAddr()))
	return srv.Run(ctx, 10*time.Second, m.run, lag.Run)
}

// saturation decides whether the materializer keeps up: its consumer's lag (read on the
// lag monitor's goroutine) under MaxLag, and batches being committed while events are
// pending. A TCP or liveness probe cannot see either: a wedged writer still accepts
// connections.
type saturation struct {
	maxLag     uint64
	stallAfter time.Duration
	now        func() time.Time

	// progress is when the loop last finished a batch (unix nanoseconds).
	progress atomic.Int64

	mu  sync.Mutex
	lag natsx.ConsumerLag
	// pendingSince is when events were first seen pending with no batch finished since;
	// zero while nothing is pending.
	pendingSince time.Time
}

// advanced records a finished batch.
func (s *saturation) advanced() { s.progress.Store(s.now().UnixNano()) }

// observe takes a reading of the consumer's lag.
func (s *saturation) observe(l natsx.ConsumerLag) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.Err != nil {
		s.lag.Err = l.Err
		return
	}
	s.lag = l
	switch {
	case l.Total() == 0:
		s.pendingSince = time.Time{}
	case s.pendingSince.IsZero() || s.progress.Load() >= s.pendingSince.UnixNano():
		s.pendingSince = l.At
	}
}

// lagStaleAfter is how long the last good reading of the lag stands in for failed ones.
const lagStaleAfter = 10 * time.Second

// checkLag fails while the consumer's lag exceeds maxLag, or while its state cannot be
// read (an unknown lag is not a lag of zero).
func (s *saturation) checkLag(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lag.Err != nil && (s.lag.At.IsZero() || s.now().Sub(s.lag.At) > lagStaleAfter) {
		return fmt.Errorf("consumer state unreadable: %w", s.lag.Err)
	}
	if n := s.lag.Total(); n > s.maxLag {
		return fmt.Errorf("consumer lag %d (%d pending, %d in flight) exceeds %d", n, s.lag.Pending, s.lag.AckPending, s.maxLag)
	}
	return nil
}

// checkProgress fails when events have been pending for stallAfter without a batch
// finished.
func (s *saturation) checkProgress(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pendingSince.IsZero() || s.progress.Load() >= s.pendingSince.UnixNano() {
		return nil
	}
	if d := s.now().Sub(s.pendingSince); d > s.stallAfter {
		return fmt.Errorf("nothing committed for %s with %d events pending", d.Round(time.Second), s.lag.Total())
	}
	return nil
}

type loop struct {
	cfg    Config
	log    *slog.Logger
	nc     *nats.Conn
	js     jetstream.JetStream
	w      *writer.Writer
	m      *metrics
	tracer trace.Tracer
	sat    *saturation
}

func (l *loop) run(ctx context.Context) error {
	cons, err := l.js.CreateOrUpdateConsumer(ctx, natsx.StreamEvents, jetstream.ConsumerConfig{
		Durable:       l.cfg.Consumer,
		FilterSubject: "noetl.events.>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 4 * l.cfg.BatchSize,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("events consumer: %w", err)
	}
	ch := make(chan jetstream.Msg, 2*l.cfg.BatchSize)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case ch <- m:
		case <-ctx.Done():
		}
	}, jetstream.PullMaxMessages(2*l.cfg.BatchSize))
	if err != nil {
		return err
	}
	defer cc.Stop()
	batch := make([]jetstream.Msg, 0, l.cfg.BatchSize)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return nil
		case m := <-ch:
			batch = append(batch, m)
		}
	drain:
		for len(batch) < l.cfg.BatchSize {
			select {
			case m := <-ch:
				batch = append(batch, m)
			default:
				break drain
			}
		}
		if l.cfg.Gate != nil {
			if err := l.cfg.Gate(ctx); err != nil {
				return nil // stopping: the batch is redelivered
			}
		}
		l.process(ctx, batch)
	}
}

func (l *loop) process(ctx context.Context, msgs []jetstream.Msg) {
	evs := make([]*eventv1.Event, 0, len(msgs))
	keep := make([]jetstream.Msg, 0, len(msgs))
	for _, m := range msgs {
		ev := &eventv1.Event{}
		if err := proto.Unmarshal(m.Data(), ev); err != nil || ev.GetExecutionId() == "" || ev.GetEventId() == "" {
			l.log.Error("dropping malformed event", slog.String("subject", m.Subject()))
			l.m.rejected.Inc()
			_ = m.Term()
			continue
		}
		evs = append(evs, ev)
		keep = append(keep, m)
	}
	if len(evs) == 0 {
		l.sat.advanced()
		return
	}
	spans := l.startSpans(ctx, evs, keep)
	start := time.Now()
	res, err := l.w.Commit(ctx, evs)
	if err != nil {
		l.log.Error("commit failed; batch will be redelivered", slog.Int("events", len(evs)), slog.String("error", err.Error()))
		spans.end(err)
		for _, m := range keep {
			_ = m.NakWithDelay(250 * time.Millisecond)
		}
		return
	}
	if err := failpoint.Eval(failpoint.MaterializerAfterCommit); err != nil {
		spans.end(err)
		l.nakAll(keep, err)
		return
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
		}
	}
	// Each forwarded message continues the trace of the event that caused it: a command
	// its command.issued, a notice the execution's last event in the batch.
	out := make([]natsx.Message, 0, len(res.Commands)+len(res.Notices))
	for _, c := range res.Commands {
		if failpoint.Eval(failpoint.MaterializerLoseCommand) != nil {
			continue
		}
		b, err := proto.Marshal(c)
		if err != nil {
			continue
		}
		out = append(out, natsx.Message{Subject: natsx.CommandSubject(c.GetPool(), c.GetExecutionId(), l.cfg.Partitions), MsgID: c.GetCommandId(), Data: b,
			Header: spans.header(spans.byEventID[c.GetIssuedEventId()])})
	}
	for _, n := range res.Notices {
		if failpoint.Eval(failpoint.MaterializerLoseNotice) != nil {
			continue
		}
		b, _ := proto.Marshal(n)
		out = append(out, natsx.Message{Subject: natsx.CommittedSubject(n.GetExecutionId(), l.cfg.Partitions), MsgID: fmt.Sprintf("%s:%d", n.GetExecutionId(), n.GetSeq()), Data: b,
			Header: spans.header(spans.byExecution[n.GetExecutionId()])})
	}
	if err := natsx.PublishAll(ctx, l.js, out); err != nil {
		l.log.Error("forwarding failed; batch will be redelivered", slog.String("error", err.Error()))
		spans.end(err)
		for _, m := range keep {
			_ = m.NakWithDelay(250 * time.Millisecond)
		}
		return
	}
	if err := failpoint.Eval(failpoint.MaterializerAfterPublish); err != nil {
		spans.end(err)
		l.nakAll(keep, err)
		return
	}
	// Committed cancellations stop running commands (best effort: a worker that misses it
	// finishes the command, and its events are dropped after the terminal event).
	for _, id := range res.Cancelled {
		_ = l.nc.Publish(natsx.CancelSubject(id), nil)
	}
	for _, m := range keep {
		_ = m.Ack()
	}
	spans.end(nil)
	l.sat.advanced()
}

// batchSpans are the commit spans of one batch: one per distinct parent (the decision or
// tool run that published the events), from receipt to acknowledgement, so each
// execution's trace runs through the commit of its events.
type batchSpans struct {
	spans []trace.Span
	// byEventID and byExecution hold the context of the commit span of an event by id, and
	// of an execution's last event in the batch.
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
	for i, m := range msgs {
		parent := natsx.Extract(ctx, m.Headers())
		sc := trace.SpanContextFromContext(parent)
		var key [24]byte
		tid, sid := sc.TraceID(), sc.SpanID()
		copy(key[:16], tid[:])
		copy(key[16:], sid[:])
		g := groups[key]
		if g == nil {
			g = &group{first: evs[i]}
			g.ctx, g.span = l.tracer.Start(parent, "commit", trace.WithSpanKind(trace.SpanKindConsumer))
			groups[key] = g
			order = append(order, g)
		}
		g.events++
		g.mixedExec = g.mixedExec || evs[i].GetExecutionId() != g.first.GetExecutionId()
		g.mixedStep = g.mixedStep || evs[i].GetStep() != g.first.GetStep()
		bs.byEventID[evs[i].GetEventId()] = g.ctx
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

// nakAll hands a batch back for redelivery (the crash-and-restart path).
func (l *loop) nakAll(msgs []jetstream.Msg, err error) {
	l.log.Warn("batch handed back for redelivery", slog.Int("events", len(msgs)), slog.String("error", err.Error()))
	for _, m := range msgs {
		_ = m.NakWithDelay(100 * time.Millisecond)
	}
}
