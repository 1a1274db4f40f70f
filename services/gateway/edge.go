package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/services/gateway/internal/apierr"
	"github.com/noetl/noetl/services/gateway/internal/limit"
)

// edge shapes every error the public gRPC server returns (apierr.Edge): details on each,
// internal errors masked behind a logged correlation id. It is the first interceptor of the
// gateway's own chain, so it sees the errors of authentication, limits and handlers alike.
type edge struct {
	log *slog.Logger
}

func (e *edge) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil {
		m, _ := req.(proto.Message)
		return nil, apierr.Edge(e.log, info.FullMethod, m, err)
	}
	return resp, nil
}

func (e *edge) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
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

// limits applies the per-tenant limits to every call that carries a principal; it follows
// the guard, which authenticates. Health and reflection carry none and are not limited.
type limits struct {
	l       *limit.Limiter
	refused *prometheus.CounterVec
}

// newLimits returns the interceptors of l; register their metric (refused) with the
// service's registry.
func newLimits(l *limit.Limiter) *limits {
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "noetl_gateway_limited_total", Help: "Calls refused by the per-tenant limits, by reason (rate, in_flight, tenants).",
	}, []string{"reason"})
	return &limits{l: l, refused: refused}
}

// acquire admits the call of ctx's principal, or returns the ResourceExhausted error that
// refuses it.
func (g *limits) acquire(ctx context.Context) (func(), error) {
	p := auth.FromContext(ctx)
	if p == nil {
		return func() {}, nil
	}
	release, err := g.l.Acquire(p.Tenant)
	var ex *limit.Exceeded
	if errors.As(err, &ex) {
		g.refused.WithLabelValues(ex.Reason).Inc()
		reason := apierr.ReasonRateLimited
		switch ex.Reason {
		case limit.InFlight:
			reason = apierr.ReasonTooManyInFlight
		case limit.Tenants:
			reason = apierr.ReasonTooManyTenants
		}
		return nil, apierr.New(codes.ResourceExhausted, reason, ex.Error(), map[string]string{"tenant": ex.Tenant, "limit": ex.Limit}, apierr.RetryInfo(ex.RetryAfter))
	}
	return release, err
}

func (g *limits) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	release, err := g.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return handler(ctx, req)
}

func (g *limits) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	release, err := g.acquire(ss.Context())
	if err != nil {
		return err
	}
	defer release()
	return handler(srv, ss)
}

// restError is the REST error handler: the error shaped as at the gRPC edge (errors of
// grpc-gateway itself, such as a malformed body, never passed it), a Retry-After header when
// the status asks for a retry (HTTP 429), then grpc-gateway's JSON body, which carries the
// status's details.
func restError(log *slog.Logger) runtime.ErrorHandlerFunc {
	return func(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
		err = apierr.Edge(log, r.Method+" "+r.URL.Path, nil, credentialBodyError(r, err))
		if d, ok := apierr.RetryAfter(status.Convert(err)); ok {
			w.Header().Set("Retry-After", apierr.RetryAfterSeconds(d))
		}
		runtime.DefaultHTTPErrorHandler(ctx, mux, m, challenge{w}, r, err)
	}
}
