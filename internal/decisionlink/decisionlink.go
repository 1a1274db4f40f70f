// Package decisionlink lets a materializer ask an orchestrator that runs in the same OS
// process (the mesh of `noetl dev`, or any program that embeds both) for the decisions
// its commits take inside them, by a call instead of a DecisionService round trip over
// loopback gRPC. Across processes the materializer asks over gRPC as before; the link
// only removes the hop when both sides share an address space.
//
// Why it matters: a decision asked over the network costs a chain step two socket hops,
// an encode and a decode each way, and the wake-ups of the goroutines between them;
// asked by a call, the answer is ready before Postgres could have answered a first round
// trip, so the writer commits the step in one round trip (writer/fast.go).
//
// Invariants:
//   - A message changes hands, it is not copied: Ask gives the request to the decider and
//     the answer to the caller as they are, and neither side changes what it gave away.
//     The materializer builds each request from copies of its own (its committing events,
//     with the seqs and commit time the commit gives them) and only reads it once asked;
//     the orchestrator keeps the request's events it folded, which nobody changes, and of
//     its answer's events keeps copies (domain.FoldCopy), not the events, on which the
//     materializer sets seqs and commit times as it commits them. Copying both ways, as the
//     link once did, cost a 1,000-wide fan-out about 7% of its allocations (bench's
//     mesh_alloc_mb, 19.0 to 17.7 MB) for a guard neither side needs.
//   - A link answers only while an orchestrator serves on it. Before one does and after
//     it stops, Ask's wait returns ErrNotServed and the caller asks over the network, as a
//     materializer in a process of its own always does.
//   - The link is not a network surface: DecisionService admits only the materializer's
//     signed principal, and the link is reachable only from code in the same process,
//     which is trusted as the materializer is.
package decisionlink

import (
	"context"
	"errors"
	"sync/atomic"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
)

// ErrNotServed is what Ask's wait returns while no orchestrator serves on the link.
var ErrNotServed = errors.New("decisionlink: no orchestrator serves in this process")

// Decider decides the executions of a commit (the orchestrator's engine): it takes req
// at once, in the caller's goroutine, and wait returns the decisions.
type Decider interface {
	AskCommitting(ctx context.Context, req *orchv1.DecideCommittingRequest) (wait func() *orchv1.DecideCommittingResponse)
}

// Link connects the two sides. The zero value is ready to use; a nil *Link serves
// nothing.
type Link struct {
	cur atomic.Pointer[served]
}

// served is one Serve's decider; stop clears the link only of its own.
type served struct{ d Decider }

// Serve makes d the link's decider until stop is called (an orchestrator serves from its
// start to its stop). A later Serve replaces an earlier one.
func (l *Link) Serve(d Decider) (stop func()) {
	s := &served{d: d}
	l.cur.Store(s)
	return func() { l.cur.CompareAndSwap(s, nil) }
}

// Served reports whether an orchestrator serves on the link now.
func (l *Link) Served() bool {
	return l != nil && l.cur.Load() != nil
}

// Ask asks the link's decider what the executions of req decide and returns what waits
// for its answer; nothing runs on a goroutine of its own. The wait must be called. req is
// the decider's once asked: the caller may read it but not change it, and the answer is
// the caller's alone.
func (l *Link) Ask(ctx context.Context, req *orchv1.DecideCommittingRequest) (wait func() (*orchv1.DecideCommittingResponse, error)) {
	failed := func(err error) func() (*orchv1.DecideCommittingResponse, error) {
		return func() (*orchv1.DecideCommittingResponse, error) { return nil, err }
	}
	if l == nil {
		return failed(ErrNotServed)
	}
	s := l.cur.Load()
	if s == nil {
		return failed(ErrNotServed)
	}
	if err := ctx.Err(); err != nil {
		return failed(err)
	}
	answer := s.d.AskCommitting(ctx, req)
	return func() (*orchv1.DecideCommittingResponse, error) {
		return answer(), nil
	}
}
