package sse

import (
	"context"
	"net/http"
	"strconv"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/services/gateway/internal/apierr"
)

const (
	// LogsRoute is the REST route of ListExecutionLogs; with follow=true it serves
	// WatchExecutionLogs as Server-Sent Events.
	LogsRoute = "GET /v1/executions/{execution_id}/logs"
	// LogsWatchRoute is the REST route of WatchExecutionLogs, served as Server-Sent Events.
	LogsWatchRoute = "GET /v1/executions/{execution_id}/logs:watch"
)

// logsSource adapts WatchExecutionLogs: each entry is an SSE event "log"; the last entry
// of a command carries the seq of its event as id, so that a client resuming with
// Last-Event-ID never gets a command's entries twice or by halves. The end is an SSE event
// "end" with the terminal event's seq as id: an EventSource reconnecting after it is
// answered 204 and stops.
type logsSource struct {
	grpc.ServerStreamingClient[apiv1.WatchExecutionLogsResponse]
}

func (s logsSource) Recv() ([]sseEvent, error) {
	m, err := s.ServerStreamingClient.Recv()
	if err != nil {
		return nil, err
	}
	out := make([]sseEvent, len(m.GetEntries()))
	for i, e := range m.GetEntries() {
		out[i] = sseEvent{typ: "log", data: e}
	}
	if m.GetEnd() {
		out = append(out, sseEvent{typ: "end", data: &apiv1.WatchExecutionLogsResponse{Seq: m.GetSeq(), End: true}})
	}
	if n := len(out); n > 0 {
		out[n-1].id = strconv.FormatInt(m.GetSeq(), 10)
	}
	return out, nil
}

// watchLogs opens WatchExecutionLogs for the logs routes, with the request's step filter.
func watchLogs(exe apiv1.ExecutionServiceClient) func(context.Context, *http.Request, int64) (sseSource, error) {
	return func(ctx context.Context, r *http.Request, after int64) (sseSource, error) {
		st, err := exe.WatchExecutionLogs(ctx, &apiv1.WatchExecutionLogsRequest{ExecutionId: r.PathValue("execution_id"), Step: r.URL.Query().Get("step"), AfterSeq: after})
		if err != nil {
			return nil, err
		}
		return logsSource{st}, nil
	}
}

// FollowLogs serves LogsRoute: follow=true (or 1) is the watch (sse), anything else a page
// from grpc-gateway (page), without the follow parameter, which is no field of the
// request.
func FollowLogs(sse http.Handler, page *runtime.ServeMux, marshaler runtime.Marshaler, errors runtime.ErrorHandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if !q.Has("follow") {
			page.ServeHTTP(w, r)
			return
		}
		follow, err := strconv.ParseBool(q.Get("follow"))
		if err != nil {
			errors(r.Context(), page, marshaler, w, r, apierr.FieldViolation(apierr.CodeName(codes.InvalidArgument), "follow", "must be true or false", "follow: must be true or false"))
			return
		}
		if follow {
			sse.ServeHTTP(w, r)
			return
		}
		q.Del("follow")
		r2 := r.Clone(r.Context())
		r2.URL.RawQuery = q.Encode()
		page.ServeHTTP(w, r2)
	})
}
