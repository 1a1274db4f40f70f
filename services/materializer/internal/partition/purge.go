package partition

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/services/materializer/internal/lease"
)

// DefaultPurgeEvery is how often NOETL_EVENTS is purged of committed events.
const DefaultPurgeEvery = 30 * time.Second

// purger removes from NOETL_EVENTS the events that every consumer group has committed and
// forwarded: those below the lowest cursor of their partition (lease.Cursors.Floors). The
// stream then holds what is still in transit (the materializers' lag, and the last
// committed event of each partition) instead of a day of history (its MaxAge), so its
// disk use follows the lag, not the throughput. Nothing a materializer may read again is
// removed: a replica that takes a partition over reads from the partition's cursor on,
// and the floor is at or below every group's cursor. A group with no cursor yet (a new
// one) starts from what the stream still holds.
type purger struct {
	js      jetstream.JetStream
	cursors lease.Cursors
	every   time.Duration
	log     *slog.Logger
	purges  prometheus.Counter
	// done is the floor each partition was last purged to.
	done map[int]uint64
}

func newPurger(js jetstream.JetStream, cursors lease.Cursors, every time.Duration, log *slog.Logger, reg prometheus.Registerer) *purger {
	if every <= 0 {
		every = DefaultPurgeEvery
	}
	pu := &purger{js: js, cursors: cursors, every: every, log: log, done: map[int]uint64{},
		purges: prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_materializer_events_purges_total", Help: "Purges of a partition's committed events from NOETL_EVENTS."})}
	reg.MustRegister(pu.purges)
	return pu
}

// run purges every pu.every until ctx ends.
func (pu *purger) run(ctx context.Context) error {
	t := time.NewTicker(pu.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := pu.once(ctx); err != nil && ctx.Err() == nil {
			pu.log.Warn("events not purged", slog.String("error", err.Error()))
		}
	}
}

// once purges each partition below its floor, keeping the event at the floor.
func (pu *purger) once(ctx context.Context) error {
	floors, err := pu.cursors.Floors(ctx)
	if err != nil {
		return err
	}
	stream, err := pu.js.Stream(ctx, natsx.StreamEvents)
	if err != nil {
		return err
	}
	for p, floor := range floors {
		if floor <= 1 || floor <= pu.done[p] {
			continue
		}
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(partitionSubject(p)), jetstream.WithPurgeSequence(floor)); err != nil {
			return err
		}
		pu.done[p] = floor
		pu.purges.Inc()
	}
	return nil
}
