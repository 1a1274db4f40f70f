package api

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/services/gateway/internal/apierr"
)

// WatchExecution implements ExecutionService: the orchestrator's watch of the execution,
// one event per response. The response header is sent once the orchestrator found the
// execution for the caller's tenant, so a client may wait for it to know the watch is
// established.
func (s *Server) WatchExecution(req *apiv1.WatchExecutionRequest, stream grpc.ServerStreamingServer[apiv1.WatchExecutionResponse]) error {
	return s.watchEvents(stream, req.GetExecutionId(), req.GetAfterSeq(), func(ev *eventv1.Event) error {
		return stream.Send(&apiv1.WatchExecutionResponse{Event: eventOf(ev)})
	})
}

// watchEvents runs the orchestrator's watch of an execution after seq after for stream,
// calling send with each committed event, and maps the watch's end to the API's errors.
func (s *Server) watchEvents(stream grpc.ServerStream, id string, after int64, send func(*eventv1.Event) error) error {
	if err := validExecutionID("execution_id", id); err != nil {
		return err
	}
	if after < 0 {
		return status.Error(codes.InvalidArgument, "after_seq: must not be negative")
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	if s.Stopping != nil {
		// The gateway is shutting down: end the watch rather than hold up the drain.
		go func() {
			select {
			case <-s.Stopping:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	in, err := s.Watch.WatchExecution(ctx, &orchv1.WatchExecutionRequest{Tenant: tenant(ctx), ExecutionId: id, AfterSeq: after})
	if err != nil {
		return err
	}
	md, err := in.Header()
	if err == nil && md != nil {
		err = stream.SendHeader(metadata.MD{})
	}
	for err == nil {
		var m *orchv1.WatchExecutionResponse
		if m, err = in.Recv(); err != nil {
			break
		}
		for _, ev := range m.GetEvents() {
			if err = send(ev); err != nil {
				break
			}
			after = ev.GetSeq()
		}
	}
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case stream.Context().Err() != nil:
		return status.FromContextError(stream.Context().Err()).Err()
	case ctx.Err() != nil:
		return status.Errorf(codes.Unavailable, "gateway is shutting down; resume the watch after seq %d", after)
	}
	if st := status.Convert(err); st.Code() == codes.ResourceExhausted && len(st.Details()) == 0 {
		// The orchestrator's cap on open watches: a watch may be retried shortly.
		return apierr.New(codes.ResourceExhausted, apierr.ReasonTooManyWatches, st.Message(), nil, apierr.RetryInfo(watchRetry))
	}
	return err
}

// watchRetry is the delay suggested to a watch refused because too many are open.
const watchRetry = time.Second
