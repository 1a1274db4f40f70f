package notice

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/noetl/noetl/internal/platform/natsx"
)

// Watch follows one execution's commit notices on core NATS, for a waiter: how far its log
// has grown and whether it ended, folded as notices arrive. It never drops what matters:
// the seq it reports only grows, and once a terminal notice arrived it stays terminal.
//
// A waiter used to read the notices through nats.Conn.SubscribeSync, which allocates a
// channel of the connection's SubChanLen (65,536 messages, half a megabyte) per
// subscription: every start and every wait paid that allocation and the garbage collector
// its clearing. A Watch holds three fields and a one-slot signal.
type Watch struct {
	sub *nats.Subscription

	mu       sync.Mutex
	seq      int64
	terminal bool
	// endSeq and endID are the head the first terminal notice gave (endID "" when it did
	// not name its last event).
	endSeq  int64
	endID   string
	arrived uint64 // notices received
	seen    uint64 // arrived as of the last Next
	signal  chan struct{}
}

// Subscribe starts a Watch on every notice of the execution (natsx.NoticeWildcard), for a
// waiter that needs each commit, as a variables write waits for its own. It returns once
// the server has the subscription, so a notice of anything published after it cannot be
// missed.
func Subscribe(nc *nats.Conn, executionID string) (*Watch, error) {
	return subscribe(nc, natsx.NoticeWildcard(executionID))
}

// SubscribeEnd starts a Watch on the execution's notices on NOETL_COMMITTED only
// (natsx.CommittedWildcard): its start, the commits that ask for a decision and its end,
// which is all a wait for the start or the end reads. The notice of a step decided inside
// its commit, one per step, does not wake it: a chain of 200 steps woke each of its
// waiters 200 times, on the critical path of the next step, for nothing. Its seq grows at
// those notices only.
func SubscribeEnd(nc *nats.Conn, executionID string) (*Watch, error) {
	return subscribe(nc, natsx.CommittedWildcard(executionID))
}

func subscribe(nc *nats.Conn, subject string) (*Watch, error) {
	w := &Watch{signal: make(chan struct{}, 1)}
	sub, err := nc.Subscribe(subject, w.receive)
	if err != nil {
		return nil, err
	}
	w.sub = sub
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	return w, nil
}

// receive folds one notice. A notice that does not parse still counts as arrived (it says
// the log grew) without moving seq.
func (w *Watch) receive(m *nats.Msg) {
	seq, terminal, lastID, err := Head(m.Data)
	w.mu.Lock()
	if err == nil {
		w.seq = max(w.seq, seq)
		if terminal && !w.terminal {
			w.endSeq, w.endID = seq, lastID // where the log ended
		}
		w.terminal = w.terminal || terminal
	}
	w.arrived++
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default: // a signal is pending already
	}
}

// Next waits until a notice arrived since the previous Next (or since Subscribe), then
// returns the highest seq and whether the execution ended, over every notice so far. It
// returns ctx's error when ctx ends first.
func (w *Watch) Next(ctx context.Context) (seq int64, terminal bool, err error) {
	for {
		w.mu.Lock()
		if w.arrived > w.seen {
			w.seen = w.arrived
			seq, terminal = w.seq, w.terminal
			w.mu.Unlock()
			return seq, terminal, nil
		}
		w.mu.Unlock()
		select {
		case <-w.signal:
		case <-ctx.Done():
			return 0, false, ctx.Err()
		}
	}
}

// Known returns the highest seq and whether the execution ended, over every notice that
// arrived so far, without waiting.
func (w *Watch) Known() (seq int64, terminal bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seq, w.terminal
}

// End returns the head of the execution's log as its terminal notice gave it: the seq and
// id of its terminal event. ok is false before a terminal notice arrived, or when it did
// not name its last event.
func (w *Watch) End() (seq int64, id string, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.endSeq, w.endID, w.endID != ""
}

// Close ends the subscription.
func (w *Watch) Close() { _ = w.sub.Unsubscribe() }
