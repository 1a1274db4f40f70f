// Package edge is what the gateway does to every call at its boundary besides admission
// (the guard): the errors it returns shaped (apierr.Edge) over gRPC and REST alike, the
// per-tenant limits applied (package limit), the strings of requests checked, REST bodies
// decoded naming where they stop being JSON, and bodies and messages over the size limit
// refused with HTTP 413. Invariant: every error the public gRPC server returns, and every
// one the REST error handler writes, passes apierr.Edge, so none carries internals.
package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/services/gateway/internal/api"
	"github.com/noetl/noetl/services/gateway/internal/apierr"
	"github.com/noetl/noetl/services/gateway/internal/limit"
)

// Errors shapes every error the public gRPC server returns (apierr.Edge): details on each,
// internal errors masked behind a logged correlation id. It is the first interceptor of the
// gateway's own chain, so it sees the errors of authentication, limits and handlers alike.
type Errors struct {
	log *slog.Logger
}

// NewErrors returns the interceptors that shape errors, logging internal ones to log.
func NewErrors(log *slog.Logger) *Errors { return &Errors{log: log} }

// Unary is the unary interceptor.
func (e *Errors) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil {
		m, _ := req.(proto.Message)
		return nil, apierr.Edge(e.log, info.FullMethod, m, err)
	}
	return resp, nil
}

// Stream is the stream interceptor.
func (e *Errors) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	rs := &requestStream{ServerStream: ss}
	return apierr.Edge(e.log, info.FullMethod, rs.req, handler(srv, rs))
}

// requestStream remembers the first message received (the request of a server stream), so
// that an error can name its fields.
type requestStream struct {
	grpc.ServerStream
	req proto.Message
}

func (s *requestStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil && s.req == nil {
		s.req, _ = m.(proto.Message)
	}
	return err
}

// Limits applies the per-tenant limits to every call that carries a principal; it follows
// the guard, which authenticates. Health and reflection carry none and are not limited.
type Limits struct {
	l       *limit.Limiter
	refused *prometheus.CounterVec
}

// NewLimits returns the interceptors of l; register their metric (Collector) with the
// service's registry.
func NewLimits(l *limit.Limiter) *Limits {
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "noetl_gateway_limited_total", Help: "Calls refused by the per-tenant limits, by reason (rate, in_flight, waits, tenants).",
	}, []string{"reason"})
	return &Limits{l: l, refused: refused}
}

// Collector is the limits' metric, noetl_gateway_limited_total.
func (g *Limits) Collector() prometheus.Collector { return g.refused }

// waits reports whether a call of method with request req (nil for a stream, whose
// request is not read yet) waits on an execution rather than works: a wait for its end, a
// start that waits for it, a watch of its events or logs. Such a call takes a slot of the
// tenant's waits instead of one of its calls in flight (package limit).
func waits(method string, req any) bool {
	switch method {
	case apiv1.ExecutionService_WaitExecution_FullMethodName, apiv1.ExecutionService_WatchExecution_FullMethodName,
		apiv1.ExecutionService_WatchExecutionLogs_FullMethodName:
		return true
	case apiv1.ExecutionService_StartExecution_FullMethodName:
		r, _ := req.(*apiv1.StartExecutionRequest)
		return r.GetWait().AsDuration() > 0
	}
	return false
}

// Acquire admits the call of ctx's principal (a waiting call when wait, see waits), or
// returns the ResourceExhausted error that refuses it.
func (g *Limits) Acquire(ctx context.Context, wait bool) (func(), error) {
	p := auth.FromContext(ctx)
	if p == nil {
		return func() {}, nil
	}
	release, err := g.l.Acquire(p.Tenant, wait)
	var ex *limit.Exceeded
	if errors.As(err, &ex) {
		g.refused.WithLabelValues(ex.Reason).Inc()
		reason := apierr.ReasonRateLimited
		switch ex.Reason {
		case limit.InFlight:
			reason = apierr.ReasonTooManyInFlight
		case limit.Waits:
			reason = apierr.ReasonTooManyWaits
		case limit.Tenants:
			reason = apierr.ReasonTooManyTenants
		}
		return nil, apierr.New(codes.ResourceExhausted, reason, ex.Error(), map[string]string{"tenant": ex.Tenant, "limit": ex.Limit}, apierr.RetryInfo(ex.RetryAfter))
	}
	return release, err
}

// Unary is the unary interceptor.
func (g *Limits) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	release, err := g.Acquire(ctx, waits(info.FullMethod, req))
	if err != nil {
		return nil, err
	}
	defer release()
	return handler(ctx, req)
}

// Stream is the stream interceptor.
func (g *Limits) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	release, err := g.Acquire(ss.Context(), waits(info.FullMethod, nil))
	if err != nil {
		return err
	}
	defer release()
	return handler(srv, ss)
}

// CheckStrings refuses a unary request with a NUL byte in a string field (api.CheckStrings).
func CheckStrings(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	m, _ := req.(proto.Message)
	if err := api.CheckStrings(m); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// CheckStreamStrings refuses a streamed request message with a NUL byte in a string field.
func CheckStreamStrings(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &checkedStream{ServerStream: ss})
}

// checkedStream checks every message it receives (api.CheckStrings).
type checkedStream struct{ grpc.ServerStream }

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	pm, _ := m.(proto.Message)
	return api.CheckStrings(pm)
}

// RESTError is the REST error handler: the error shaped as at the gRPC edge (errors of
// grpc-gateway itself, such as a malformed body, never passed it), a Retry-After header when
// the status asks for a retry (HTTP 429), HTTP 413 for a request refused for its size,
// then grpc-gateway's JSON body, which carries the status's details.
func RESTError(log *slog.Logger, maxBody int) runtime.ErrorHandlerFunc {
	return func(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
		err = apierr.Edge(log, r.Method+" "+r.URL.Path, nil, credentialBodyError(r, sizeError(err, maxBody)))
		st := status.Convert(err)
		if d, ok := apierr.RetryAfter(st); ok {
			w.Header().Set("Retry-After", apierr.RetryAfterSeconds(d))
		}
		var rw http.ResponseWriter = challenge{w}
		if st.Code() == codes.ResourceExhausted && apierr.TooLarge(apierr.Reason(st)) {
			rw = statusAs{ResponseWriter: rw, from: http.StatusTooManyRequests, to: http.StatusRequestEntityTooLarge}
		}
		runtime.DefaultHTTPErrorHandler(ctx, mux, m, rw, r, err)
	}
}

// JSON is the REST layer's JSON marshaler: grpc-gateway's protojson one, except that a
// body that is not JSON is refused naming the byte where it stops being JSON. grpc-gateway
// reads a body with encoding/json before protojson, and encoding/json's syntax errors (a
// NaN, a truncated document, nesting past 10,000 levels) say what but not where; protojson's
// own (a duplicate key, invalid UTF-8, an unknown field) name the line and column already.
type JSON struct{ runtime.JSONPb }

// NewDecoder implements runtime.Marshaler.
func (j *JSON) NewDecoder(r io.Reader) runtime.Decoder {
	return bodyDecoder{j.JSONPb.NewDecoder(r)}
}

// bodyDecoder names the offset of a JSON syntax error.
type bodyDecoder struct{ runtime.Decoder }

// Decode implements runtime.Decoder.
func (d bodyDecoder) Decode(v any) error {
	err := d.Decoder.Decode(v)
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("body: not JSON at byte %d: %w", se.Offset, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("body: not JSON: it ends inside the document (%w)", err)
	}
	return err
}

// sizeError gives the size refusals of the layers under the REST handlers their public
// form: a body cut at the limit while grpc-gateway read it (an InvalidArgument of
// net/http's text), and a request message the gRPC server refused over the loopback for
// its size (a REST body within the limit can still encode larger). Other errors pass.
func sizeError(err error, maxBody int) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	limit := map[string]string{"limit": fmt.Sprint(maxBody)}
	switch {
	case st.Code() == codes.InvalidArgument && strings.Contains(st.Message(), "http: request body too large"):
		return apierr.New(codes.ResourceExhausted, apierr.ReasonBodyTooLarge, fmt.Sprintf("request body exceeds the limit of %d bytes", maxBody), limit)
	case st.Code() == codes.ResourceExhausted && strings.HasPrefix(st.Message(), "grpc: received message larger than max"):
		var n, lim int
		if _, err := fmt.Sscanf(st.Message(), "grpc: received message larger than max (%d vs. %d)", &n, &lim); err != nil {
			n = 0
		}
		return apierr.New(codes.ResourceExhausted, apierr.ReasonMessageTooLarge, fmt.Sprintf("request of %d bytes (as a message) exceeds the limit of %d bytes", n, maxBody), limit)
	}
	return err
}

// statusAs writes the status to instead of from.
type statusAs struct {
	http.ResponseWriter
	from, to int
}

// WriteHeader implements http.ResponseWriter.
func (s statusAs) WriteHeader(code int) {
	if code == s.from {
		code = s.to
	}
	s.ResponseWriter.WriteHeader(code)
}

// TooLarge answers HTTP 413 for a body of n bytes over max, with the JSON error body of
// every REST error (code RESOURCE_EXHAUSTED, an ErrorInfo of reason BODY_TOO_LARGE).
func TooLarge(w http.ResponseWriter, m runtime.Marshaler, n, max int64) {
	err := apierr.New(codes.ResourceExhausted, apierr.ReasonBodyTooLarge, fmt.Sprintf("request body of %d bytes exceeds the limit of %d bytes", n, max), map[string]string{"limit": fmt.Sprint(max)})
	body, _ := m.Marshal(status.Convert(err).Proto())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusRequestEntityTooLarge)
	_, _ = w.Write(body)
}

// credentialBodyError keeps a malformed credential body out of the error message: the JSON
// decoder quotes the offending token, which may be part of the secret. The API's own
// validation errors (which name the field and never quote data) pass through.
func credentialBodyError(r *http.Request, err error) error {
	if !strings.HasPrefix(r.URL.Path, "/v1/credentials") {
		return err
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		return err
	}
	for _, field := range []string{"name:", "type:", "data:", "page_size:"} {
		if strings.HasPrefix(st.Message(), field) {
			return err
		}
	}
	return status.Error(codes.InvalidArgument, "body: not a valid credential JSON object")
}

// challenge answers 401 with a standard `WWW-Authenticate: Bearer` challenge (grpc-gateway
// would put the error message there; the body carries it already).
type challenge struct{ http.ResponseWriter }

// WriteHeader implements http.ResponseWriter.
func (c challenge) WriteHeader(code int) {
	if code == http.StatusUnauthorized {
		c.Header().Set("WWW-Authenticate", `Bearer realm="noetl"`)
	}
	c.ResponseWriter.WriteHeader(code)
}
