// Package watch is the orchestrator's WatchService: it streams an execution's committed
// events to a client as the materializer's commit notices announce them, reading the events
// from the log (the statebuilder) in pages.
//
// Invariants: a watch subscribes to the notices before it reads the log, so no commit
// between the two is missed; notices only say that the log grew (the log is the truth,
// re-read after a NATS reconnect); events go out in seq order, at most watchMessageBytes
// per response, and the stream ends after the terminal event; watches are bounded in
// number and ended with Unavailable on shutdown, resumable from the last seq received.
package watch

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/natsx"
)

// Limits of a watch.
const (
	// DefaultMaxWatches is the default bound on concurrent watches.
	DefaultMaxWatches = 10000
	// watchPageSize is how many events one read of the log asks for.
	watchPageSize = 200
	// watchMessageBytes is the most event bytes one response carries (one larger event
	// travels alone).
	watchMessageBytes = 1 << 20
	// watchPendingNotices bounds the commit notices NATS queues for one watch; they are
	// coalesced as soon as they arrive, so the bound is only a backstop.
	watchPendingNotices = 64
	// watchReconnectCheck is how often an idle watch checks whether the NATS connection
	// reconnected meanwhile: notices published while it was down are lost, so the watch
	// reads the log again (the log, not the notices, is the truth).
	watchReconnectCheck = 30 * time.Second
)

// Watcher implements WatchService: it streams an execution's committed events as the
// materializer's commit notices announce them, reading them in pages from the statebuilder.
type Watcher struct {
	orchv1.UnimplementedWatchServiceServer

	nc    *nats.Conn
	state sbv1.StateServiceClient
	slots chan struct{}
	stop  chan struct{}
	once  sync.Once
}

// NewWatcher returns a Watcher that serves at most max watches at once (DefaultMaxWatches
// when max is not positive); past it a watch is refused with ResourceExhausted.
func NewWatcher(nc *nats.Conn, state sbv1.StateServiceClient, max int) *Watcher {
	if max <= 0 {
		max = DefaultMaxWatches
	}
	return &Watcher{nc: nc, state: state, slots: make(chan struct{}, max), stop: make(chan struct{})}
}

// Stop ends every open watch with Unavailable (the client resumes from the last seq it
// received) and refuses new ones, so that a graceful stop of the gRPC server does not wait
// for watches that may last as long as their executions.
func (w *Watcher) Stop() { w.once.Do(func() { close(w.stop) }) }

// Run blocks until ctx ends, then stops the watches: a worker of the service's lifecycle.
func (w *Watcher) Run(ctx context.Context) error {
	<-ctx.Done()
	w.Stop()
	return nil
}

// WatchExecution streams the events of an execution with seq greater than after_seq and
// ends after the terminal event. It subscribes to the execution's commit notices before it
// reads the log, so an event committed between the two cannot be missed; the notices only
// say that the log grew, so they are coalesced into one pending signal, and the events are
// read from the log in pages.
func (w *Watcher) WatchExecution(req *orchv1.WatchExecutionRequest, stream grpc.ServerStreamingServer[orchv1.WatchExecutionResponse]) error {
	id := req.GetExecutionId()
	if id == "" {
		return status.Error(codes.InvalidArgument, "execution_id: required")
	}
	if req.GetAfterSeq() < 0 {
		return status.Error(codes.InvalidArgument, "after_seq: must not be negative")
	}
	select {
	case <-w.stop:
		return status.Error(codes.Unavailable, "orchestrator is shutting down; retry")
	default:
	}
	select {
	case w.slots <- struct{}{}:
		defer func() { <-w.slots }()
	default:
		return status.Errorf(codes.ResourceExhausted, "too many concurrent watches (limit %d); retry later", cap(w.slots))
	}
	ctx := stream.Context()
	grew := make(chan struct{}, 1)
	sub, err := w.nc.Subscribe(natsx.NoticeWildcard(id), func(*nats.Msg) {
		select {
		case grew <- struct{}{}:
		default: // a read is already due; it will see this commit too
		}
	})
	if err != nil {
		return status.Errorf(codes.Unavailable, "nats: %v", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(watchPendingNotices, watchPendingNotices*1024); err != nil {
		return status.Errorf(codes.Unavailable, "nats: %v", err)
	}
	// Make sure the server has the subscription before anything it must catch can happen.
	if err := w.nc.FlushTimeout(5 * time.Second); err != nil {
		return status.Errorf(codes.Unavailable, "nats: %v", err)
	}
	after, started := req.GetAfterSeq(), false
	reconnects := w.nc.Stats().Reconnects
	check := time.NewTicker(watchReconnectCheck)
	defer check.Stop()
	for {
		done, err := w.sendCommitted(ctx, stream, req.GetTenant(), id, &after, &started)
		if err != nil || done {
			return err
		}
	wait:
		for {
			select {
			case <-grew:
				break wait
			case <-check.C:
				if n := w.nc.Stats().Reconnects; n != reconnects {
					reconnects = n
					break wait
				}
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			case <-w.stop:
				return status.Errorf(codes.Unavailable, "orchestrator is shutting down; resume the watch after seq %d", after)
			}
		}
	}
}

// sendCommitted sends every event committed after *after, advancing it, and reports whether
// the terminal event was sent. The first successful read (which proves the execution exists
// for the tenant) sends the response header.
func (w *Watcher) sendCommitted(ctx context.Context, stream grpc.ServerStreamingServer[orchv1.WatchExecutionResponse], tenant, id string, after *int64, started *bool) (bool, error) {
	for {
		resp, err := w.state.ListEvents(ctx, &sbv1.ListEventsRequest{Tenant: domain.TenantOrDefault(tenant), ExecutionId: id, AfterSeq: *after, PageSize: watchPageSize})
		if err != nil {
			return false, err
		}
		if !*started {
			if len(resp.GetEvents()) == 0 {
				// Nothing after the seq asked for: when the execution has ended, nothing
				// ever will be, and the watch ends at once (without a header: a client
				// learns there was nothing to watch).
				st, err := w.state.GetState(ctx, &sbv1.GetStateRequest{Tenant: domain.TenantOrDefault(tenant), ExecutionId: id})
				if err != nil {
					return false, err
				}
				if domain.IsTerminalStatus(st.GetState().GetStatus()) && st.GetState().GetSeq() <= *after {
					return true, nil
				}
			}
			if err := stream.SendHeader(metadata.MD{}); err != nil {
				return false, err
			}
			*started = true
		}
		var batch []*eventv1.Event
		size := 0
		for _, ev := range resp.GetEvents() {
			n := proto.Size(ev)
			if len(batch) > 0 && size+n > watchMessageBytes {
				if err := stream.Send(&orchv1.WatchExecutionResponse{Events: batch}); err != nil {
					return false, err
				}
				batch, size = nil, 0
			}
			batch, size = append(batch, ev), size+n
			*after = ev.GetSeq()
			if domain.IsTerminal(ev.GetType()) {
				// Nothing follows the terminal event but late duplicates, which are dropped.
				return true, stream.Send(&orchv1.WatchExecutionResponse{Events: batch})
			}
		}
		if len(batch) > 0 {
			if err := stream.Send(&orchv1.WatchExecutionResponse{Events: batch}); err != nil {
				return false, err
			}
		}
		if resp.GetNextAfterSeq() == 0 {
			return false, nil
		}
	}
}
