package partition

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/noetl/noetl/internal/platform/natsx"
)

// lagMonitor reads, on its own goroutine, the lag of every partition this replica consumes
// and exports the sum with the gauges natsx.LagMonitor exports for one durable consumer,
// labelled with the group's name: a partition's pending events (its consumer's pending
// count) plus its events in flight (received, not yet committed and forwarded). It runs
// apart from the partition loops, so the backlog keeps being reported when they are stuck.
type lagMonitor struct {
	every time.Duration
	log   *slog.Logger

	// onPoll, when set before run, is called after every reading.
	onPoll func(total natsx.ConsumerLag, each map[int]natsx.ConsumerLag)

	pending, ackPending, maxAckPending, redelivered prometheus.Gauge
	errors                                          prometheus.Counter

	mu    sync.Mutex
	parts map[int]partitionLag
}

// partitionLag is how a partition's lag is read.
type partitionLag struct {
	cons jetstream.Consumer
	held *atomic.Int64
	// limit bounds held.
	limit int
}

func newLagMonitor(group string, every time.Duration, reg prometheus.Registerer, log *slog.Logger) *lagMonitor {
	if every <= 0 {
		every = natsx.DefaultLagPoll
	}
	labels := prometheus.Labels{"stream": natsx.StreamEvents, "consumer": group, "pool": ""}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
		reg.MustRegister(g)
		return g
	}
	errs := prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_nats_consumer_info_errors_total", Help: "Failed readings of a consumer's state.", ConstLabels: labels})
	reg.MustRegister(errs)
	return &lagMonitor{every: every, log: log, errors: errs, parts: map[int]partitionLag{},
		pending:       gauge("noetl_nats_consumer_pending", "Messages matching a consumer's filter not delivered yet."),
		ackPending:    gauge("noetl_nats_consumer_ack_pending", "Messages delivered to a consumer and not acknowledged yet (in flight)."),
		maxAckPending: gauge("noetl_nats_consumer_max_ack_pending", "A consumer's limit of unacknowledged messages."),
		redelivered:   gauge("noetl_nats_consumer_redelivered", "Unacknowledged messages of a consumer delivered more than once.")}
}

// add starts reading partition p's lag.
func (m *lagMonitor) add(p int, cons jetstream.Consumer, held *atomic.Int64, limit int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.parts[p] = partitionLag{cons: cons, held: held, limit: limit}
}

// remove stops reading partition p's lag.
func (m *lagMonitor) remove(p int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.parts, p)
}

func (m *lagMonitor) run(ctx context.Context) error {
	t := time.NewTicker(m.every)
	defer t.Stop()
	for {
		m.poll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (m *lagMonitor) poll(ctx context.Context) {
	m.mu.Lock()
	parts := maps.Clone(m.parts)
	m.mu.Unlock()
	now := time.Now()
	total := natsx.ConsumerLag{At: now}
	each := make(map[int]natsx.ConsumerLag, len(parts))
	for p, pl := range parts {
		pctx, cancel := context.WithTimeout(ctx, min(m.every, 5*time.Second)+time.Second)
		info, err := pl.cons.Info(pctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			m.errors.Inc()
			total.Err = err
			if m.log != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				m.log.Warn("consumer info", slog.Int("partition", p), slog.String("error", err.Error()))
			}
			continue
		}
		l := natsx.ConsumerLag{Pending: info.NumPending, AckPending: int(max(pl.held.Load(), 0)), MaxAckPending: pl.limit, At: now}
		each[p] = l
		total.Pending += l.Pending
		total.AckPending += l.AckPending
		total.MaxAckPending += l.MaxAckPending
	}
	if total.Err == nil {
		m.pending.Set(float64(total.Pending))
		m.ackPending.Set(float64(total.AckPending))
		m.maxAckPending.Set(float64(total.MaxAckPending))
		m.redelivered.Set(0)
	}
	if m.onPoll != nil {
		m.onPoll(total, each)
	}
}
