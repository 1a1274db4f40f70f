// Package worker is the NoETL worker service: it claims commands of its pool from
// NOETL_COMMANDS, renders their templates, runs the tools and publishes the outcome as
// events. A command is acked only after its outcome is published.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/failpoint"
	"github.com/noetl/noetl/internal/platform/app"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/platform/telemetry"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/services/worker/internal/scrub"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// Config is the worker's configuration.
type Config struct {
	AdminAddr   string
	NATSURL     string
	Pool        string
	Concurrency int
	Partitions  int
	Python      string
	// ToolEnv names the worker's environment variables python and shell tools also see.
	ToolEnv string
	// Shell lets this worker run kind: shell (arbitrary commands on its machine); a
	// worker of the system pool runs it regardless.
	Shell bool
	ID    string
	// OrchestratorAddr is where credentials are resolved (CredentialService).
	OrchestratorAddr string
	// HTTPEgress is the http tool's egress policy: HTTPEgressPublic (also when empty),
	// HTTPEgressLoopback or HTTPEgressPrivate. No policy reaches link-local addresses or
	// cloud metadata endpoints.
	HTTPEgress string
	// AllowPrivateHTTP is the deprecated NOETL_HTTP_ALLOW_PRIVATE: true means HTTPEgress
	// private, and conflicts with another HTTPEgress set alongside it.
	AllowPrivateHTTP bool
	// ResultstoreAddr is where results over the inline budget are stored.
	ResultstoreAddr string
	// FlightAddr is the resultstore's Arrow Flight address, where tables are uploaded.
	FlightAddr string
	// InlineMaxBytes is the inline result budget; larger results travel by reference.
	InlineMaxBytes int
	// ResultStoreRetry is how long storing or loading a result by reference is retried
	// while the resultstore cannot be reached (its restart), never past a command's
	// deadline (zero: DefaultResultStoreRetry).
	ResultStoreRetry time.Duration
	// InternalSecret signs the worker's calls to the orchestrator and the resultstore
	// (package auth); required.
	InternalSecret string
	// StreamReplicas is the JetStream replication factor of the streams this service
	// declares (zero: natsx.EnsureStreams decides).
	StreamReplicas int
	// Trace chooses where spans go.
	Trace telemetry.Config

	// AdminListener, when set, is used instead of AdminAddr.
	AdminListener net.Listener `json:"-"`
	// LagPoll is how often the pool consumer's lag is read (zero: natsx.DefaultLagPoll).
	LagPoll time.Duration `json:"-"`
	// DrainTimeout is how long a stopping worker lets its running commands finish (and
	// publish their outcomes) after it stops claiming new ones; the commands still running
	// then are cancelled and left for redelivery. Zero, also the value of a Config built
	// without Flags, cancels them at once.
	DrainTimeout time.Duration
}

// Flags binds the configuration to flags and NOETL_* env vars.
func (c *Config) Flags(fs *config.FlagSet) {
	fs.String(&c.AdminAddr, "admin", "NOETL_WORKER_ADMIN", "127.0.0.1:9064", "admin HTTP listen address (/livez, /readyz, /metrics)")
	fs.String(&c.NATSURL, "nats", "NOETL_NATS_URL", "nats://127.0.0.1:4222", "NATS URL")
	fs.String(&c.Pool, "pool", "NOETL_WORKER_POOL", "shared", "worker pool whose commands this worker runs")
	fs.Int(&c.Concurrency, "concurrency", "NOETL_WORKER_CONCURRENCY", 64, "commands run at once", config.Positive)
	fs.Duration(&c.DrainTimeout, "drain-timeout", "NOETL_WORKER_DRAIN_TIMEOUT", 30*time.Second, "on SIGTERM, how long running commands may finish before they are cancelled and left for redelivery (0: at once)", config.NonNegative)
	fs.Int(&c.Partitions, "partitions", "NOETL_PARTITIONS", natsx.DefaultPartitions, "execution partitions", config.Positive)
	fs.Int(&c.StreamReplicas, "stream-replicas", "NOETL_STREAM_REPLICAS", 1, "JetStream replicas of the three streams (3 on a clustered NATS)", config.Positive)
	fs.String(&c.Python, "python", "NOETL_PYTHON", "python3", "python interpreter for kind: python")
	fs.String(&c.ToolEnv, "tool-env", "NOETL_WORKER_TOOL_ENV", "", "comma-separated names of the worker's environment variables that python and shell tools also see (beside PATH and the locale); none of NOETL_*", tools.CheckPassEnv)
	fs.Bool(&c.Shell, "shell", tools.ShellEnableEnv, false, "run kind: shell steps (arbitrary commands on this machine; the system pool always runs them)")
	fs.String(&c.ID, "id", "NOETL_WORKER_ID", "", "worker id reported in events (default: host name)")
	fs.String(&c.OrchestratorAddr, "orchestrator", "NOETL_ORCHESTRATOR_ADDR", "127.0.0.1:50061", "orchestrator gRPC address (credential resolution)")
	fs.String(&c.ResultstoreAddr, "resultstore", "NOETL_RESULTSTORE_ADDR", "127.0.0.1:50065", "resultstore gRPC address")
	fs.String(&c.FlightAddr, "flight", "NOETL_RESULTSTORE_FLIGHT_ADDR", "127.0.0.1:50066", "resultstore Arrow Flight address (tables are uploaded there)")
	fs.Int(&c.InlineMaxBytes, "inline-max", "NOETL_INLINE_RESULT_MAX_BYTES", 64<<10, "largest result carried inline in events; larger ones go to the resultstore", config.Positive)
	fs.Duration(&c.ResultStoreRetry, "result-store-retry", "NOETL_WORKER_RESULT_STORE_RETRY", DefaultResultStoreRetry, "how long storing or loading a result is retried while the resultstore cannot be reached (a restart); a step fails only after it", config.Positive)
	fs.String(&c.HTTPEgress, "http-egress", "NOETL_HTTP_EGRESS", HTTPEgressPublic, "addresses the http tool may reach: public, loopback (public and loopback) or private (public, loopback and private ranges); never link-local or cloud metadata", CheckHTTPEgress)
	fs.Bool(&c.AllowPrivateHTTP, "allow-private-http", "NOETL_HTTP_ALLOW_PRIVATE", false, "deprecated: true means --http-egress private")
	fs.Secret(&c.InternalSecret, "internal-secret", "NOETL_INTERNAL_SECRET", "", "secret shared by the services that signs principals in internal calls (at least 32 bytes)")
	c.Trace.Flags(fs)
}

// ParseFlags reads the worker's configuration from args and the NOETL_* environment. A
// malformed or out-of-range value is an error naming the flag or variable and the value.
// printed reports that --print-config or -h printed instead of a start (exit 0).
func ParseFlags(args []string) (cfg Config, printed bool, err error) {
	fs := config.New("worker")
	cfg.Flags(fs)
	if printed, err = fs.Parse(args); err != nil || printed {
		return cfg, printed, err
	}
	// The deprecated NOETL_HTTP_ALLOW_PRIVATE=true stands for NOETL_HTTP_EGRESS=private
	// unless the egress policy is given too, in which case the two must agree (httpEgress).
	if cfg.AllowPrivateHTTP {
		given := strings.TrimSpace(os.Getenv(httpEgressEnv)) != ""
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == "http-egress" })
		if !given {
			cfg.HTTPEgress = HTTPEgressPrivate
		}
	}
	if _, err := cfg.httpEgress(); err != nil {
		return cfg, false, err
	}
	return cfg, false, nil
}

// HTTP egress policies: the values of Config.HTTPEgress (NOETL_HTTP_EGRESS).
const (
	// HTTPEgressPublic lets the http tool reach public addresses only (the default).
	HTTPEgressPublic = "public"
	// HTTPEgressLoopback adds loopback addresses (127.0.0.0/8, ::1): the dev mesh's default.
	HTTPEgressLoopback = "loopback"
	// HTTPEgressPrivate adds private ranges (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7).
	HTTPEgressPrivate = "private"
)

// httpEgressEnv is the variable of Config.HTTPEgress (bound in Flags).
const httpEgressEnv = "NOETL_HTTP_EGRESS"

// CheckHTTPEgress returns an error unless s names an HTTP egress policy (empty: public).
func CheckHTTPEgress(s string) error {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	if _, err := tools.ParseEgress(s); err != nil {
		return errors.New("want public, loopback or private")
	}
	return nil
}

// httpEgress returns the http tool's policy: HTTPEgress, or private for the deprecated
// AllowPrivateHTTP alone. AllowPrivateHTTP with another policy is an error.
func (c Config) httpEgress() (tools.Egress, error) {
	e := tools.EgressPublic
	if strings.TrimSpace(c.HTTPEgress) != "" {
		var err error
		if e, err = tools.ParseEgress(c.HTTPEgress); err != nil {
			return 0, fmt.Errorf("%s=%q: want public, loopback or private", httpEgressEnv, c.HTTPEgress)
		}
	}
	if !c.AllowPrivateHTTP {
		return e, nil
	}
	if strings.TrimSpace(c.HTTPEgress) == "" {
		return tools.EgressPrivate, nil
	}
	if e != tools.EgressPrivate {
		return 0, fmt.Errorf("NOETL_HTTP_ALLOW_PRIVATE=true (deprecated: it means %s=private) conflicts with %s=%q; drop NOETL_HTTP_ALLOW_PRIVATE", httpEgressEnv, httpEgressEnv, c.HTTPEgress)
	}
	return e, nil
}

// Run runs the worker until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if cfg.Pool == "" {
		cfg.Pool = "shared"
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 64
	}
	if cfg.ID == "" {
		cfg.ID, _ = os.Hostname()
	}
	log = log.With(slog.String("service", "worker"), slog.String("pool", cfg.Pool))
	egress, err := cfg.httpEgress()
	if err != nil {
		return err
	}
	if cfg.AllowPrivateHTTP {
		log.Warn("NOETL_HTTP_ALLOW_PRIVATE is deprecated: set NOETL_HTTP_EGRESS=private instead")
	}
	tel, err := telemetry.Setup(ctx, "worker", cfg.Trace)
	if err != nil {
		return err
	}
	defer tel.Close(log)
	nc, js, err := natsx.Connect(cfg.NATSURL, "worker-"+cfg.Pool)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := natsx.EnsureStreams(ctx, js, natsx.StreamConfig{Replicas: cfg.StreamReplicas}); err != nil {
		return err
	}
	adminLis, err := app.Listen(cfg.AdminListener, cfg.AdminAddr)
	if err != nil {
		return err
	}
	srv := app.NewServer("worker", log, nil, adminLis, tel.ServerOption())
	srv.AddCheck("nats", natsx.Check(nc))
	trust, err := auth.NewTrust(cfg.InternalSecret)
	if err != nil {
		return err
	}
	conn, err := grpcx.DialSigned(cfg.OrchestratorAddr, trust.Service("worker"), tel.DialOption())
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	creds := orchv1.NewCredentialServiceClient(conn)
	// Credentials are resolved for the tenant of the command being run, carried in ctx.
	resolve := func(ctx context.Context, name string) (string, map[string]any, error) {
		tenant, _ := ctx.Value(tenantKey{}).(string)
		if tenant == "" {
			return "", nil, &tools.Error{Msg: fmt.Sprintf("credential %q: no tenant in scope", name)}
		}
		resp, err := creds.ResolveCredential(ctx, &orchv1.ResolveCredentialRequest{Tenant: tenant, Name: name})
		if err != nil {
			retry := status.Code(err) == codes.Unavailable || status.Code(err) == codes.DeadlineExceeded
			return "", nil, &tools.Error{Msg: tools.CredentialMessage(name, status.Convert(err).Message()), Retryable: retry}
		}
		var data map[string]any
		if err := json.Unmarshal(resp.GetDataJson(), &data); err != nil {
			return "", nil, &tools.Error{Msg: fmt.Sprintf("credential %q: malformed data", name)}
		}
		// The command's scrubber learns the secrets before the tool sees them, so that
		// whatever the tool or the remote side makes of them is masked on the way out.
		scrubberOf(ctx).AddCredential(data)
		return resp.GetType(), data, nil
	}
	if cfg.InlineMaxBytes <= 0 {
		cfg.InlineMaxBytes = 64 << 10
	}
	// Reconnect to a restarted resultstore within a second or two (gRPC's default backoff
	// grows to two minutes), so that the calls retried meanwhile find it soon.
	reconnect := grpc.WithConnectParams(grpc.ConnectParams{Backoff: grpcbackoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second}, MinConnectTimeout: 5 * time.Second})
	rconn, err := grpcx.DialSigned(cfg.ResultstoreAddr, trust.Service("worker"), tel.DialOption(), reconnect)
	if err != nil {
		return err
	}
	defer func() { _ = rconn.Close() }()
	fclient, err := flight.NewClientWithMiddleware(cfg.FlightAddr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(trust.Service("worker")), tel.DialOption(), reconnect,
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		return err
	}
	defer func() { _ = fclient.Close() }()
	w := &Worker{
		cfg:      cfg,
		log:      log,
		nc:       nc,
		js:       js,
		results:  rsv1.NewResultStoreServiceClient(rconn),
		flight:   fclient,
		renderer: playbook.NewRenderer(),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "noetl_worker_commands_total", Help: "Commands run, by pool, tool and outcome."},
			[]string{"pool", "tool", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "noetl_worker_tool_seconds", Help: "Tool run time.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 12)}, []string{"tool"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "noetl_worker_in_flight", Help: "Commands being run.", ConstLabels: prometheus.Labels{"pool": cfg.Pool}}),
		scrubbed: prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_worker_secrets_scrubbed_total",
			Help:        "Occurrences of a credential's secret (raw or encoded) the worker masked in a command's result, events, errors and logs.",
			ConstLabels: prometheus.Labels{"pool": cfg.Pool}}),
		storeRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_worker_resultstore_retries_total",
			Help:        "Calls to the resultstore (storing or loading a result) tried again because it could not be reached.",
			ConstLabels: prometheus.Labels{"pool": cfg.Pool}}),
		tracer: tel.Tracer(), cancels: newCancels(),
	}
	limit := prometheus.NewGauge(prometheus.GaugeOpts{Name: "noetl_worker_concurrency", Help: "Commands the worker runs at once at most (NOETL_WORKER_CONCURRENCY).", ConstLabels: prometheus.Labels{"pool": cfg.Pool}})
	limit.Set(float64(cfg.Concurrency))
	var closeTools func()
	w.tools, closeTools = w.toolTable(egress, resolve, orchv1.NewOrchestratorServiceClient(conn))
	defer closeTools()
	srv.Registry.MustRegister(w.runs, w.duration, w.inFlight, w.scrubbed, w.storeRetries, limit)
	lag := natsx.NewLagMonitor(js, natsx.StreamCommands, consumerName(cfg.Pool), cfg.Pool, cfg.LagPoll, srv.Registry, log)
	log.Info("worker consuming", slog.String("admin", srv.AdminAddr()), slog.String("http_egress", egress.String()))
	return srv.Run(ctx, 30*time.Second, w.consume, lag.Run)
}

// toolTable builds the tools this worker runs, by kind: playbook.WorkerToolKinds, and
// playbook.SystemToolKinds on the system pool (a test keeps the two lists equal). The
// returned func releases the tools' pooled connections.
func (w *Worker) toolTable(egress tools.Egress, resolve tools.CredentialResolver, orch orchv1.OrchestratorServiceClient) (tools.Registry, func()) {
	pg := &tools.Postgres{Resolve: resolve}
	httpTool := &tools.HTTP{Egress: egress, Resolve: resolve}
	natsTool := &tools.NATS{Egress: egress, Resolve: resolve, Register: registerSecret}
	r := tools.Registry{
		"noop":     tools.Noop{},
		"python":   &tools.Python{Interpreter: w.cfg.Python, PassEnv: tools.ParsePassEnv(w.cfg.ToolEnv), WorkerID: w.cfg.ID},
		"postgres": pg,
		"duckdb":   &tools.DuckDB{Resolve: resolve},
		"http":     httpTool,
		"playbook": &tools.Playbook{Orchestrator: orch},
		"artifact": artifactTool{w},
		"shell":    &tools.Shell{Enabled: w.cfg.Shell || w.cfg.Pool == "system", PassEnv: tools.ParsePassEnv(w.cfg.ToolEnv)},
		"secrets":  &tools.Secrets{Resolve: resolve, Register: registerSecret},
		"nats":     natsTool,
	}
	w.keychain = &tools.Keychain{Resolve: resolve, Register: registerSecret, HTTP: httpTool}
	if w.cfg.Pool == "system" {
		r["system_info"] = systemInfo{w}
	}
	return r, func() {
		pg.Close()
		httpTool.CloseIdleConnections()
		natsTool.Close()
	}
}

// registerSecret adds a secret value to the scrubber of the command ctx runs (the
// secrets tool registers every value it fetches).
func registerSecret(ctx context.Context, v string) { scrubberOf(ctx).AddSecret(v) }

// Worker runs commands.
type Worker struct {
	cfg      Config
	log      *slog.Logger
	nc       *nats.Conn
	js       jetstream.JetStream
	results  rsv1.ResultStoreServiceClient
	flight   flight.Client
	renderer *playbook.Renderer
	tools    tools.Registry
	// keychain resolves the keychain entries commands carry (keychain.go).
	keychain *tools.Keychain
	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inFlight prometheus.Gauge
	// scrubbed counts the secrets masked in what commands produce (noetl_worker_secrets_scrubbed_total).
	scrubbed prometheus.Counter
	// storeRetries counts the calls to an unreachable resultstore tried again
	// (noetl_worker_resultstore_retries_total).
	storeRetries prometheus.Counter
	tracer       trace.Tracer
	// cancels routes cancellations to the running commands (cancels.go).
	cancels *cancels
}

// consumerName is the durable consumer of a pool on NOETL_COMMANDS.
func consumerName(pool string) string { return "worker-" + pool }

// consume claims the pool's commands and runs up to Concurrency of them at once until ctx
// ends; then it stops claiming, hands back the messages claimed but not started, and
// waits for the running commands (see Config.DrainTimeout) before it returns.
func (w *Worker) consume(ctx context.Context) error {
	cons, err := w.js.CreateOrUpdateConsumer(ctx, natsx.StreamCommands, jetstream.ConsumerConfig{
		Durable:       consumerName(w.cfg.Pool),
		FilterSubject: natsx.PoolSubjects(w.cfg.Pool),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       60 * time.Second,
		MaxDeliver:    -1,
		MaxAckPending: 8 * w.cfg.Concurrency,
	})
	if err != nil {
		return fmt.Errorf("commands consumer: %w", err)
	}
	stopCancels, err := w.cancels.subscribe(w.nc)
	if err != nil {
		return fmt.Errorf("cancellations: %w", err)
	}
	defer stopCancels()
	it, err := cons.Messages(jetstream.PullMaxMessages(w.cfg.Concurrency))
	if err != nil {
		return err
	}
	// Commands run in runCtx, which keeps ctx's values but not its end: when ctx ends the
	// worker stops claiming at once, and the commands it runs finish and publish their
	// outcomes for up to DrainTimeout, after which runCtx ends them (handle then leaves
	// them for redelivery).
	runCtx, cancelRuns := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRuns()
	var running atomic.Int64
	consumed := make(chan struct{})
	defer close(consumed)
	go func() {
		select {
		case <-consumed:
			return
		case <-ctx.Done():
		}
		// Drain rather than Stop: the messages the iterator holds already come out of Next
		// and are handed back below, instead of waiting out the ack wait.
		it.Drain()
		w.log.Info("worker draining", slog.Int64("running", running.Load()), slog.Duration("drain_timeout", w.cfg.DrainTimeout))
		t := time.NewTimer(w.cfg.DrainTimeout)
		defer t.Stop()
		select {
		case <-consumed:
		case <-t.C:
			if n := running.Load(); n > 0 {
				w.log.Warn("drain timeout: cancelling the running commands, left for redelivery", slog.Int64("running", n))
			}
			cancelRuns()
			it.Stop()
		}
	}()
	sem := make(chan struct{}, w.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		m, err := it.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			if ctx.Err() == nil {
				w.log.Warn("command consumer", slog.String("error", err.Error()))
			}
			continue
		}
		if ctx.Err() != nil {
			// Claimed before the stop but not started: another worker runs it now.
			_ = m.Nak()
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			_ = m.Nak()
			continue
		}
		wg.Add(1)
		running.Add(1)
		w.inFlight.Inc()
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer running.Add(-1)
			defer w.inFlight.Dec()
			w.handle(runCtx, m)
		}()
	}
}

// handle runs one claimed command and publishes its outcome, then acks it. ctx is the run
// context of consume: it ends only when a stopping worker's drain timeout passed, and a
// command it ended is Nak'd for another worker rather than failed.
func (w *Worker) handle(ctx context.Context, m jetstream.Msg) {
	cmd := &eventv1.Command{}
	if err := proto.Unmarshal(m.Data(), cmd); err != nil {
		w.log.Error("dropping malformed command", slog.String("error", err.Error()))
		_ = m.Term()
		return
	}
	// The run continues the trace of the commit that forwarded the command.
	kind := "noop"
	if len(cmd.GetTools()) > 0 {
		kind = cmd.GetTools()[0].GetKind()
	}
	ctx, span := w.tracer.Start(natsx.Extract(ctx, m.Headers()), "step "+cmd.GetStep(), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(telemetry.Execution(cmd.GetTenant(), cmd.GetExecutionId(), cmd.GetStep(), cmd.GetAttempt())...),
		trace.WithAttributes(telemetry.AttrTool.String(kind), telemetry.AttrPool.String(w.cfg.Pool), telemetry.AttrCommandID.String(cmd.GetCommandId())))
	defer span.End()
	// Keep the claim alive while a long tool runs.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(20 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	// Every secret resolved for this command is masked in what leaves the worker: events,
	// the stored result, span errors and these log lines.
	sc := w.newScrubber()
	ctx = withScrubber(ctx, sc)
	log := slog.New(sc.Handler(w.log.Handler()))
	// A committed cancellation of the execution stops the tool.
	// Its cause tells tools a cancelled execution (tools.ErrExecutionCancelled) from a
	// stopping worker whose drain timeout passed (ctx's own end).
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer w.cancels.watch(cmd.GetExecutionId(), cancel)()
	// A run that lasts is reported while it runs: command.started once the tool has run for
	// startedAfter, so the log shows a worker holding the command (the reconciler
	// re-publishes only commands no worker started). A short run reports only its outcome.
	// The outcome is published after any command.started in flight, so the stream keeps
	// their order.
	var startedMu sync.Mutex
	ran := false
	startedTimer := time.AfterFunc(startedAfter, func() {
		startedMu.Lock()
		defer startedMu.Unlock()
		if !ran {
			if err := w.publish(ctx, []*eventv1.Event{commandEvent(cmd, domain.EventCommandStarted)}); err != nil && ctx.Err() == nil {
				log.Warn("publish command.started", slog.String("execution_id", cmd.GetExecutionId()), slog.String("error", err.Error()))
			}
		}
	})
	events := w.Execute(runCtx, cmd)
	startedTimer.Stop()
	startedMu.Lock()
	ran = true
	startedMu.Unlock()
	if ctx.Err() != nil {
		// The worker is stopping and its drain timeout passed: the tool was cancelled by
		// the shutdown, not by the execution, so its outcome is not the command's.
		// Publishing it would fail the step (and the redelivered run would log a second
		// outcome); leave the command to be redelivered to another worker instead.
		log.Info("stopping: command left for redelivery", slog.String("execution_id", cmd.GetExecutionId()), slog.String("step", cmd.GetStep()))
		_ = m.Nak()
		return
	}
	if last := events[len(events)-1]; last.GetError() != nil {
		telemetry.ErrorStatus(span, errors.New(last.GetError().GetMessage()))
	}
	if err := failpoint.Eval(failpoint.WorkerAfterTool); err != nil {
		_ = m.NakWithDelay(100 * time.Millisecond)
		return
	}
	err := w.publish(ctx, events)
	if errors.Is(err, natsx.ErrMessageTooLarge) {
		// Retrying cannot shrink the outcome: fail the command with a message that fits.
		log.Warn("command outcome too large to publish", slog.String("execution_id", cmd.GetExecutionId()), slog.String("step", cmd.GetStep()), slog.String("error", err.Error()))
		events = scrubEvents(sc, failTooLarge(events, err))
		err = w.publish(ctx, events)
	}
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("publish outcome failed; command will be redelivered", slog.String("execution_id", cmd.GetExecutionId()), slog.String("error", err.Error()))
		}
		_ = m.NakWithDelay(500 * time.Millisecond)
		return
	}
	if err := failpoint.Eval(failpoint.WorkerAfterPublish); err != nil {
		_ = m.NakWithDelay(100 * time.Millisecond)
		return
	}
	_ = m.Ack()
}

func (w *Worker) publish(ctx context.Context, events []*eventv1.Event) error {
	msgs := make([]natsx.Message, 0, len(events))
	for _, ev := range events {
		b, err := proto.Marshal(ev)
		if err != nil {
			return err
		}
		msgs = append(msgs, natsx.Message{Subject: natsx.EventSubject(ev.GetExecutionId(), w.cfg.Partitions), MsgID: ev.GetEventId(), Data: b})
	}
	return natsx.PublishAll(ctx, w.js, msgs)
}

// Execute renders and runs a command and returns its outcome: one command.completed
// carrying the result, or one command.failed carrying the error. The secrets of the
// credentials resolved while it runs are masked in the result (before it is measured, so
// a result stored by reference is masked too) and in every event. What the tools wrote
// (stdout, stderr, diagnostics) travels as the step's logs in the outcome event
// (attachLogs).
func (w *Worker) Execute(ctx context.Context, cmd *eventv1.Command) []*eventv1.Event {
	sc := scrubberOf(ctx)
	if sc == nil {
		sc = w.newScrubber()
		ctx = withScrubber(ctx, sc)
	}
	ctx, logs := withLogs(ctx)
	return scrubEvents(sc, w.attachLogs(ctx, cmd, w.execute(ctx, cmd, sc), logs, sc))
}

// commandEvent is a worker's event of type typ for cmd, its id derived from the command.
func commandEvent(cmd *eventv1.Command, typ string) *eventv1.Event {
	return &eventv1.Event{
		EventId:           domain.EventID(cmd.GetCommandId(), typ),
		ExecutionId:       cmd.GetExecutionId(),
		Tenant:            cmd.GetTenant(),
		Type:              typ,
		Step:              cmd.GetStep(),
		CommandId:         cmd.GetCommandId(),
		Iteration:         cmd.GetIteration(),
		Attempt:           cmd.GetAttempt(),
		ParentExecutionId: cmd.GetParentExecutionId(),
		CauseEventId:      cmd.GetIssuedEventId(),
		Producer:          "worker",
		ProduceTime:       timestamppb.Now(),
	}
}

func (w *Worker) execute(ctx context.Context, cmd *eventv1.Command, sc *scrub.Scrubber) []*eventv1.Event {
	mk := func(typ string) *eventv1.Event { return commandEvent(cmd, typ) }
	begun := timestamppb.Now()
	// The command's one outcome event: command.completed carrying the result (what
	// call.done carried once), or command.failed carrying the error; each says when the
	// command began (command.started is published only for a long run, see handle).
	outcomeOf := func(typ string) *eventv1.Event {
		ev := mk(typ)
		ev.StartTime = begun
		return ev
	}
	fail := func(info *eventv1.ErrorInfo) []*eventv1.Event {
		// Scrub before clipping, which could cut a secret and leave part of it.
		info.Message = clip(sc.String(info.GetMessage()))
		failed := outcomeOf(domain.EventCommandFailed)
		failed.Error = info
		return []*eventv1.Event{failed}
	}
	if err := w.admit(cmd); err != nil {
		return fail(&eventv1.ErrorInfo{Code: "refused", Message: err.Error()})
	}
	kind := "noop"
	if len(cmd.GetTools()) > 0 {
		kind = cmd.GetTools()[0].GetKind()
	}
	begin := time.Now()
	runCtx, cancelRun := ctx, context.CancelFunc(func() {})
	if t := cmd.GetTimeout().AsDuration(); t > 0 {
		runCtx, cancelRun = context.WithTimeoutCause(ctx, t, errStepTimeout)
	}
	out, err := w.run(runCtx, cmd)
	timedOut := errors.Is(context.Cause(runCtx), errStepTimeout)
	cancelRun()
	w.duration.WithLabelValues(kind).Observe(time.Since(begin).Seconds())
	if err != nil {
		w.runs.WithLabelValues(w.cfg.Pool, kind, "error").Inc()
		info := &eventv1.ErrorInfo{Code: "tool_error", Message: err.Error()}
		var te *tools.Error
		if errors.As(err, &te) {
			info.Retryable = te.Retryable
		}
		if timedOut {
			// The tool was stopped at the step's bound: say so, whatever the tool made of
			// its cancelled context.
			info = &eventv1.ErrorInfo{Code: "deadline_exceeded", Retryable: true,
				Message: fmt.Sprintf("step %s: the attempt ran past its timeout of %s (spec.timeout) and was stopped", cmd.GetStep(), cmd.GetTimeout().AsDuration())}
		}
		var re *renderError
		if errors.As(err, &re) {
			info.Code = "template_error"
		}
		var rr *retryRequest
		if errors.As(err, &rr) {
			info.Code = "retry"
			info.Retryable = true
			evs := fail(info)
			// command.failed carries the retry request the orchestrator turns into a timer.
			evs[len(evs)-1].PayloadJson, _ = json.Marshal(domain.FailedPayload{Retry: &domain.RetryRequest{Attempts: rr.attempts, DelaySeconds: rr.delay.Seconds()}})
			return evs
		}
		return fail(info)
	}
	w.runs.WithLabelValues(w.cfg.Pool, kind, "ok").Inc()
	out.result = sc.Value(out.result)
	for scope, m := range out.set {
		out.set[scope], _ = sc.Value(m).(map[string]any)
	}
	done := outcomeOf(domain.EventCommandCompleted)
	if len(out.set) > 0 {
		p, err := json.Marshal(domain.CallPayload{Set: out.set})
		if err != nil {
			return fail(&eventv1.ErrorInfo{Code: "tool_error", Message: "policy set is not JSON-encodable: " + err.Error()})
		}
		done.PayloadJson = p
	}
	b, ref, serr := w.storeResult(ctx, cmd, out.result)
	var se *storeError
	switch {
	case errors.As(serr, &se):
		return fail(&eventv1.ErrorInfo{Code: "result_store_error", Message: fmt.Sprintf("step %s: store the result: %v", cmd.GetStep(), se.err), Retryable: true})
	case serr != nil:
		return fail(&eventv1.ErrorInfo{Code: "tool_error", Message: "result is not JSON-encodable: " + serr.Error()})
	case ref != nil:
		done.ResultRef = ref
		return []*eventv1.Event{done}
	}
	done.ResultJson = b
	return []*eventv1.Event{done}
}

// startedAfter is how long a command runs before its worker reports command.started.
const startedAfter = 2 * time.Second

// errStepTimeout is the cause of a command's context past its step's spec.timeout.
var errStepTimeout = errors.New("the step's spec.timeout passed")

// maxErrorMessage bounds the message of an error carried by an event.
const maxErrorMessage = 16 << 10

// clip keeps the head and the tail of a message longer than maxErrorMessage.
func clip(msg string) string {
	if len(msg) <= maxErrorMessage {
		return msg
	}
	half := maxErrorMessage / 2
	return fmt.Sprintf("%s ... [%d bytes elided] ... %s", strings.ToValidUTF8(msg[:half], ""), len(msg)-2*half, strings.ToValidUTF8(msg[len(msg)-half:], ""))
}

// failTooLarge replaces a command's outcome that could not be published by a
// command.failed saying so: the outcome's envelope (command, step, iteration, attempt,
// times) without what made it too large.
func failTooLarge(events []*eventv1.Event, cause error) []*eventv1.Event {
	f := proto.Clone(events[len(events)-1]).(*eventv1.Event)
	f.Type, f.EventId = domain.EventCommandFailed, domain.EventID(f.GetCommandId(), domain.EventCommandFailed)
	f.PayloadJson, f.ResultJson, f.ResultRef = nil, nil, nil
	f.Error = &eventv1.ErrorInfo{Code: "outcome_too_large", Message: clip(fmt.Sprintf("step %s: its outcome cannot be published: %v; results travel by reference, so this is an oversized error message or policy set", f.GetStep(), cause))}
	return []*eventv1.Event{f}
}

// retryRequest ends a command asking the orchestrator to run it again after delay.
type retryRequest struct {
	attempts int32
	delay    time.Duration
	cause    error
}

func (r *retryRequest) Error() string {
	if r.cause != nil {
		return fmt.Sprintf("retry in %s: %v", r.delay, r.cause)
	}
	return fmt.Sprintf("retry in %s", r.delay)
}

type renderError struct{ err error }

func (e *renderError) Error() string { return e.err.Error() }
func (e *renderError) Unwrap() error { return e.err }

// outcome is what running a command's tools produced.
type outcome struct {
	result any
	// set holds the ctx. (and iter.) updates made by policy rules, by scope.
	set map[string]map[string]any
}

// run renders the command's tools and runs them in order. Later tools of a pipeline see
// earlier results by label (and the previous one as _prev); each tool's policy rules decide
// what follows (continue, retry, jump, break, fail). The step result is the tool's result
// for a single tool, and for a pipeline the last result with every label's result added
// under its label.
func (w *Worker) run(ctx context.Context, cmd *eventv1.Command) (*outcome, error) {
	var scope domain.Scope
	contextJSON := cmd.GetContextJson()
	if ref := cmd.GetContextRef(); ref != nil {
		// The context was too large to travel in the command.
		body, err := w.fetch(ctx, cmd.GetTenant(), ref.GetUri())
		if err != nil {
			return nil, &tools.Error{Msg: fmt.Sprintf("step %s: load the command context %s: %v", cmd.GetStep(), ref.GetUri(), err), Retryable: true}
		}
		contextJSON = body
	}
	if len(contextJSON) > 0 {
		if err := domain.DecodeJSON(contextJSON, &scope); err != nil {
			return nil, fmt.Errorf("command context: %w", err)
		}
	}
	if scope.Ctx == nil {
		scope.Ctx = map[string]any{}
	}
	if err := w.resolveRefs(ctx, cmd, &scope); err != nil {
		return nil, err
	}
	vars := scope.Vars()
	vars["command_id"] = cmd.GetCommandId()
	if err := w.loadKeychain(ctx, cmd, vars); err != nil { // keychain.go
		return nil, err
	}
	var stepInput map[string]any
	if len(cmd.GetInputJson()) > 0 && string(cmd.GetInputJson()) != "null" {
		if err := domain.DecodeJSON(cmd.GetInputJson(), &stepInput); err != nil {
			return nil, fmt.Errorf("command input: %w", err)
		}
	}
	out := &outcome{set: map[string]map[string]any{}}
	calls := cmd.GetTools()
	labels := make(map[string]int, len(calls))
	for i, tc := range calls {
		if tc.GetLabel() != "" {
			labels[tc.GetLabel()] = i
		}
	}
	byLabel := map[string]any{}
	var last any
	attempts := make([]int, len(calls))
	for i := 0; i < len(calls); {
		tc := calls[i]
		attempts[i]++
		label := tc.GetLabel()
		if label == "" {
			label = fmt.Sprintf("task_%d", i)
		}
		where := fmt.Sprintf("step %s: tool %s", cmd.GetStep(), tc.GetKind())
		if tc.GetLabel() != "" {
			where = fmt.Sprintf("step %s: tool %s (%s)", cmd.GetStep(), tc.GetLabel(), tc.GetKind())
		}
		// The attempt of the command (a durable retry is a new command) plus the runs of
		// this item within it.
		vars["_attempt"] = max(int(cmd.GetAttempt()), 1) - 1 + attempts[i]
		vars["_task"] = label
		res, runErr := w.runTool(ctx, cmd, tc, stepInput, vars, where)
		var re *renderError
		if errors.As(runErr, &re) {
			return nil, runErr
		}
		env := envelope(res, runErr)
		vars["output"] = env
		var policy *playbook.Policy
		if p, ok := policyOf(tc); ok {
			policy = p
		}
		action, err := w.decidePolicy(policy, vars, runErr, where)
		if err != nil {
			return nil, err
		}
		if len(action.Set) > 0 {
			if err := w.applySet(action.Set, vars, out, where); err != nil {
				return nil, err
			}
		}
		switch action.Do {
		case playbook.DoRetry:
			max := action.Attempts
			if max <= 0 {
				max = 3
			}
			// A delayed retry of a whole single-tool command waits on a durable timer in
			// the orchestrator (it survives restarts and frees this slot); retries inside
			// pipelines and loop iterations wait here.
			if delay := backoff(action, int(cmd.GetAttempt())); delay > 0 && len(calls) == 1 && cmd.GetIteration().GetIndex() < 0 {
				if int(cmd.GetAttempt()) < max {
					return nil, &retryRequest{attempts: int32(max), delay: delay, cause: runErr}
				}
			} else if attempts[i] < max {
				if err := sleepCtx(ctx, backoff(action, attempts[i])); err != nil {
					return nil, err
				}
				continue
			}
			if runErr != nil {
				return nil, fmt.Errorf("%s: failed after %d attempts: %w", where, attempts[i], runErr)
			}
			// A successful output that still asks for a retry after the last attempt goes on.
		case playbook.DoFail:
			if runErr != nil {
				return nil, fmt.Errorf("%s: %w", where, runErr)
			}
			return nil, &tools.Error{Msg: where + ": failed by policy"}
		}
		if runErr != nil && action.Do != playbook.DoContinue && action.Do != playbook.DoRetry {
			return nil, fmt.Errorf("%s: %w", where, runErr)
		}
		last = res
		byLabel[label] = res
		vars[label] = res
		vars["_prev"] = res
		if set := itemSet(tc); len(set) > 0 {
			// An item's set: is rendered against its result and merged into the running
			// variables: the following items see each value by its bare name, later steps
			// through ctx.
			vars["output"], vars["result"] = res, res
			if err := w.applySet(set, vars, out, where); err != nil {
				return nil, err
			}
		}
		switch action.Do {
		case playbook.DoBreak:
			i = len(calls)
			continue
		case playbook.DoJump:
			j, ok := labels[action.To]
			if !ok {
				return nil, fmt.Errorf("%s: policy jump to unknown tool %q", where, action.To)
			}
			if attempts[j] > 100 {
				return nil, fmt.Errorf("%s: policy jump to %q looped more than 100 times", where, action.To)
			}
			i = j
			continue
		}
		i++
	}
	out.result = last
	if len(calls) > 1 {
		merged := map[string]any{}
		if m, ok := last.(map[string]any); ok {
			for k, v := range m {
				merged[k] = v
			}
		}
		for k, v := range byLabel {
			if _, taken := merged[k]; !taken {
				merged[k] = v
			}
		}
		out.result = merged
	}
	return out, nil
}

// runTool renders one tool's configuration and runs it.
func (w *Worker) runTool(ctx context.Context, cmd *eventv1.Command, tc *eventv1.ToolCall, stepInput map[string]any, vars map[string]any, where string) (any, error) {
	var cfg map[string]any
	if err := json.Unmarshal(tc.GetConfigJson(), &cfg); err != nil {
		return nil, fmt.Errorf("tool config: %w", err)
	}
	// Code is data for the interpreter and the policy is evaluated after the run: neither
	// is rendered now.
	code, hasCode := cfg["code"]
	delete(cfg, "code")
	spec := cfg["spec"]
	delete(cfg, "spec")
	delete(cfg, "set") // a pipeline item's set is rendered against its result (run)
	rc, err := w.renderer.Render(cfg, vars)
	if err != nil {
		return nil, &renderError{fmt.Errorf("%s: %w", where, err)}
	}
	rendered, _ := rc.(map[string]any)
	if rendered == nil {
		rendered = map[string]any{}
	}
	if hasCode {
		rendered["code"] = code
	}
	if spec != nil {
		rendered["spec"] = spec
	}
	input := map[string]any{}
	if len(stepInput) > 0 {
		v, err := w.renderer.Render(stepInput, vars)
		if err != nil {
			return nil, &renderError{fmt.Errorf("step %s: input: %w", cmd.GetStep(), err)}
		}
		if m, ok := v.(map[string]any); ok {
			input = m
		}
	}
	for _, key := range []string{"args", "input"} {
		if m, ok := rendered[key].(map[string]any); ok {
			for k, v := range m {
				input[k] = v
			}
		}
	}
	ctx, span := w.tracer.Start(ctx, "tool "+tc.GetKind(), trace.WithAttributes(telemetry.AttrTool.String(tc.GetKind()), telemetry.AttrStep.String(cmd.GetStep())))
	defer span.End()
	if tc.GetLabel() != "" {
		span.SetAttributes(telemetry.AttrToolLabel.String(tc.GetLabel()))
	}
	// Tools resolve credentials for the command's tenant only.
	ctx = context.WithValue(ctx, tenantKey{}, cmd.GetTenant())
	ctx = tools.WithChild(ctx, tools.ChildRef{Tenant: cmd.GetTenant(), ExecutionID: cmd.GetExecutionId(), Label: tc.GetLabel()})
	res, err := w.tools.Run(ctx, &tools.Call{Kind: tc.GetKind(), Config: rendered, Input: input, CommandID: cmd.GetCommandId(), Step: cmd.GetStep(), Log: toolLogOf(ctx, tc)})
	telemetry.ErrorStatus(span, scrubberOf(ctx).Err(err))
	return res, err
}

// tenantKey carries the tenant of the running command in a context.
type tenantKey struct{}

// scrubKey carries the running command's scrubber in a context.
type scrubKey struct{}

func withScrubber(ctx context.Context, sc *scrub.Scrubber) context.Context {
	return context.WithValue(ctx, scrubKey{}, sc)
}

// scrubberOf returns the scrubber of the command ctx runs, or nil (which scrubs nothing).
func scrubberOf(ctx context.Context) *scrub.Scrubber {
	sc, _ := ctx.Value(scrubKey{}).(*scrub.Scrubber)
	return sc
}

// newScrubber returns an empty scrubber for one command, counted in the worker's metric.
func (w *Worker) newScrubber() *scrub.Scrubber {
	if w.scrubbed == nil {
		return scrub.New(nil)
	}
	return scrub.New(w.scrubbed)
}

// scrubEvents masks the command's secrets in every field of its events that carries text
// from the tool: payloads, results, result summaries and schemas, and error messages. The
// result itself was scrubbed before it was encoded; this pass catches the rest.
func scrubEvents(sc *scrub.Scrubber, events []*eventv1.Event) []*eventv1.Event {
	if sc.Empty() {
		return events
	}
	for _, ev := range events {
		ev.PayloadJson = sc.JSON(ev.GetPayloadJson())
		ev.ResultJson = sc.JSON(ev.GetResultJson())
		if ref := ev.GetResultRef(); ref != nil {
			ref.ExtractedJson = sc.JSON(ref.GetExtractedJson())
			ref.SchemaJson = sc.String(ref.GetSchemaJson())
		}
		if e := ev.GetError(); e != nil {
			e.Message = sc.String(e.GetMessage()) // a mask is shorter than what it replaces: no clip
		}
	}
	return events
}

// envelope is the output policies see: {status: ok|error, data, error: {message, retryable}}.
func envelope(res any, err error) map[string]any {
	if err == nil {
		return map[string]any{"status": "ok", "data": res}
	}
	retryable := false
	var te *tools.Error
	if errors.As(err, &te) {
		retryable = te.Retryable
	}
	return map[string]any{"status": "error", "data": res, "error": map[string]any{"message": err.Error(), "retryable": retryable}}
}

// itemSet reads a pipeline item's set: mapping (nil when it has none).
func itemSet(tc *eventv1.ToolCall) map[string]any {
	var cfg struct {
		Set map[string]any `json:"set"`
	}
	if tc.GetLabel() == "" || json.Unmarshal(tc.GetConfigJson(), &cfg) != nil {
		return nil
	}
	return cfg.Set
}

// policyOf reads a tool's spec.policy.
func policyOf(tc *eventv1.ToolCall) (*playbook.Policy, bool) {
	var cfg struct {
		Spec struct {
			Policy json.RawMessage `json:"policy"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(tc.GetConfigJson(), &cfg); err != nil || len(cfg.Spec.Policy) == 0 {
		return nil, false
	}
	p, err := playbook.ParsePolicy(cfg.Spec.Policy)
	if err != nil || p == nil {
		return nil, false
	}
	return p, true
}

// decidePolicy picks the action for a tool's output: the first rule whose when is true, else
// the else rule; without a match the outcome decides (error: fail, success: continue).
func (w *Worker) decidePolicy(p *playbook.Policy, vars map[string]any, runErr error, where string) (playbook.Action, error) {
	if p != nil {
		for _, r := range p.Rules {
			if r.Else {
				return withDefault(r.Then), nil
			}
			ok, err := w.renderer.Truthy(r.When, vars)
			if err != nil {
				return playbook.Action{}, fmt.Errorf("%s: policy condition %q failed to evaluate: %w", where, r.When, err)
			}
			if ok {
				return withDefault(r.Then), nil
			}
		}
	}
	if runErr != nil {
		return playbook.Action{Do: playbook.DoFail}, nil
	}
	return playbook.Action{Do: playbook.DoContinue}, nil
}

func withDefault(a playbook.Action) playbook.Action {
	if a.Do == "" {
		a.Do = playbook.DoContinue
	}
	return a
}

// applySet renders a policy set: block; ctx.* (and unscoped) keys become ctx updates visible
// to later tools and to the following steps, iter.* keys iteration updates.
func (w *Worker) applySet(set map[string]any, vars map[string]any, out *outcome, where string) error {
	for k, v := range set {
		rv, err := w.renderer.Render(v, vars)
		if err != nil {
			return &renderError{fmt.Errorf("%s: set %s: %w", where, k, err)}
		}
		scope, key := "ctx", k
		switch {
		case strings.HasPrefix(k, "ctx."):
			key = strings.TrimPrefix(k, "ctx.")
		case strings.HasPrefix(k, "iter."):
			scope, key = "iter", strings.TrimPrefix(k, "iter.")
		case strings.HasPrefix(k, "step."):
			key = strings.TrimPrefix(k, "step.")
		}
		if out.set[scope] == nil {
			out.set[scope] = map[string]any{}
		}
		out.set[scope][key] = rv
		if m, ok := vars[scope].(map[string]any); ok {
			m[key] = rv
		}
		if scope == "ctx" {
			vars[key] = rv
		}
	}
	return nil
}

// backoff is the delay before retry number attempt (1-based) of a policy.
func backoff(a playbook.Action, attempt int) time.Duration {
	d := time.Duration(a.Delay * float64(time.Second))
	switch a.Backoff {
	case "linear":
		d *= time.Duration(attempt)
	case "exponential":
		d *= time.Duration(1) << min(attempt-1, 16)
	}
	return min(d, 5*time.Minute)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// artifactTool loads a stored result (kind artifact, action get) for a step that needs the
// whole payload of an earlier step's result held by reference.
type artifactTool struct{ w *Worker }

// Run implements tools.Tool.
func (a artifactTool) Run(ctx context.Context, c *tools.Call) (any, error) {
	action, _ := c.Config["action"].(string)
	if action != "" && action != "get" {
		return nil, &tools.Error{Msg: fmt.Sprintf("artifact: action %q is not supported (get)", action)}
	}
	ref := ""
	for _, src := range []map[string]any{c.Input, c.Config} {
		for _, k := range []string{"result_ref", "ref", "uri"} {
			if v, ok := src[k].(string); ok && v != "" && ref == "" {
				ref = v
			}
		}
	}
	if ref == "" {
		return nil, &tools.Error{Msg: "artifact: input.result_ref is required (for example {{ step._ref }})"}
	}
	tenant, _ := ctx.Value(tenantKey{}).(string)
	body, err := a.w.fetch(ctx, tenant, ref)
	if err != nil {
		return nil, &tools.Error{Msg: fmt.Sprintf("artifact: load %s: %s", ref, status.Convert(err).Message()), Retryable: status.Code(err) == codes.Unavailable}
	}
	var v any
	if err := domain.DecodeJSON(body, &v); err != nil {
		return nil, &tools.Error{Msg: fmt.Sprintf("artifact: %s is not JSON: %v", ref, err)}
	}
	return v, nil
}

// admit re-checks a command's origin against this worker's pool: a system worker runs
// only commands of system/ playbooks, and only system workers run system_* tools, so a
// command pinned to the wrong pool is refused rather than run with the wrong privileges.
func (w *Worker) admit(cmd *eventv1.Command) error {
	system := strings.HasPrefix(cmd.GetPlaybookPath(), "system/")
	if w.cfg.Pool == "system" && !system {
		return fmt.Errorf("step %s: the system pool refuses a command of %q, which is not a system/ playbook", cmd.GetStep(), cmd.GetPlaybookPath())
	}
	if w.cfg.Pool != "system" && system {
		return fmt.Errorf("step %s: system/ playbook commands run only on the system pool, not %q", cmd.GetStep(), w.cfg.Pool)
	}
	for _, t := range cmd.GetTools() {
		if strings.HasPrefix(t.GetKind(), "system_") && w.cfg.Pool != "system" {
			return fmt.Errorf("step %s: tool kind %s runs only on the system pool", cmd.GetStep(), t.GetKind())
		}
	}
	return nil
}

// systemInfo (kind system_info) reports the worker that ran it: a privileged tool of the
// system pool.
type systemInfo struct{ w *Worker }

// Run implements tools.Tool.
func (s systemInfo) Run(context.Context, *tools.Call) (any, error) {
	kinds := make([]string, 0, len(s.w.tools))
	for k := range s.w.tools {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return map[string]any{"pool": s.w.cfg.Pool, "worker": s.w.cfg.ID, "tools": kinds}, nil
}
