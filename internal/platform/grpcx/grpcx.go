// Package grpcx holds the gRPC plumbing shared by NoETL services: error mapping, metrics
// interceptors and client dialing.
package grpcx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Sentinel pairs a service's sentinel error with the gRPC code that answers it. An error
// that wraps the sentinel (errors.Is) is answered with that code and its own message, which
// is the handler's words for the caller (it names the field, step or resource).
type Sentinel struct {
	Err  error
	Code codes.Code
}

// Errors is the one interceptor that maps the errors of a service's handlers to gRPC status
// errors, for unary and streaming calls alike: a status passes as it is, an error wrapping
// one of Sentinels gets its code, anything else is ToStatus's.
type Errors struct {
	Log *slog.Logger
	// Sentinels are the service's sentinel errors, looked up in order.
	Sentinels []Sentinel
}

// Status maps err, returned by method, to a gRPC status error; nil stays nil.
func (e *Errors) Status(method string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, s := range e.Sentinels {
		if errors.Is(err, s.Err) {
			return status.Error(s.Code, err.Error())
		}
	}
	return ToStatus(e.Log, method, err)
}

// Unary is the unary interceptor.
func (e *Errors) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	return resp, e.Status(info.FullMethod, err)
}

// Stream is the stream interceptor.
func (e *Errors) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return e.Status(info.FullMethod, handler(srv, ss))
}

// UnavailableRetry is the delay an Unavailable answer asks the client to wait before it
// retries (a RetryInfo detail; HTTP Retry-After at the gateway).
const UnavailableRetry = time.Second

// ToStatus converts err into a gRPC status error: a status passes as it is; context errors
// keep their meaning; a lost connection to a dependency (Postgres down or restarting, a
// refused or reset connection) becomes Unavailable with retry advice, so clients retry it;
// anything else becomes Internal. Neither kind shows the cause, which is logged instead:
// it names hosts and ports.
func ToStatus(log *slog.Logger, method string, err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	case Unavailable(err):
		if log != nil {
			log.Warn("dependency unavailable", slog.String("method", method), slog.String("error", err.Error()))
		}
		st, derr := status.New(codes.Unavailable, "a dependency of the service is unavailable (database or bus); retry shortly").
			WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(UnavailableRetry)})
		if derr != nil {
			return status.Error(codes.Unavailable, "a dependency of the service is unavailable; retry shortly")
		}
		return st.Err()
	}
	if log != nil {
		log.Error("internal error", slog.String("method", method), slog.String("error", err.Error()))
	}
	return status.Error(codes.Internal, "internal error")
}

// Unavailable reports whether err means a dependency could not be reached or dropped the
// connection: a network error (refused, reset, unreachable, timed out), an unexpected EOF,
// or a database error of SQLSTATE class 08 (connection exception) or 57P01-57P03 (the
// server shutting down, crashed, or not yet accepting connections). The database errors
// are recognised by their SQLState method, so this package needs no database driver.
func Unavailable(err error) bool {
	var ne net.Error
	var op *net.OpError
	var sqlState interface{ SQLState() string }
	switch {
	case errors.As(err, &sqlState):
		code := sqlState.SQLState()
		return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03"
	case errors.As(err, &op), errors.As(err, &ne) && ne.Timeout():
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return true
	}
	return false
}

// ServerMetrics counts and times RPCs by method and code, gauges the calls in flight and
// counts the calls shed (refused with ResourceExhausted).
type ServerMetrics struct {
	handled  *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	inFlight *prometheus.GaugeVec
	shed     *prometheus.CounterVec
}

// NewServerMetrics registers the RPC metrics on reg.
func NewServerMetrics(reg prometheus.Registerer) *ServerMetrics {
	m := &ServerMetrics{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_handled_total", Help: "RPCs completed, by method and code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "grpc_server_handling_seconds", Help: "RPC latency, by method and code.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"method", "code"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpc_server_in_flight", Help: "RPCs being handled (streams until they end), by method.",
		}, []string{"method"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_shed_total", Help: "RPCs refused with ResourceExhausted (load shed), by method.",
		}, []string{"method"}),
	}
	reg.MustRegister(m.handled, m.latency, m.inFlight, m.shed)
	return m
}

// Unary is the unary interceptor recording metrics.
func (m *ServerMetrics) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	done := m.begin(info.FullMethod)
	resp, err := handler(ctx, req)
	done(err)
	return resp, err
}

// Stream is the stream interceptor recording metrics.
func (m *ServerMetrics) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	done := m.begin(info.FullMethod)
	err := handler(srv, ss)
	done(err)
	return err
}

// begin counts a call in flight; the returned function records its end.
func (m *ServerMetrics) begin(method string) func(error) {
	start := time.Now()
	g := m.inFlight.WithLabelValues(method)
	g.Inc()
	return func(err error) {
		g.Dec()
		code := status.Code(err)
		m.latency.WithLabelValues(method, code.String()).Observe(time.Since(start).Seconds())
		m.handled.WithLabelValues(method, code.String()).Inc()
		if code == codes.ResourceExhausted {
			m.shed.WithLabelValues(method).Inc()
		}
	}
}

// Dial opens a client connection to an internal service (plaintext on the cluster network).
// opts are added to the defaults; internal callers pass the per-RPC credentials that sign
// their principal, for example grpc.WithPerRPCCredentials(trust.Service("worker")) (see
// package auth), and their tracing, telemetry.Telemetry.DialOption, which carries the
// caller's trace to the callee.
func Dial(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16 << 20)),
	}, opts...)...)
}

// DialSigned is Dial with every call signed by creds (auth.Trust.Service or Forward, or
// auth.Bearer for clients of the gateway).
func DialSigned(addr string, creds credentials.PerRPCCredentials, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return Dial(addr, append([]grpc.DialOption{grpc.WithPerRPCCredentials(creds)}, opts...)...)
}

// HealthCheck is a readiness check that calls the gRPC health service of a dependency.
func HealthCheck(conn *grpc.ClientConn) func(context.Context) error {
	client := healthpb.NewHealthClient(conn)
	return func(ctx context.Context) error {
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("status %s", resp.GetStatus())
		}
		return nil
	}
}
