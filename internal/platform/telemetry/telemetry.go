// Package telemetry sets up OpenTelemetry tracing for one NoETL service: a tracer provider
// chosen by configuration (OTLP over gRPC, stdout, or none), a resource naming the service,
// the W3C trace-context propagator, and the gRPC stats handlers that carry a trace across
// calls. NATS messages carry it in their headers (package natsx), so one execution is one
// connected trace across the services.
//
// Each service gets its own provider (no global state): in `noetl dev` the six services
// share a process, and each span must still name the service that made it.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"

	"github.com/noetl/noetl/internal/platform/config"
)

// Exporters of Config.Exporter.
const (
	// ExporterNone turns tracing off (the default).
	ExporterNone = "none"
	// ExporterStdout writes finished spans to standard output as JSON.
	ExporterStdout = "stdout"
	// ExporterOTLP sends spans to an OTLP/gRPC collector at Config.Endpoint.
	ExporterOTLP = "otlp"
)

// Span attributes NoETL puts on its own spans.
const (
	AttrTenant      = attribute.Key("noetl.tenant")
	AttrExecutionID = attribute.Key("noetl.execution_id")
	AttrStep        = attribute.Key("noetl.step")
	AttrAttempt     = attribute.Key("noetl.attempt")
	AttrTool        = attribute.Key("noetl.tool")
	AttrToolLabel   = attribute.Key("noetl.tool_label")
	AttrPool        = attribute.Key("noetl.pool")
	AttrCommandID   = attribute.Key("noetl.command_id")
	AttrSeq         = attribute.Key("noetl.seq")
	AttrEvents      = attribute.Key("noetl.events")
)

// Config chooses where a service's spans go.
type Config struct {
	// Exporter is ExporterNone (or empty), ExporterStdout or ExporterOTLP.
	Exporter string
	// Endpoint is the OTLP/gRPC collector: host:port (plaintext) or a URL, where
	// https:// uses TLS and http:// does not. Empty means the standard
	// OTEL_EXPORTER_OTLP_ENDPOINT, else localhost:4317.
	Endpoint string

	// SpanExporter, when set, receives every span synchronously as it ends, whatever
	// Exporter says (tests). Its owner shuts it down; the service does not.
	SpanExporter sdktrace.SpanExporter `json:"-"`
	// Stdout is where ExporterStdout writes; nil means os.Stdout.
	Stdout io.Writer `json:"-"`
}

// Flags binds the configuration to flags and NOETL_* env vars.
func (c *Config) Flags(fs *config.FlagSet) {
	fs.String(&c.Exporter, "trace-exporter", "NOETL_TRACE_EXPORTER", ExporterNone, "where spans go: none, stdout or otlp")
	fs.String(&c.Endpoint, "trace-endpoint", "NOETL_TRACE_ENDPOINT", "", "OTLP/gRPC collector for --trace-exporter=otlp: host:port (plaintext) or https://host:port")
}

// Validate checks the exporter name.
func (c Config) Validate() error {
	switch strings.ToLower(c.Exporter) {
	case "", ExporterNone, ExporterStdout, ExporterOTLP:
		return nil
	}
	return fmt.Errorf("trace exporter %q: want none, stdout or otlp", c.Exporter)
}

// Telemetry is one service's tracing: its tracer provider and the options that carry trace
// context through gRPC. Every method is safe on a nil *Telemetry, which means tracing off.
type Telemetry struct {
	provider trace.TracerProvider
	sdk      *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// Propagator is the propagator NoETL uses on gRPC metadata and NATS headers: W3C trace
// context and baggage.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Setup builds the tracing of service from cfg. Call Shutdown when the service stops, to
// flush buffered spans.
func Setup(ctx context.Context, service string, cfg Config) (*Telemetry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var opts []sdktrace.TracerProviderOption
	switch {
	case cfg.SpanExporter != nil:
		opts = append(opts, sdktrace.WithSyncer(ownedElsewhere{cfg.SpanExporter}))
	case strings.EqualFold(cfg.Exporter, ExporterStdout):
		w := cfg.Stdout
		if w == nil {
			w = os.Stdout
		}
		exp, err := stdouttrace.New(stdouttrace.WithWriter(w))
		if err != nil {
			return nil, fmt.Errorf("stdout trace exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	case strings.EqualFold(cfg.Exporter, ExporterOTLP):
		var eopts []otlptracegrpc.Option
		switch {
		case strings.Contains(cfg.Endpoint, "://"):
			eopts = append(eopts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
		case cfg.Endpoint != "":
			eopts = append(eopts, otlptracegrpc.WithEndpoint(cfg.Endpoint), otlptracegrpc.WithInsecure())
		}
		exp, err := otlptracegrpc.New(ctx, eopts...)
		if err != nil {
			return nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	default:
		return Disabled(), nil
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", service)))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	if os.Getenv("OTEL_TRACES_SAMPLER") == "" {
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(noBackgroundCalls{sdktrace.AlwaysSample()})))
	}
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res))...)
	return &Telemetry{provider: tp, sdk: tp, tracer: tp.Tracer("github.com/noetl/noetl")}, nil
}

// Disabled returns a Telemetry that records nothing. Its spans still carry a remote parent
// along, so a trace passes through a service whose tracing is off.
func Disabled() *Telemetry {
	tp := noop.NewTracerProvider()
	return &Telemetry{provider: tp, tracer: tp.Tracer("")}
}

// Enabled reports whether spans are recorded.
func (t *Telemetry) Enabled() bool { return t != nil && t.sdk != nil }

// Tracer returns the service's tracer.
func (t *Telemetry) Tracer() trace.Tracer {
	if t == nil || t.tracer == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return t.tracer
}

// ServerOption is the gRPC server option that traces every call the server handles and
// continues the caller's trace.
func (t *Telemetry) ServerOption() grpc.ServerOption {
	if !t.Enabled() {
		return grpc.EmptyServerOption{}
	}
	return grpc.StatsHandler(otelgrpc.NewServerHandler(t.grpcOptions()...))
}

// DialOption is the gRPC client option that traces every call and passes the trace on.
func (t *Telemetry) DialOption() grpc.DialOption {
	if !t.Enabled() {
		return grpc.EmptyDialOption{}
	}
	return grpc.WithStatsHandler(otelgrpc.NewClientHandler(t.grpcOptions()...))
}

func (t *Telemetry) grpcOptions() []otelgrpc.Option {
	return []otelgrpc.Option{
		otelgrpc.WithTracerProvider(t.provider),
		otelgrpc.WithPropagators(Propagator),
		// Metrics stay with Prometheus (package grpcx); no global meter is touched.
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
	}
}

// Shutdown flushes and stops the provider.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	return t.sdk.Shutdown(ctx)
}

// Close flushes and stops the provider, giving up after 5 seconds; a failure is logged.
// Services defer it after Setup.
func (t *Telemetry) Close(log *slog.Logger) {
	if !t.Enabled() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil && log != nil {
		log.Warn("trace shutdown", slog.String("error", err.Error()))
	}
}

// noBackgroundCalls drops the root spans of outgoing calls: a call made outside any trace
// comes from a background loop (timers, the reconciler, health checks), and would start a
// trace a second for nothing. Other root spans (a request, a commit) go to next. Setting
// OTEL_TRACES_SAMPLER replaces this sampler with the one it names.
type noBackgroundCalls struct{ next sdktrace.Sampler }

// ShouldSample implements sdktrace.Sampler.
func (s noBackgroundCalls) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if p.Kind == trace.SpanKindClient && !trace.SpanContextFromContext(p.ParentContext).IsValid() {
		return sdktrace.SamplingResult{Decision: sdktrace.Drop, Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
	}
	return s.next.ShouldSample(p)
}

// Description implements sdktrace.Sampler.
func (s noBackgroundCalls) Description() string {
	return "NoBackgroundCalls{" + s.next.Description() + "}"
}

// ownedElsewhere keeps a provider from shutting down an exporter it was handed: several
// services of one process may share it.
type ownedElsewhere struct{ sdktrace.SpanExporter }

// Shutdown implements sdktrace.SpanExporter without stopping the shared exporter.
func (ownedElsewhere) Shutdown(context.Context) error { return nil }

// ErrorStatus marks span as failed with err (nothing for a nil err).
func ErrorStatus(span trace.Span, err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	span.RecordError(err)
	span.SetStatus(otelcodes.Error, err.Error())
}

// Execution returns the attributes that tie a span to one execution's step.
func Execution(tenant, executionID, step string, attempt int32) []attribute.KeyValue {
	attrs := []attribute.KeyValue{AttrTenant.String(tenant), AttrExecutionID.String(executionID)}
	if step != "" {
		attrs = append(attrs, AttrStep.String(step))
	}
	if attempt > 0 {
		attrs = append(attrs, AttrAttempt.Int(int(attempt)))
	}
	return attrs
}
