// Package materializer is the NoETL materializer service, the only writer of the event
// log. It consumes the partitions of NOETL_EVENTS it holds leases on (all of them when it
// runs alone), commits each batch in one transaction, then forwards committed commands to
// NOETL_COMMANDS and commit notices to NOETL_COMMITTED, and only then moves the
// partition's cursor past the batch (in the next batch's transaction, or on its own when
// the partition has nothing more to commit). A crash anywhere in between loses nothing
// (the next owner reads the batch again from the cursor) and duplicates nothing (the log
// dedupes by event id), and neither does a second replica consuming a partition by mistake.
package materializer

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/failpoint"
	"github.com/noetl/noetl/internal/platform/app"
	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/platform/telemetry"
	"github.com/noetl/noetl/internal/schema"
	"github.com/noetl/noetl/services/materializer/internal/lease"
	"github.com/noetl/noetl/services/materializer/internal/writer"
)

// Defaults of the batch, saturation and lease settings.
const (
	// DefaultBatchSize bounds a commit. A batch takes what has arrived, never waiting for
	// more, so the bound only matters under load, where a larger batch costs less per
	// event: fewer commit notices (one per execution per batch), round trips and
	// statements (the ingest bench spends about a third less CPU per event at 4096 than at
	// 1024).
	DefaultBatchSize  = 4096
	DefaultMaxLag     = 100000
	DefaultStallAfter = time.Minute
	DefaultLeaseTTL   = 15 * time.Second
)

// Config is the materializer's configuration.
type Config struct {
	AdminAddr string
	NATSURL   string
	// PostgresURL connects as the materializer's own login role, a member of noetl_materializer
	// (`noetl migrate` creates it). The materializer refuses to start as a role that holds
	// other privileges, or on a schema older than it needs.
	PostgresURL string
	Partitions  int
	BatchSize   int
	// Consumer names the group of materializer replicas that share the partitions of
	// NOETL_EVENTS (their leases and cursors); replicas of another name read every
	// partition on their own.
	Consumer string
	// ReplicaID identifies this replica within its group. A stable id (a pod name) lets a
	// restarted replica renew its predecessor's leases at once; empty means this process's
	// incarnation id (host, pid, a random suffix, start time and pid namespace), which a
	// later replica on the same host can prove gone and take over at once (replica.go).
	ReplicaID string
	// LeaseTTL is how long a partition lease lasts unless renewed; leases are renewed every
	// third of it, and a dead replica's partitions are taken over within it.
	LeaseTTL time.Duration
	// MaxLag is the consumer lag (events pending plus in flight, over the partitions this
	// replica owns) past which /readyz reports the materializer saturated.
	MaxLag int
	// StallAfter is how long a partition may commit nothing while its events are pending
	// before /readyz reports it stalled.
	StallAfter time.Duration
	// StreamReplicas is the JetStream replication factor of the streams this service
	// declares (zero: natsx.EnsureStreams decides).
	StreamReplicas int
	// Trace chooses where spans go.
	Trace telemetry.Config

	// AdminListener, when set, is used instead of AdminAddr (in-process meshes).
	AdminListener net.Listener `json:"-"`
	// Gate, when set, is called before each batch is committed and holds the loop while it
	// blocks, as a stuck commit would (tests pause the consumer with it).
	Gate func(context.Context) error `json:"-"`
	// LagPoll is how often the consumer's lag is read (zero: natsx.DefaultLagPoll).
	LagPoll time.Duration `json:"-"`
	// OwnPartitions, when set, makes the replica consume exactly these partitions and take
	// no lease: tests use it to make two replicas own one partition at once.
	OwnPartitions []int `json:"-"`
}

// Flags binds the configuration to flags and NOETL_* env vars.
func (c *Config) Flags(fs *config.FlagSet) {
	fs.String(&c.AdminAddr, "admin", "NOETL_MATERIALIZER_ADMIN", "127.0.0.1:9063", "admin HTTP listen address (/livez, /readyz, /metrics)")
	fs.String(&c.NATSURL, "nats", "NOETL_NATS_URL", "nats://127.0.0.1:4222", "NATS URL")
	fs.Secret(&c.PostgresURL, "pg", "NOETL_PG_URL", "", "Postgres URL, as the materializer's own login role (a member of noetl_materializer)")
	fs.Int(&c.Partitions, "partitions", "NOETL_PARTITIONS", natsx.DefaultPartitions, "execution partitions", config.Positive)
	fs.Int(&c.StreamReplicas, "stream-replicas", "NOETL_STREAM_REPLICAS", 1, "JetStream replicas of the three streams (3 on a clustered NATS)", config.Positive)
	fs.Int(&c.BatchSize, "batch-size", "NOETL_MATERIALIZER_BATCH", DefaultBatchSize, "maximum events per commit", config.Positive)
	fs.String(&c.Consumer, "consumer", "NOETL_MATERIALIZER_CONSUMER", "materializer", "group name: replicas with the same name share the partitions of NOETL_EVENTS")
	fs.String(&c.ReplicaID, "replica-id", "NOETL_MATERIALIZER_REPLICA_ID", "", "this replica's id within its group, stable across restarts (the chart sets the pod name; default: host name, pid and this process's incarnation, which a later replica on the host can prove gone)")
	fs.Duration(&c.LeaseTTL, "lease-ttl", "NOETL_MATERIALIZER_LEASE_TTL", DefaultLeaseTTL, "how long a partition lease lasts unless renewed (renewed every third of it)", config.Positive)
	fs.Int(&c.MaxLag, "max-lag", "NOETL_MATERIALIZER_MAX_LAG", DefaultMaxLag, "consumer lag (events pending plus in flight) past which /readyz fails", config.Positive)
	fs.Duration(&c.StallAfter, "stall-after", "NOETL_MATERIALIZER_STALL_AFTER", DefaultStallAfter, "how long nothing may be committed while events are pending before /readyz fails", config.Positive)
	c.Trace.Flags(fs)
}

// ParseFlags reads the materializer's configuration from args and the NOETL_* environment. A
// malformed or out-of-range value is an error naming the flag or variable and the value.
// printed reports that --print-config or -h printed instead of a start (exit 0).
func ParseFlags(args []string) (cfg Config, printed bool, err error) {
	fs := config.New("materializer")
	cfg.Flags(fs)
	printed, err = fs.Parse(args)
	return cfg, printed, err
}

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

// Run runs the materializer until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	log = log.With(slog.String("service", "materializer"))
	if err := config.Required(&cfg, "PostgresURL", "NATSURL"); err != nil {
		return err
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = natsx.DefaultPartitions
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "materializer"
	}
	if cfg.ReplicaID == "" {
		cfg.ReplicaID = defaultReplicaID()
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.MaxLag <= 0 {
		cfg.MaxLag = DefaultMaxLag
	}
	if cfg.StallAfter <= 0 {
		cfg.StallAfter = DefaultStallAfter
	}
	for _, p := range cfg.OwnPartitions {
		if p < 0 || p >= cfg.Partitions {
			return fmt.Errorf("partition %d out of [0, %d)", p, cfg.Partitions)
		}
	}
	log = log.With(slog.String("replica", cfg.ReplicaID))
	tel, err := telemetry.Setup(ctx, "materializer", cfg.Trace)
	if err != nil {
		return err
	}
	defer tel.Close(log)
	db, err := pgxext.Open(ctx, cfg.PostgresURL, 8)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := schema.Check(ctx, db, schema.Materializer); err != nil {
		return err
	}
	nc, js, err := natsx.Connect(cfg.NATSURL, "materializer")
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := natsx.EnsureStreams(ctx, js, natsx.StreamConfig{Replicas: cfg.StreamReplicas}); err != nil {
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
	lag := newLagMonitor(cfg.Consumer, cfg.LagPoll, srv.Registry, log)
	lag.onPoll = sat.observe
	srv.AddCheck("consumer-lag", sat.checkLag)
	srv.AddCheck("progress", sat.checkProgress)
	m := newMetrics(srv.Registry)
	l := &loop{cfg: cfg, log: log, nc: nc, js: js, cursors: lease.Cursors{DB: db, Group: cfg.Consumer}, w: &writer.Writer{DB: db}, m: m, tracer: tel.Tracer(), sat: sat, lag: lag}
	own := &ownership{l: l, log: log, m: m, static: cfg.OwnPartitions, every: cfg.LeaseTTL / 3}
	if cfg.OwnPartitions == nil {
		own.table = &lease.Table{DB: db, Group: cfg.Consumer, Replica: cfg.ReplicaID, Partitions: cfg.Partitions, TTL: cfg.LeaseTTL}
		own.gone = predecessorGone
	}
	srv.AddCheck("leases", own.checkLeases)
	log.Info("materializer consuming", slog.String("admin", srv.AdminAddr()))
	return srv.Run(ctx, 10*time.Second, own.run, lag.run)
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
	// held counts the events received and not yet committed and forwarded: the in-flight
	// part of the partition's lag (the rest is the consumer's pending count).
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
	// cursor is not there yet: the next batch's transaction moves it (a commit saved), or,
	// when no batch follows within cursorIdle, a write of its own. A cursor left behind only makes the
	// next owner read some events again (they are duplicates then).
	var unrecorded uint64
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
		unrecorded = 0
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		record(sctx)
	}()
	batch := make([]jetstream.Msg, 0, l.cfg.BatchSize)
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	defer idle.Stop()
	for {
		batch = batch[:0]
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
				return nil // stopping: the next owner reads the batch again from the cursor
			}
		}
		last, err := l.process(ctx, p, batch, unrecorded)
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

// process commits one batch of partition p (moving the partition's cursor to cursor in the
// same transaction) and forwards what it caused, retrying until it succeeds or ctx ends.
// It returns the batch's last stream sequence, for the cursor.
func (l *loop) process(ctx context.Context, p int, msgs []jetstream.Msg, cursor uint64) (uint64, error) {
	evs := make([]*eventv1.Event, 0, len(msgs))
	keep := make([]jetstream.Msg, 0, len(msgs))
	bodies := make([][]byte, 0, len(msgs))
	for _, m := range msgs {
		ev := &eventv1.Event{}
		if err := proto.Unmarshal(m.Data(), ev); err != nil || ev.GetExecutionId() == "" || ev.GetEventId() == "" {
			l.log.Error("dropping malformed event", slog.String("subject", m.Subject()))
			l.m.rejected.Inc()
			continue
		}
		evs = append(evs, ev)
		keep = append(keep, m)
		bodies = append(bodies, m.Data())
	}
	var last uint64
	if md, err := msgs[len(msgs)-1].Metadata(); err == nil {
		last = md.Sequence.Stream
	}
	cur := &writer.Cursor{Group: l.cfg.Consumer, Partition: p, StreamSeq: cursor}
	backoff := 100 * time.Millisecond
	for {
		err := l.commit(ctx, evs, bodies, keep, cur)
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

// commit writes evs in one transaction, then forwards the committed commands and the
// commit notices. An error means the batch must be processed again (as after a crash):
// whatever was committed comes back as duplicates, whose commands and notices are
// forwarded again.
func (l *loop) commit(ctx context.Context, evs []*eventv1.Event, bodies [][]byte, msgs []jetstream.Msg, cursor *writer.Cursor) error {
	if len(evs) == 0 {
		return nil
	}
	spans := l.startSpans(ctx, evs, msgs)
	start := time.Now()
	res, err := l.w.Commit(ctx, evs, bodies, cursor)
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
		out = append(out, natsx.Message{Subject: natsx.CommandSubject(c.GetPool(), c.GetExecutionId(), c.GetCommandId(), l.cfg.Partitions), MsgID: c.GetCommandId(), Data: b,
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
	// In windows, so the partitions together stay below the JetStream client's limit of
	// unacknowledged async publishes (4,000), past which a publish fails as stalled and
	// the whole batch is processed again.
	for len(out) > 0 {
		w := out[:min(forwardWindow, len(out))]
		out = out[len(w):]
		if err := natsx.PublishAll(ctx, l.js, w); err != nil {
			spans.end(err)
			return fmt.Errorf("forward: %w", err)
		}
	}
	if err := failpoint.Eval(failpoint.MaterializerAfterPublish); err != nil {
		spans.end(err)
		return err
	}
	// Committed cancellations stop running commands (best effort: a worker that misses it
	// finishes the command, and its events are dropped after the terminal event).
	for _, id := range res.Cancelled {
		_ = l.nc.Publish(natsx.CancelSubject(id), nil)
	}
	spans.end(nil)
	return nil
}

// forwardWindow is how many forwarded messages a partition has unacknowledged at most.
const forwardWindow = 128

// batchSpans are the commit spans of one batch: one per distinct parent (the decision or
// tool run that published the events), from receipt to acknowledgement, so each
// execution's trace runs through the commit of its events.
type batchSpans struct {
	spans []trace.Span
	// byEventID and byExecution hold the context of the commit span of a command.issued
	// event by id, and of an execution's last event in the batch.
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
		if evs[i].GetType() == domain.EventCommandIssued { // the events whose context is looked up by id
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
