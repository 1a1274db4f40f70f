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
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/failpoint"
	"github.com/noetl/noetl/internal/platform/app"
	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/services/materializer/internal/writer"
)

// Config is the materializer's configuration.
type Config struct {
	AdminAddr   string
	NATSURL     string
	PostgresURL string
	Partitions  int
	BatchSize   int
	Consumer    string

	// AdminListener, when set, is used instead of AdminAddr (in-process meshes).
	AdminListener net.Listener `json:"-"`
}

// Flags binds the configuration to flags and NOETL_* env vars.
func (c *Config) Flags(fs *config.FlagSet) {
	fs.String(&c.AdminAddr, "admin", "NOETL_MATERIALIZER_ADMIN", "127.0.0.1:9063", "admin HTTP listen address (/livez, /readyz, /metrics)")
	fs.String(&c.NATSURL, "nats", "NOETL_NATS_URL", "nats://127.0.0.1:4222", "NATS URL")
	fs.Secret(&c.PostgresURL, "pg", "NOETL_PG_URL", "", "Postgres URL")
	fs.Int(&c.Partitions, "partitions", "NOETL_PARTITIONS", natsx.DefaultPartitions, "execution partitions")
	fs.Int(&c.BatchSize, "batch-size", "NOETL_MATERIALIZER_BATCH", 1024, "maximum events per commit")
	fs.String(&c.Consumer, "consumer", "NOETL_MATERIALIZER_CONSUMER", "materializer", "durable consumer name on NOETL_EVENTS")
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
	srv := app.NewServer("materializer", log, nil, adminLis)
	srv.AddCheck("postgres", pgxext.Check(db))
	srv.AddCheck("nats", natsx.Check(nc))
	m := &loop{cfg: cfg, log: log, nc: nc, js: js, w: &writer.Writer{DB: db}, m: newMetrics(srv.Registry)}
	log.Info("materializer consuming", slog.String("admin", srv.AdminAddr()))
	return srv.Run(ctx, 10*time.Second, m.run)
}

type loop struct {
	cfg Config
	log *slog.Logger
	nc  *nats.Conn
	js  jetstream.JetStream
	w   *writer.Writer
	m   *metrics
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
		return
	}
	start := time.Now()
	res, err := l.w.Commit(ctx, evs)
	if err != nil {
		l.log.Error("commit failed; batch will be redelivered", slog.Int("events", len(evs)), slog.String("error", err.Error()))
		for _, m := range keep {
			_ = m.NakWithDelay(250 * time.Millisecond)
		}
		return
	}
	if err := failpoint.Eval(failpoint.MaterializerAfterCommit); err != nil {
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
	out := make([]natsx.Message, 0, len(res.Commands)+len(res.Notices))
	for _, c := range res.Commands {
		if failpoint.Eval(failpoint.MaterializerLoseCommand) != nil {
			continue
		}
		b, err := proto.Marshal(c)
		if err != nil {
			continue
		}
		out = append(out, natsx.Message{Subject: natsx.CommandSubject(c.GetPool(), c.GetExecutionId(), l.cfg.Partitions), MsgID: c.GetCommandId(), Data: b})
	}
	for _, n := range res.Notices {
		if failpoint.Eval(failpoint.MaterializerLoseNotice) != nil {
			continue
		}
		b, _ := proto.Marshal(n)
		out = append(out, natsx.Message{Subject: natsx.CommittedSubject(n.GetExecutionId(), l.cfg.Partitions), MsgID: fmt.Sprintf("%s:%d", n.GetExecutionId(), n.GetSeq()), Data: b})
	}
	if err := natsx.PublishAll(ctx, l.js, out); err != nil {
		l.log.Error("forwarding failed; batch will be redelivered", slog.String("error", err.Error()))
		for _, m := range keep {
			_ = m.NakWithDelay(250 * time.Millisecond)
		}
		return
	}
	if err := failpoint.Eval(failpoint.MaterializerAfterPublish); err != nil {
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
}

// nakAll hands a batch back for redelivery (the crash-and-restart path).
func (l *loop) nakAll(msgs []jetstream.Msg, err error) {
	l.log.Warn("batch handed back for redelivery", slog.Int("events", len(msgs)), slog.String("error", err.Error()))
	for _, m := range msgs {
		_ = m.NakWithDelay(100 * time.Millisecond)
	}
}
