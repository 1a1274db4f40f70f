// Package sse serves the gateway's watches as Server-Sent Events: an execution's events
// (WatchRoute) and its step logs (LogsWatchRoute, and LogsRoute with follow=true), where
// grpc-gateway would stream newline-delimited JSON. Each watch calls the gateway's own gRPC
// server through the loopback connection, so it is authenticated, authorized and limited
// like every call. Invariant: an event's id is a seq a reconnecting EventSource resumes
// after (Last-Event-ID) without getting anything twice or by halves.
package sse

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/services/gateway/internal/apierr"
)

// WatchRoute is the REST route of WatchExecution, served as Server-Sent Events.
const WatchRoute = "GET /v1/executions/{execution_id}/events:watch"

// sseKeepAlive is how often an idle event stream carries a comment, so that proxies do not
// close it.
const sseKeepAlive = 15 * time.Second

// Events serves WatchRoute: WatchExecution over exe (the loopback connection), errors
// written by errors with mux and m, open streams ended when stopping closes.
func Events(exe apiv1.ExecutionServiceClient, mux *runtime.ServeMux, m runtime.Marshaler, errors runtime.ErrorHandlerFunc, stopping <-chan struct{}) http.Handler {
	return &watchSSE{open: watchEvents(exe), mux: mux, marshaler: m, errors: errors, stopping: stopping}
}

// Logs serves LogsWatchRoute: WatchExecutionLogs over exe (the loopback connection), errors
// written by errors with mux and m, open streams ended when stopping closes.
func Logs(exe apiv1.ExecutionServiceClient, mux *runtime.ServeMux, m runtime.Marshaler, errors runtime.ErrorHandlerFunc, stopping <-chan struct{}) http.Handler {
	return &watchSSE{open: watchLogs(exe), mux: mux, marshaler: m, errors: errors, stopping: stopping}
}

// watchSSE serves WatchExecution as Server-Sent Events (grpc-gateway would stream
// newline-delimited JSON). It calls the gateway's own gRPC server through the loopback
// connection, with the request's credentials, so the watch is authenticated, authorized and
// limited like every other call. Each committed event is one SSE event: `id` its seq (a
// reconnecting EventSource sends it back as Last-Event-ID and resumes after it), `event` its
// type, `data` the Event as JSON. The stream ends after the terminal event; a watch with
// nothing left to send (the execution ended at or before the seq asked for) is answered
// 204 No Content, which tells an EventSource to stop reconnecting. Errors before the
// stream starts are REST errors (status code and JSON body); later ones are an `error`
// event carrying the status as JSON.
type watchSSE struct {
	// open starts the watch of the request after a seq.
	open      func(ctx context.Context, r *http.Request, after int64) (sseSource, error)
	mux       *runtime.ServeMux
	marshaler runtime.Marshaler
	errors    runtime.ErrorHandlerFunc
	// stopping, when closed, ends the open streams (the gateway is shutting down).
	stopping <-chan struct{}
}

// sseSource is a watch an SSE route serves: its header once it is established, then its
// messages as SSE events until io.EOF.
type sseSource interface {
	Header() (metadata.MD, error)
	Recv() ([]sseEvent, error)
}

// sseEvent is one Server-Sent Event: id (none when empty), event type and data.
type sseEvent struct {
	id   string
	typ  string
	data proto.Message
}

// watchItem is what the receiving goroutine hands the writer: the watch is established,
// a message's events, or the end (io.EOF) or failure of the stream.
type watchItem struct {
	established bool
	events      []sseEvent
	err         error
}

// eventsSource adapts WatchExecution: each committed event is an SSE event whose id is
// its seq and type its type.
type eventsSource struct {
	grpc.ServerStreamingClient[apiv1.WatchExecutionResponse]
}

func (s eventsSource) Recv() ([]sseEvent, error) {
	m, err := s.ServerStreamingClient.Recv()
	if err != nil {
		return nil, err
	}
	ev := m.GetEvent()
	return []sseEvent{{id: strconv.FormatInt(ev.GetSeq(), 10), typ: ev.GetType(), data: ev}}, nil
}

// watchEvents opens WatchExecution for WatchRoute.
func watchEvents(exe apiv1.ExecutionServiceClient) func(context.Context, *http.Request, int64) (sseSource, error) {
	return func(ctx context.Context, r *http.Request, after int64) (sseSource, error) {
		st, err := exe.WatchExecution(ctx, &apiv1.WatchExecutionRequest{ExecutionId: r.PathValue("execution_id"), AfterSeq: after})
		if err != nil {
			return nil, err
		}
		return eventsSource{st}, nil
	}
}

func (h *watchSSE) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	after, err := afterSeq(r)
	if err != nil {
		h.errors(r.Context(), h.mux, h.marshaler, w, r, err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stream, err := h.open(ctx, r, after)
	if err != nil {
		h.errors(ctx, h.mux, h.marshaler, w, r, err)
		return
	}
	// One item waits at most while the previous one is written: the client's pace bounds
	// the buffer, and gRPC flow control holds back the rest.
	items := make(chan watchItem, 1)
	go func() {
		put := func(it watchItem) bool {
			select {
			case items <- it:
				return true
			case <-ctx.Done():
				return false
			}
		}
		if md, _ := stream.Header(); md != nil && !put(watchItem{established: true}) {
			return
		}
		for {
			evs, err := stream.Recv()
			if !put(watchItem{events: evs, err: err}) || err != nil {
				return
			}
		}
	}()
	rc := http.NewResponseController(w)
	started := false
	start := func() {
		if started {
			return
		}
		started = true
		hd := w.Header()
		hd.Set("Content-Type", "text/event-stream")
		hd.Set("Cache-Control", "no-cache")
		hd.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
		w.WriteHeader(http.StatusOK)
	}
	keepAlive := time.NewTicker(sseKeepAlive)
	defer keepAlive.Stop()
	var buf bytes.Buffer
	for {
		buf.Reset()
		select {
		case it := <-items:
			switch {
			case errors.Is(it.err, io.EOF):
				if !started {
					w.WriteHeader(http.StatusNoContent)
				}
				return
			case it.err != nil:
				if !started {
					h.errors(ctx, h.mux, h.marshaler, w, r, it.err)
					return
				}
				b, _ := h.marshaler.Marshal(status.Convert(it.err).Proto())
				buf.WriteString("event: error\ndata: ")
				buf.Write(b)
				buf.WriteString("\n\n")
				_, _ = w.Write(buf.Bytes())
				_ = rc.Flush()
				return
			case it.established:
				start()
			default:
				start()
				for _, ev := range it.events {
					b, err := h.marshaler.Marshal(ev.data)
					if err != nil {
						return
					}
					if ev.id != "" {
						buf.WriteString("id: " + ev.id + "\n")
					}
					buf.WriteString("event: " + ev.typ + "\ndata: ")
					buf.Write(b)
					buf.WriteString("\n\n")
				}
			}
		case <-keepAlive.C:
			start()
			buf.WriteString(": keep-alive\n\n")
		case <-h.stopping:
			return
		case <-ctx.Done():
			return
		}
		if buf.Len() > 0 {
			if _, err := w.Write(buf.Bytes()); err != nil {
				return
			}
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// afterSeq is the seq the watch starts after: the Last-Event-ID of a reconnecting
// EventSource, else the after_seq (or afterSeq) query parameter, else zero.
func afterSeq(r *http.Request) (int64, error) {
	name, raw := "Last-Event-ID", r.Header.Get("Last-Event-ID")
	for _, q := range []string{"after_seq", "afterSeq"} { // the proto and the JSON name
		if raw == "" {
			name, raw = q, r.URL.Query().Get(q)
		}
	}
	if raw == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < 0 {
		return 0, apierr.FieldViolation(apierr.CodeName(codes.InvalidArgument), name, "must be a non-negative integer (a seq)", name+": must be a non-negative integer (a seq)")
	}
	return n, nil
}
