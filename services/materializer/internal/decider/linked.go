package decider

import (
	"context"
	"errors"

	"google.golang.org/grpc"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/decisionlink"
)

// Linked asks the orchestrator that serves on Link when one runs in this process
// (decisionlink), and Remote, over the network, otherwise: before it serves, after it
// stops, or always in a materializer with a process of its own.
type Linked struct {
	Link   *decisionlink.Link
	Remote *Stream
}

// DecideCommitting asks what the executions of req decide (the writer's Decider).
// opts apply only when the call goes over the network.
func (l *Linked) DecideCommitting(ctx context.Context, req *orchv1.DecideCommittingRequest, opts ...grpc.CallOption) (*orchv1.DecideCommittingResponse, error) {
	if !l.Link.Served() {
		return l.Remote.DecideCommitting(ctx, req, opts...)
	}
	return l.Ask(ctx, req)()
}

// Ask asks and returns what waits for the answer (see Stream.Ask). Over the link the executions are handed to the orchestrator's shards in the
// caller's goroutine, and the wait collects their decisions: no goroutine in between.
func (l *Linked) Ask(ctx context.Context, req *orchv1.DecideCommittingRequest) (wait func() (*orchv1.DecideCommittingResponse, error)) {
	if !l.Link.Served() {
		return l.Remote.Ask(ctx, req)
	}
	local := l.Link.Ask(ctx, req)
	return func() (*orchv1.DecideCommittingResponse, error) {
		resp, err := local()
		if errors.Is(err, decisionlink.ErrNotServed) { // the orchestrator stopped meanwhile
			return l.Remote.DecideCommitting(ctx, req)
		}
		return resp, err
	}
}
