package natsx

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultLagPoll is how often a LagMonitor reads its consumer's state.
const DefaultLagPoll = 2 * time.Second

// ConsumerLag is one reading of a durable consumer's backlog.
type ConsumerLag struct {
	// Pending counts messages matching the consumer's filter not delivered yet.
	Pending uint64
	// AckPending counts messages delivered and not acknowledged yet: in flight.
	AckPending int
	// MaxAckPending is the consumer's limit of AckPending.
	MaxAckPending int
	// Redelivered counts unacknowledged messages delivered more than once.
	Redelivered int
	// At is when the reading was taken; zero before the first one succeeds.
	At time.Time
	// Err is the error of the latest attempt, nil when it succeeded.
	Err error
}

// Total is the consumer's lag: pending plus in flight, as KEDA reads it.
func (l ConsumerLag) Total() uint64 { return l.Pending + uint64(max(l.AckPending, 0)) }

// LagMonitor reads a durable consumer's state (consumer info) on its own goroutine and
// exports it as gauges labelled by stream, consumer and pool. It runs apart from the loop
// that consumes, so the backlog keeps being reported when that loop is stuck.
type LagMonitor struct {
	js       jetstream.JetStream
	stream   string
	consumer string
	every    time.Duration
	log      *slog.Logger

	// OnPoll, when set before Run, is called after every reading (failed ones included).
	OnPoll func(ConsumerLag)

	pending, ackPending, maxAckPending, redelivered prometheus.Gauge
	errors                                          prometheus.Counter

	mu   sync.Mutex
	last ConsumerLag
}

// register registers c on reg, or returns the equal collector registered before (by
// another monitor of the same service).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}

// NewLagMonitor returns a monitor of the durable consumer on stream, labelled with pool
// (empty for consumers that serve no pool), reading every every (DefaultLagPoll when zero).
func NewLagMonitor(js jetstream.JetStream, stream, consumer, pool string, every time.Duration, reg prometheus.Registerer, log *slog.Logger) *LagMonitor {
	if every <= 0 {
		every = DefaultLagPoll
	}
	names := []string{"stream", "consumer", "pool"}
	gauge := func(name, help string) prometheus.Gauge {
		v := register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, names))
		return v.WithLabelValues(stream, consumer, pool)
	}
	errs := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "noetl_nats_consumer_info_errors_total",
		Help: "Failed readings of a consumer's state."}, names))
	return &LagMonitor{js: js, stream: stream, consumer: consumer, every: every, log: log,
		pending:       gauge("noetl_nats_consumer_pending", "Messages matching a consumer's filter not delivered yet."),
		ackPending:    gauge("noetl_nats_consumer_ack_pending", "Messages delivered to a consumer and not acknowledged yet (in flight)."),
		maxAckPending: gauge("noetl_nats_consumer_max_ack_pending", "A consumer's limit of unacknowledged messages."),
		redelivered:   gauge("noetl_nats_consumer_redelivered", "Unacknowledged messages of a consumer delivered more than once."),
		errors:        errs.WithLabelValues(stream, consumer, pool)}
}

// Run reads the consumer's state until ctx ends.
func (m *LagMonitor) Run(ctx context.Context) error {
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

func (m *LagMonitor) poll(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, min(m.every, 5*time.Second)+time.Second)
	defer cancel()
	c, err := m.js.Consumer(pctx, m.stream, m.consumer)
	m.mu.Lock()
	if err != nil {
		if ctx.Err() != nil {
			m.mu.Unlock()
			return
		}
		m.errors.Inc()
		m.last.Err = err
		if m.log != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			m.log.Warn("consumer info", slog.String("consumer", m.consumer), slog.String("error", err.Error()))
		}
	} else {
		info := c.CachedInfo()
		m.last = ConsumerLag{Pending: info.NumPending, AckPending: info.NumAckPending, MaxAckPending: info.Config.MaxAckPending,
			Redelivered: info.NumRedelivered, At: time.Now()}
		m.pending.Set(float64(info.NumPending))
		m.ackPending.Set(float64(info.NumAckPending))
		m.maxAckPending.Set(float64(info.Config.MaxAckPending))
		m.redelivered.Set(float64(info.NumRedelivered))
	}
	last := m.last
	m.mu.Unlock()
	if m.OnPoll != nil {
		m.OnPoll(last)
	}
}

// Lag returns the latest reading.
func (m *LagMonitor) Lag() ConsumerLag {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}
