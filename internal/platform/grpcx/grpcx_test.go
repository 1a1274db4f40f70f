package grpcx_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/noetl/noetl/internal/platform/grpcx"
)

func TestServerMetricsCountInFlightAndShedCalls(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := grpcx.NewServerMetrics(reg)
	info := &grpc.UnaryServerInfo{FullMethod: "/svc/Method"}
	var during float64
	_, err := m.Unary(context.Background(), nil, info, func(context.Context, any) (any, error) {
		during, _ = family(t, reg, "grpc_server_in_flight")
		return nil, nil
	})
	require.NoError(t, err)
	require.Equal(t, 1.0, during, "a call is in flight while it runs")
	after, _ := family(t, reg, "grpc_server_in_flight")
	require.Zero(t, after)

	for range 2 {
		_, err = m.Unary(context.Background(), nil, info, func(context.Context, any) (any, error) {
			return nil, status.Error(codes.ResourceExhausted, "busy")
		})
		require.Equal(t, codes.ResourceExhausted, status.Code(err))
	}
	shed, _ := family(t, reg, "grpc_server_shed_total")
	require.Equal(t, 2.0, shed)
	handled, series := family(t, reg, "grpc_server_handled_total")
	require.Equal(t, 3.0, handled)
	require.Equal(t, 2, series, "a series per code")
	_, series = family(t, reg, "grpc_server_handling_seconds")
	require.Equal(t, 2, series, "latency by code too")
}

// family returns the sum of the gauge and counter values of a metric family, and its
// number of series.
func family(t *testing.T, reg *prometheus.Registry, name string) (sum float64, series int) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
				series++
			}
		}
	}
	return sum, series
}

type sqlStateErr string

func (e sqlStateErr) Error() string    { return "db: " + string(e) }
func (e sqlStateErr) SQLState() string { return string(e) }

func TestToStatusUnavailable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for name, err := range map[string]error{
		"refused":        fmt.Errorf("failed to connect to `127.0.0.1:5432`: %w", refused),
		"reset":          fmt.Errorf("read: %w", syscall.ECONNRESET),
		"eof":            fmt.Errorf("conn closed: %w", io.ErrUnexpectedEOF),
		"admin shutdown": sqlStateErr("57P01"),
		"08006":          sqlStateErr("08006"),
	} {
		st := status.Convert(grpcx.ToStatus(nil, "/x", err))
		require.Equal(t, codes.Unavailable, st.Code(), name)
		require.NotContains(t, st.Message(), "127.0.0.1", name)
		var retry *errdetails.RetryInfo
		for _, d := range st.Details() {
			if r, ok := d.(*errdetails.RetryInfo); ok {
				retry = r
			}
		}
		require.NotNil(t, retry, name)
		require.Equal(t, grpcx.UnavailableRetry, retry.GetRetryDelay().AsDuration(), name)
	}
	for name, err := range map[string]error{
		"unique violation": sqlStateErr("23505"),
		"plain":            errors.New("boom"),
	} {
		require.Equal(t, codes.Internal, status.Code(grpcx.ToStatus(nil, "/x", err)), name)
	}
}

// Errors maps a handler's error the same way for unary and streaming calls: a status as it
// is, a wrapped sentinel to its code with the handler's message, anything else as ToStatus.
func TestErrorsMapSentinelsForUnaryAndStreamingCalls(t *testing.T) {
	t.Parallel()
	errGone := errors.New("gone")
	errLocked := errors.New("locked")
	e := &grpcx.Errors{Sentinels: []grpcx.Sentinel{{Err: errGone, Code: codes.NotFound}, {Err: errLocked, Code: codes.FailedPrecondition}}}
	for _, c := range []struct {
		name string
		err  error
		code codes.Code
		msg  string
	}{
		{"nil", nil, codes.OK, ""},
		{"sentinel", errGone, codes.NotFound, "gone"},
		{"wrapped sentinel", fmt.Errorf("credential %q: %w", "pg", errLocked), codes.FailedPrecondition, `credential "pg": locked`},
		{"status", status.Error(codes.InvalidArgument, "name: required"), codes.InvalidArgument, "name: required"},
		{"unknown", errors.New("db at 10.0.0.1 said no"), codes.Internal, "internal error"},
		{"context", fmt.Errorf("read: %w", context.Canceled), codes.Canceled, "request cancelled"},
	} {
		unary := func() error {
			_, err := e.Unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/svc/Unary"}, func(context.Context, any) (any, error) { return nil, c.err })
			return err
		}
		stream := func() error {
			return e.Stream(nil, nil, &grpc.StreamServerInfo{FullMethod: "/svc/Stream"}, func(any, grpc.ServerStream) error { return c.err })
		}
		for kind, call := range map[string]func() error{"unary": unary, "stream": stream} {
			err := call()
			require.Equal(t, c.code, status.Code(err), "%s %s", kind, c.name)
			if c.err != nil {
				require.Equal(t, c.msg, status.Convert(err).Message(), "%s %s", kind, c.name)
			} else {
				require.NoError(t, err, kind)
			}
		}
	}
}
