package grpcx_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
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
