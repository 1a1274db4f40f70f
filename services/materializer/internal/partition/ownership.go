package partition

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/noetl/noetl/services/materializer/internal/lease"
)

// ownership decides which partitions this replica consumes and runs one loop per owned
// partition. With leases (table set) it renews, balances and takes over every renewal
// period; without (static set) it consumes the static partitions.
type ownership struct {
	l      *loop
	log    *slog.Logger
	m      *metrics
	table  *lease.Table
	static []int
	// every is the renewal period (a third of the lease TTL).
	every time.Duration

	ctx     context.Context
	running map[int]*partitionRun
	// renewed is when the last successful renewal started: the leases held then are valid
	// until renewed + TTL by any clock that does not run slow.
	renewed time.Time
	inited  bool
	// gone reports a replica of the group that has provably exited (predecessorGone).
	gone func(replica string) bool
	// holding is true while the last renewal succeeded and this replica consumes a
	// partition, or has none to take (more replicas than partitions): /readyz.
	holding atomic.Bool
}

// partitionRun is a running partition loop.
type partitionRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (o *ownership) run(ctx context.Context) error {
	o.ctx = ctx
	o.running = map[int]*partitionRun{}
	if o.table == nil {
		for _, p := range o.static {
			o.start(p)
		}
		<-ctx.Done()
		o.stop(o.owned()...)
		return nil
	}
	t := time.NewTicker(o.every)
	defer t.Stop()
	for {
		o.tick(ctx)
		select {
		case <-ctx.Done():
			// Stop consuming first (a batch in flight finishes or is abandoned), then hand the
			// leases back so the other replicas take over at once.
			o.stop(o.owned()...)
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := o.table.Leave(lctx); err != nil {
				o.log.Warn("leases not released; they expire", slog.String("error", err.Error()))
			}
			return nil
		case <-t.C:
		}
	}
}

// tick renews the leases, stops the partitions whose lease is lost, releases those above
// the fair share, acquires up to it and starts the partitions held.
func (o *ownership) tick(ctx context.Context) {
	if !o.inited {
		if err := o.table.Init(ctx); err != nil {
			o.log.Warn("lease table", slog.String("error", err.Error()))
			return
		}
		o.inited = true
	}
	if o.gone != nil {
		if taken, err := o.table.TakeOver(ctx, o.gone); err != nil {
			o.log.Warn("leases of exited replicas not taken over", slog.String("error", err.Error()))
		} else if len(taken) > 0 {
			o.log.Info("took over the leases of exited replicas", slog.Any("replicas", taken))
		}
	}
	begin := time.Now()
	held, live, err := o.table.Renew(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		o.log.Warn("leases not renewed", slog.String("error", err.Error()))
		o.holding.Store(false)
		if time.Since(o.renewed) >= o.table.TTL {
			// The leases may have expired and been taken: stop rather than consume beside the
			// new owners (which would be correct, only wasteful).
			if lost := o.owned(); len(lost) > 0 {
				o.log.Warn("leases expired unrenewed; partitions stopped", slog.Any("partitions", lost))
				o.m.lost.Add(float64(len(lost)))
				o.stop(lost...)
			}
		}
		return
	}
	o.renewed = begin
	var lost []int
	for _, p := range o.owned() {
		if !slices.Contains(held, p) {
			lost = append(lost, p)
		}
	}
	if len(lost) > 0 {
		o.log.Warn("partition leases lost to another replica", slog.Any("partitions", lost))
		o.m.lost.Add(float64(len(lost)))
		o.stop(lost...)
	}
	share := lease.Share(o.table.Partitions, live)
	switch {
	case len(held) > share:
		surplus := held[share:]
		o.stop(surplus...)
		if err := o.table.Release(ctx, surplus); err != nil {
			o.log.Warn("leases not released; they expire", slog.String("error", err.Error()))
		} else {
			o.log.Info("partition leases released", slog.Any("partitions", surplus), slog.Int("replicas", live))
			o.m.released.Add(float64(len(surplus)))
		}
		held = held[:share]
	case len(held) < share:
		got, err := o.table.Acquire(ctx, share-len(held))
		if err != nil {
			o.log.Warn("leases not acquired", slog.String("error", err.Error()))
		}
		if len(got) > 0 {
			o.log.Info("partition leases acquired", slog.Any("partitions", got), slog.Int("replicas", live))
			o.m.acquired.Add(float64(len(got)))
			held = append(held, got...)
		}
	}
	for _, p := range held {
		if o.running[p] == nil {
			o.start(p)
		}
	}
	o.m.owned.Set(float64(len(o.running)))
	o.holding.Store(len(o.running) > 0 || live > o.table.Partitions)
}

// checkLeases is the readiness check of a replica that shares partitions through leases:
// not ready until it holds its first lease (a restarted replica that waits for its
// predecessor's leases to expire commits nothing meanwhile).
func (o *ownership) checkLeases(context.Context) error {
	if o.table == nil || o.holding.Load() {
		return nil
	}
	return errors.New("holds no partition lease yet")
}

// owned lists the partitions with a running loop, ascending.
func (o *ownership) owned() []int {
	ps := make([]int, 0, len(o.running))
	for p := range o.running {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// start runs partition p's loop until it is stopped, restarting it after a failure.
func (o *ownership) start(p int) {
	ctx, cancel := context.WithCancel(o.ctx)
	r := &partitionRun{cancel: cancel, done: make(chan struct{})}
	o.running[p] = r
	o.m.owned.Set(float64(len(o.running)))
	go func() {
		defer close(r.done)
		backoff := 100 * time.Millisecond
		for {
			err := o.l.consume(ctx, p)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				o.log.Error("partition loop failed; restarting", slog.Int("partition", p), slog.String("error", err.Error()))
			}
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}()
}

// stop stops the loops of partitions and waits for them.
func (o *ownership) stop(partitions ...int) {
	for _, p := range partitions {
		if r := o.running[p]; r != nil {
			r.cancel()
		}
	}
	for _, p := range partitions {
		if r := o.running[p]; r != nil {
			<-r.done
			delete(o.running, p)
		}
	}
	o.m.owned.Set(float64(len(o.running)))
}
