package main

import (
	"context"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// reasonTooManyInFlight and reasonTooManyWaits are the ErrorInfo reasons of the gateway's
// refusal of a call past its tenant's calls in flight, and of a waiting call (a wait, a
// start that waits) past its tenant's waiting calls (the gateway's
// apierr.ReasonTooManyInFlight and ReasonTooManyWaits).
const (
	reasonTooManyInFlight = "TOO_MANY_IN_FLIGHT"
	reasonTooManyWaits    = "TOO_MANY_WAITS"
)

// inFlightRefusal reports whether err is the gateway refusing a call because its tenant
// holds as many calls as it may of the call's kind: calls in flight, or waiting calls.
func inFlightRefusal(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && (ei.GetReason() == reasonTooManyInFlight || ei.GetReason() == reasonTooManyWaits) {
			return true
		}
	}
	return false
}

// window is the bench's own bound on the executions it runs at once, which it adapts to the
// gateway's cap on a tenant's calls in flight (for starts that wait, on its waiting calls)
// the way TCP adapts its congestion window:
// an execution holds a slot from its start until its end; a start refused for calls in
// flight lowers the bound below what was running (multiplicative decrease), gives its slot
// back and waits for one to free, and every execution that ends raises the bound by one
// over its size (additive increase). A client that knows its own calls fill the cap retries
// when one of them ends, rather than after the refusal's fixed second, and stops sending
// starts that would be refused.
type window struct {
	mu    sync.Mutex
	freed chan struct{} // closed and replaced when a slot frees or the bound rises
	limit float64       // the bound: int(limit) slots, at least one
	inUse int
	slots int    // the most the bound may grow to
	ends  uint64 // executions that ran to their end so far (release(true))
}

// newWindow returns a window of slots slots, all open.
func newWindow(slots int) *window {
	return &window{freed: make(chan struct{}), limit: float64(slots), slots: slots}
}

// acquire takes a slot, waiting while the window is full, until ctx ends.
func (w *window) acquire(ctx context.Context) error {
	for {
		w.mu.Lock()
		if w.inUse < max(1, int(w.limit)) {
			w.inUse++
			w.mu.Unlock()
			return nil
		}
		freed := w.freed
		w.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release gives a slot back; ended says its execution ran to its end, which raises the
// bound.
func (w *window) release(ended bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inUse--
	if ended {
		w.ends++
		w.limit = min(float64(w.slots), w.limit+1/max(1, w.limit))
	}
	close(w.freed)
	w.freed = make(chan struct{})
}

// ended is how many of the window's executions have run to their end so far: a start
// reads it before it is sent, and refused compares.
func (w *window) ended() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ends
}

// refused lowers the bound after a start refused for calls in flight while the caller held
// a slot, and reports whether the window's own executions hold, or held, the calls the
// gateway counted, so that the start is worth retrying as soon as the window lets it.
// endedBefore is ended() as read before the start was sent.
//
// With others running, they filled the cap: the bound goes to nine tenths of them. A crowd
// refused at once lowers it about once, each to about the same figure. With none running
// but some ended since the start was sent, those were the calls the gateway counted: they
// are free now, and the bound stays. With none running and none ended meanwhile, the cap
// is held by other clients of the tenant: the bound stays and the refusal's delay applies.
// (A refusal answered as the window's last executions end is the middle case; judging it
// by the executions running when the answer is read took it for the last, and a delay
// of an hour gave the start up.)
func (w *window) refused(endedBefore uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	others := w.inUse - 1
	if others <= 0 {
		return w.ends != endedBefore
	}
	w.limit = min(w.limit, max(1, 0.9*float64(others)))
	return true
}
