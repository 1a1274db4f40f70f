// Package worker is the NoETL worker service: it claims commands of its pool from
// NOETL_COMMANDS, renders their templates, runs the tools and publishes the outcome as
// events. A command is acked only after its outcome is published.
package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/platform/app"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/platform/telemetry"
	"github.com/noetl/noetl/internal/playbook/template"
	"github.com/noetl/noetl/services/worker/internal/consume"
	"github.com/noetl/noetl/services/worker/internal/execute"
	"github.com/noetl/noetl/services/worker/internal/results"
	"github.com/noetl/noetl/services/worker/internal/scrub"
	"github.com/noetl/noetl/services/worker/internal/systools"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// Config is the worker's configuration.
type Config struct {
	AdminAddr string
	NATSURL   string
	// NATSInProcess is the embedded NATS server of the same process (noetl dev), connected
	// to without a socket; NATSURL then only names it.
	NATSInProcess nats.InProcessConnProvider
	Pool          string
	Concurrency   int
	Partitions    int
	Python        string
	// ToolEnv names the worker's environment variables python and shell tools also see.
	ToolEnv string
	// ScriptDir is the directory a python tool's script: paths are read from (empty: file
	// scripts are refused; URLs are fetched through the HTTP egress policy either way).
	ScriptDir string
	// Shell lets this worker run kind: shell (arbitrary commands on its machine); a
	// worker of the system pool runs it regardless.
	Shell bool
	ID    string
	// OrchestratorAddr is where credentials are resolved (CredentialService).
	OrchestratorAddr string
	// StatebuilderAddr is where the system tools purge snapshots and read the noetl schema.
	StatebuilderAddr string
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
	// deadline (zero: results.DefaultRetry).
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
	// Wasm configures kind: wasm (wasm.go).
	Wasm WasmConfig
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
	fs.String(&c.ScriptDir, "script-dir", "NOETL_WORKER_SCRIPT_DIR", "", "directory of the scripts python steps name by path (script: jobs/x.py); empty: only inline code and script URLs", checkScriptDir)
	fs.Bool(&c.Shell, "shell", tools.ShellEnableEnv, false, "run kind: shell steps (arbitrary commands on this machine; the system pool always runs them)")
	fs.String(&c.ID, "id", "NOETL_WORKER_ID", "", "worker id reported in events (default: host name)")
	fs.String(&c.OrchestratorAddr, "orchestrator", "NOETL_ORCHESTRATOR_ADDR", "127.0.0.1:50061", "orchestrator gRPC address (credential resolution)")
	fs.String(&c.ResultstoreAddr, "resultstore", "NOETL_RESULTSTORE_ADDR", "127.0.0.1:50065", "resultstore gRPC address")
	fs.String(&c.StatebuilderAddr, "statebuilder", "NOETL_STATEBUILDER_ADDR", "127.0.0.1:50062", "statebuilder gRPC address (the system tools: snapshots of purged executions, read-only queries)")
	fs.String(&c.FlightAddr, "flight", "NOETL_RESULTSTORE_FLIGHT_ADDR", "127.0.0.1:50066", "resultstore Arrow Flight address (tables are uploaded there)")
	fs.Int(&c.InlineMaxBytes, "inline-max", "NOETL_INLINE_RESULT_MAX_BYTES", 64<<10, "largest result carried inline in events; larger ones go to the resultstore", config.Positive)
	fs.Duration(&c.ResultStoreRetry, "result-store-retry", "NOETL_WORKER_RESULT_STORE_RETRY", results.DefaultRetry, "how long storing or loading a result is retried while the resultstore cannot be reached (a restart); a step fails only after it", config.Positive)
	fs.String(&c.HTTPEgress, "http-egress", "NOETL_HTTP_EGRESS", HTTPEgressPublic, "addresses the http tool may reach: public, loopback (public and loopback) or private (public, loopback and private ranges); never link-local or cloud metadata", CheckHTTPEgress)
	fs.Bool(&c.AllowPrivateHTTP, "allow-private-http", "NOETL_HTTP_ALLOW_PRIVATE", false, "deprecated: true means --http-egress private")
	fs.Secret(&c.InternalSecret, "internal-secret", "NOETL_INTERNAL_SECRET", "", "secret shared by the services that signs principals in internal calls (at least 32 bytes)")
	c.Trace.Flags(fs)
	c.Wasm.flags(fs)
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

// checkScriptDir refuses a script directory that is not an existing directory.
func checkScriptDir(s string) error {
	if s == "" {
		return nil
	}
	fi, err := os.Stat(s)
	if err != nil {
		return errors.New("not an existing directory")
	}
	if !fi.IsDir() {
		return errors.New("not a directory")
	}
	return nil
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
	nc, js, err := natsx.Connect(cfg.NATSURL, "worker-"+cfg.Pool, natsx.InProcess(cfg.NATSInProcess)...)
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
		tenant := tools.TenantOf(ctx)
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
		scrub.FromContext(ctx).AddCredential(data)
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
	store := &results.Store{
		Results: rsv1.NewResultStoreServiceClient(rconn), Flight: fclient,
		InlineMaxBytes: cfg.InlineMaxBytes, Retry: cfg.ResultStoreRetry, Log: log,
		Retries: prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_worker_resultstore_retries_total",
			Help:        "Calls to the resultstore (storing or loading a result) tried again because it could not be reached.",
			ConstLabels: prometheus.Labels{"pool": cfg.Pool}}),
	}
	sconn, err := grpcx.DialSigned(cmp.Or(cfg.StatebuilderAddr, "127.0.0.1:50062"), trust.Service("worker"), tel.DialOption())
	if err != nil {
		return err
	}
	defer func() { _ = sconn.Close() }()
	sys := &systools.Deps{NC: nc, Trust: trust, Orchestrator: orchv1.NewSystemServiceClient(conn), Results: store.Results, State: sbv1.NewStateServiceClient(sconn)}
	table, keychain, closeTools := toolTable(cfg, egress, resolve, orchv1.NewOrchestratorServiceClient(conn), store.Fetch, sys,
		wasmDeps{plugins: orchv1.NewPluginServiceClient(conn), js: js})
	defer closeTools()
	metrics := execute.NewMetrics(cfg.Pool)
	exec := &execute.Executor{Pool: cfg.Pool, Renderer: template.NewRenderer(), Tools: table, Keychain: keychain,
		Results: store, Log: log, Tracer: tel.Tracer(), Metrics: metrics}
	consumer := &consume.Consumer{NC: nc, JS: js, Pool: cfg.Pool, Concurrency: cfg.Concurrency, Partitions: cfg.Partitions,
		DrainTimeout: cfg.DrainTimeout, Exec: exec, Log: log, Tracer: tel.Tracer(),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "noetl_worker_in_flight", Help: "Commands being run.", ConstLabels: prometheus.Labels{"pool": cfg.Pool}}),
		OutcomeRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_worker_outcome_publish_retries_total",
			Help: "Publishes of a command's outcome tried again after a failure (the command is handed back after 30 s of them).", ConstLabels: prometheus.Labels{"pool": cfg.Pool}})}
	limit := prometheus.NewGauge(prometheus.GaugeOpts{Name: "noetl_worker_concurrency", Help: "Commands the worker runs at once at most (NOETL_WORKER_CONCURRENCY).", ConstLabels: prometheus.Labels{"pool": cfg.Pool}})
	limit.Set(float64(cfg.Concurrency))
	srv.Registry.MustRegister(metrics.Collectors()...)
	srv.Registry.MustRegister(consumer.InFlight, consumer.OutcomeRetries, store.Retries, limit)
	lag := natsx.NewLagMonitor(js, natsx.StreamCommands, consume.DurableName(cfg.Pool), cfg.Pool, cfg.LagPoll, srv.Registry, log)
	log.Info("worker consuming", slog.String("admin", srv.AdminAddr()), slog.String("http_egress", egress.String()))
	return srv.Run(ctx, 30*time.Second, consumer.Run, lag.Run)
}

// toolTable builds the tools a worker of cfg runs, by kind: playbook.WorkerToolKinds, and
// playbook.SystemToolKinds on the system pool (a test keeps the two lists equal), and the
// keychain that resolves commands' keychain entries. fetch loads stored results (kind
// artifact); sys is what the system tools call (package systools). The returned func
// releases the tools' pooled connections. wd is what kind: wasm needs (wasm.go).
func toolTable(cfg Config, egress tools.Egress, resolve tools.CredentialResolver, orch orchv1.OrchestratorServiceClient, fetch func(ctx context.Context, tenant, uri string) ([]byte, error), sys *systools.Deps, wd wasmDeps) (tools.Registry, *tools.Keychain, func()) {
	pg := &tools.Postgres{Resolve: resolve}
	httpTool := &tools.HTTP{Egress: egress, Resolve: resolve}
	natsTool := &tools.NATS{Egress: egress, Resolve: resolve, Register: scrub.Register}
	r := tools.Registry{
		"noop":     tools.Noop{},
		"python":   &tools.Python{Interpreter: cfg.Python, PassEnv: tools.ParsePassEnv(cfg.ToolEnv), WorkerID: cfg.ID, ScriptDir: cfg.ScriptDir, HTTP: httpTool},
		"postgres": pg,
		"duckdb":   &tools.DuckDB{Resolve: resolve},
		"http":     httpTool,
		"playbook": &tools.Playbook{Orchestrator: orch},
		"artifact": tools.Artifact{Fetch: fetch},
		"shell":    &tools.Shell{Enabled: cfg.Shell || cfg.Pool == "system", PassEnv: tools.ParsePassEnv(cfg.ToolEnv)},
		"secrets":  &tools.Secrets{Resolve: resolve, Register: scrub.Register},
		"nats":     natsTool,
	}
	wasmTool := newWasmTool(cfg, httpTool, fetch, wd)
	r["wasm"] = wasmTool
	keychain := &tools.Keychain{Resolve: resolve, Register: scrub.Register, HTTP: httpTool}
	if cfg.Pool == "system" {
		r["system_info"] = tools.SystemInfo{Pool: cfg.Pool, Worker: cfg.ID, Tools: &r}
	}
	systools.Register(r, cfg.Pool, sys)
	return r, keychain, func() {
		pg.Close()
		httpTool.CloseIdleConnections()
		natsTool.Close()
		_ = wasmTool.Close(context.Background())
	}
}
