package telemetry_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/test/bufconn"

	"github.com/noetl/noetl/internal/platform/telemetry"
	"github.com/noetl/noetl/internal/testkit"
)

func TestSetupChoosesTheExporter(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"", "none", "NONE"} {
		tel, err := telemetry.Setup(ctx, "svc", telemetry.Config{Exporter: name})
		require.NoError(t, err, name)
		require.False(t, tel.Enabled(), name)
		require.IsType(t, grpc.EmptyServerOption{}, tel.ServerOption())
		require.IsType(t, grpc.EmptyDialOption{}, tel.DialOption())
		tel.Close(nil)
	}
	_, err := telemetry.Setup(ctx, "svc", telemetry.Config{Exporter: "jaeger"})
	require.ErrorContains(t, err, `"jaeger"`)

	// OTLP connects lazily: a collector that is not there does not fail the start.
	tel, err := telemetry.Setup(ctx, "svc", telemetry.Config{Exporter: "otlp", Endpoint: "127.0.0.1:1"})
	require.NoError(t, err)
	require.True(t, tel.Enabled())
	tel.Close(nil)

	var out bytes.Buffer
	tel, err = telemetry.Setup(ctx, "svc", telemetry.Config{Exporter: "stdout", Stdout: &out})
	require.NoError(t, err)
	_, span := tel.Tracer().Start(ctx, "to-stdout")
	span.End()
	tel.Close(nil)
	require.Contains(t, out.String(), `"to-stdout"`)
}

func TestSpansNameTheServiceAndTheSharedExporterOutlivesIt(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tel, err := telemetry.Setup(context.Background(), "materializer", telemetry.Config{SpanExporter: exp})
	require.NoError(t, err)
	_, span := tel.Tracer().Start(context.Background(), "commit", trace.WithAttributes(telemetry.Execution("t1", "x1", "start", 2)...))
	span.End()
	tel.Close(nil) // must not clear the exporter another service shares

	spans := exp.GetSpans()
	require.Len(t, spans, 1, "exported synchronously, kept after the provider's shutdown")
	v, ok := spans[0].Resource.Set().Value("service.name")
	require.True(t, ok)
	require.Equal(t, "materializer", v.AsString())
	attrs := map[string]string{}
	for _, kv := range spans[0].Attributes {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	require.Equal(t, map[string]string{"noetl.tenant": "t1", "noetl.execution_id": "x1", "noetl.step": "start", "noetl.attempt": "2"}, attrs)
}

// TestGRPCCallsContinueTheCallersTrace checks that the stats handlers pass the trace from
// a client of one service to the server of another.
func TestGRPCCallsContinueTheCallersTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	ctx := context.Background()
	client, err := telemetry.Setup(ctx, "client", telemetry.Config{SpanExporter: exp})
	require.NoError(t, err)
	server, err := telemetry.Setup(ctx, "server", telemetry.Config{SpanExporter: exp})
	require.NoError(t, err)

	lis := bufconn.Listen(1 << 16)
	srv := grpc.NewServer(server.ServerOption())
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn", client.DialOption(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })

	ctx, parent := client.Tracer().Start(ctx, "caller")
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	parent.End()

	// The server's span ends after its reply is on the way.
	var serverSpan, clientSpan *tracetest.SpanStub
	testkit.WaitFor(t, 10*time.Second, func() error {
		for _, s := range exp.GetSpans() {
			switch s.SpanKind {
			case trace.SpanKindServer:
				serverSpan = &s
			case trace.SpanKindClient:
				clientSpan = &s
			}
		}
		if serverSpan == nil || clientSpan == nil {
			return errors.New("spans not exported yet")
		}
		return nil
	})
	require.Equal(t, parent.SpanContext().TraceID(), serverSpan.SpanContext.TraceID(), "one trace")
	require.Equal(t, clientSpan.SpanContext.SpanID(), serverSpan.Parent.SpanID(), "the server span is the client span's child")
	require.Equal(t, parent.SpanContext().SpanID(), clientSpan.Parent.SpanID())
}

// TestBackgroundCallsStartNoTrace: a call made outside any trace (a polling loop) records
// nothing, while a root span of work and the calls made inside it do.
func TestBackgroundCallsStartNoTrace(t *testing.T) {
	t.Setenv("OTEL_TRACES_SAMPLER", "")
	exp := tracetest.NewInMemoryExporter()
	tel, err := telemetry.Setup(context.Background(), "svc", telemetry.Config{SpanExporter: exp})
	require.NoError(t, err)
	tr := tel.Tracer()
	_, poll := tr.Start(context.Background(), "poll", trace.WithSpanKind(trace.SpanKindClient))
	require.False(t, poll.IsRecording())
	poll.End()
	ctx, work := tr.Start(context.Background(), "commit", trace.WithSpanKind(trace.SpanKindConsumer))
	_, call := tr.Start(ctx, "call", trace.WithSpanKind(trace.SpanKindClient))
	require.True(t, call.IsRecording())
	call.End()
	work.End()
	var names []string
	for _, s := range exp.GetSpans() {
		names = append(names, s.Name)
	}
	require.ElementsMatch(t, []string{"commit", "call"}, names)
}
