// Package orchestrator is the NoETL orchestrator service: the playbook catalog, execution
// start and cancel, credential resolution, and the decision loop driven by commit notices.
// It holds no authoritative state. This root holds only Config, Run and the wiring; each
// gRPC service lives in its room under internal/ (playbooks, executions, vars, credentials,
// apikeys, watch, plugin, schedule, trigger, systembook) and the decision loop in engine.
package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/decisionlink"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/app"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/platform/telemetry"
	"github.com/noetl/noetl/internal/playbook/template"
	"github.com/noetl/noetl/internal/schema"
	"github.com/noetl/noetl/services/orchestrator/internal/apikeys"
	"github.com/noetl/noetl/services/orchestrator/internal/catalog"
	"github.com/noetl/noetl/services/orchestrator/internal/credentials"
	"github.com/noetl/noetl/services/orchestrator/internal/decide"
	"github.com/noetl/noetl/services/orchestrator/internal/engine"
	"github.com/noetl/noetl/services/orchestrator/internal/executions"
	"github.com/noetl/noetl/services/orchestrator/internal/playbooks"
	"github.com/noetl/noetl/services/orchestrator/internal/plugin"
	"github.com/noetl/noetl/services/orchestrator/internal/schedule"
	"github.com/noetl/noetl/services/orchestrator/internal/systembook"
	"github.com/noetl/noetl/services/orchestrator/internal/trigger"
	"github.com/noetl/noetl/services/orchestrator/internal/vars"
	"github.com/noetl/noetl/services/orchestrator/internal/watch"
)

// Config is the orchestrator's configuration.
type Config struct {
	GRPCAddr  string
	AdminAddr string
	NATSURL   string
	// NATSInProcess is the embedded NATS server of the same process (noetl dev), connected
	// to without a socket; NATSURL then only names it.
	NATSInProcess nats.InProcessConnProvider
	// PostgresURL connects as the orchestrator's own login role, a member of noetl_orchestrator
	// (`noetl migrate` creates it). The orchestrator refuses to start as a role that holds
	// other privileges, or on a schema older than it needs.
	PostgresURL      string
	StatebuilderAddr string
	// ResultstoreAddr is where render contexts too large for a command are stored.
	ResultstoreAddr string
	Partitions      int
	Shards          int
	StartTimeout    time.Duration
	// ReconcileEvery and StaleAfter tune the reconciler of stalled executions.
	ReconcileEvery time.Duration
	StaleAfter     time.Duration
	// ScheduleEvery is how often the scheduler looks for due schedules (package schedule).
	ScheduleEvery time.Duration
	// EncryptionKey is the base64 of the 32-byte AES-256 key that seals credentials at
	// rest. Without it the orchestrator runs, but storing and resolving credentials fail
	// with FailedPrecondition.
	EncryptionKey string
	// InternalSecret is the secret shared by the services that signs principals in internal
	// calls (package auth); required.
	InternalSecret string
	// BootstrapAPIKey, when set, is stored on start (unless its id already is) as an API key
	// of tenant "default" with the admin and system roles: the first key of a deployment,
	// from which the others are created. `noetl dev` passes its admin.key.
	BootstrapAPIKey string
	// MaxWatches bounds concurrent WatchExecution streams; past it a watch is refused with
	// ResourceExhausted. Zero means watch.DefaultMaxWatches.
	MaxWatches int
	// MaxStepEntries and MaxEvents bound every execution: how many times one step may be
	// entered, and how many events the execution may have (zero: decide's defaults,
	// 10,000 and 1,000,000). They are ceilings: a playbook's executor.spec.policy.limits
	// may lower them for its executions, never raise them.
	MaxStepEntries int
	MaxEvents      int
	// TenantLimits sets them for particular tenants, as JSON:
	// {"acme": {"max_step_entries": 100, "max_events": 50000}}; a tenant's value replaces
	// the global one, higher or lower (engine.ParseTenantLimits).
	TenantLimits string
	// SystemPlaybooks registers the system playbooks (package systembook) and their
	// schedules at start.
	SystemPlaybooks bool
	// Retention is how long system/retention keeps a terminal execution (zero:
	// DefaultRetention); TenantRetention sets it for particular tenants, as JSON
	// {"acme": "168h"}.
	Retention       time.Duration
	TenantRetention string

	// StreamReplicas is the JetStream replication factor of the streams this service
	// declares (zero: natsx.EnsureStreams decides).
	StreamReplicas int
	// Trace chooses where spans go.
	Trace telemetry.Config

	// DecisionLink, when set, serves the engine's decisions to a materializer in this
	// process by a call (an in-process mesh; decisionlink) besides DecisionService.
	DecisionLink *decisionlink.Link `json:"-"`

	// GRPCListener and AdminListener, when set, are used instead of the addresses
	// (in-process meshes).
	GRPCListener  net.Listener `json:"-"`
	AdminListener net.Listener `json:"-"`
	// Ready, when set, is called once the service serves.
	Ready func(grpcAddr string) `json:"-"`
}

// errorCodes are the orchestrator's sentinel errors and the gRPC codes its one error
// interceptor (grpcx.Errors, for unary and streaming calls) answers them with.
var errorCodes = slices.Concat(credentials.Codes, apikeys.Codes, []grpcx.Sentinel{
	{Err: catalog.ErrNotFound, Code: codes.NotFound},
	{Err: plugin.ErrNotFound, Code: codes.NotFound},
	{Err: trigger.ErrNotFound, Code: codes.NotFound},
})

// orchestratorService is OrchestratorService assembled from its rooms: the catalog's RPCs
// (package playbooks), the executions' (package executions) and their variables' (package
// vars). The nested unimplemented sits one level deeper than the rooms' methods, so theirs
// win and an RPC added to the proto answers Unimplemented.
type orchestratorService struct {
	*playbookRPCs
	*executionRPCs
	*varsRPCs
	unimplemented
}

type (
	playbookRPCs  = playbooks.Service
	executionRPCs = executions.Service
	varsRPCs      = vars.Service
	unimplemented struct {
		orchv1.UnimplementedOrchestratorServiceServer
	}
)

// DefaultRetention is how long system/retention keeps a terminal execution by default.
const DefaultRetention = 30 * 24 * time.Hour

// Flags binds the configuration to flags and NOETL_* env vars.
func (c *Config) Flags(fs *config.FlagSet) {
	fs.String(&c.GRPCAddr, "grpc", "NOETL_ORCHESTRATOR_GRPC", "127.0.0.1:50061", "gRPC listen address")
	fs.String(&c.AdminAddr, "admin", "NOETL_ORCHESTRATOR_ADMIN", "127.0.0.1:9061", "admin HTTP listen address (/livez, /readyz, /metrics)")
	fs.String(&c.NATSURL, "nats", "NOETL_NATS_URL", "nats://127.0.0.1:4222", "NATS URL")
	fs.Secret(&c.PostgresURL, "pg", "NOETL_PG_URL", "", "Postgres URL, as the orchestrator's own login role (a member of noetl_orchestrator)")
	fs.String(&c.StatebuilderAddr, "statebuilder", "NOETL_STATEBUILDER_ADDR", "127.0.0.1:50062", "statebuilder gRPC address")
	fs.String(&c.ResultstoreAddr, "resultstore", "NOETL_RESULTSTORE_ADDR", "127.0.0.1:50065", "resultstore gRPC address (large command contexts)")
	fs.Int(&c.Partitions, "partitions", "NOETL_PARTITIONS", natsx.DefaultPartitions, "execution partitions", config.Positive)
	fs.Int(&c.StreamReplicas, "stream-replicas", "NOETL_STREAM_REPLICAS", 1, "JetStream replicas of the three streams (3 on a clustered NATS)", config.Positive)
	fs.Int(&c.Shards, "shards", "NOETL_ORCHESTRATOR_SHARDS", 16, "decision goroutines", config.Positive)
	fs.Duration(&c.StartTimeout, "start-timeout", "NOETL_START_TIMEOUT", 15*time.Second, "how long a start waits for its commit", config.Positive)
	fs.Duration(&c.ReconcileEvery, "reconcile-every", "NOETL_RECONCILE_EVERY", 10*time.Second, "how often stalled executions are looked for", config.Positive)
	fs.Duration(&c.StaleAfter, "stale-after", "NOETL_STALE_AFTER", 30*time.Second, "how long an execution's log may stay still before it is re-driven", config.Positive)
	fs.Duration(&c.ScheduleEvery, "schedule-every", "NOETL_SCHEDULE_EVERY", time.Second, "how often the scheduler looks for due schedules", config.Positive)
	fs.Secret(&c.EncryptionKey, "encryption-key", "NOETL_ENCRYPTION_KEY", "", "base64 of the 32-byte key that encrypts credentials at rest")
	fs.Secret(&c.InternalSecret, "internal-secret", "NOETL_INTERNAL_SECRET", "", "secret shared by the services that signs principals in internal calls (at least 32 bytes)")
	fs.Int(&c.MaxWatches, "max-watches", "NOETL_ORCHESTRATOR_MAX_WATCHES", watch.DefaultMaxWatches, "most concurrent WatchExecution streams", config.Positive)
	fs.Int(&c.MaxStepEntries, "max-step-entries", "NOETL_MAX_STEP_ENTRIES", decide.DefaultMaxStepEntries, "most entries of one step in one execution (a playbook may lower it)", config.Positive)
	fs.Int(&c.MaxEvents, "max-events", "NOETL_MAX_EVENTS", decide.DefaultMaxEvents, "most events of one execution (a playbook may lower it)", config.Positive)
	fs.String(&c.TenantLimits, "tenant-limits", "NOETL_TENANT_LIMITS", "", `per-tenant limits as JSON: {"tenant": {"max_step_entries": N, "max_events": N}}`, func(s string) error {
		_, err := engine.ParseTenantLimits(s)
		return err
	})
	fs.Bool(&c.SystemPlaybooks, "system-playbooks", "NOETL_SYSTEM_PLAYBOOKS", true, "register the system playbooks (system/retention, system/cleanup, system/stalled_report) and their schedules at start")
	fs.Duration(&c.Retention, "retention", "NOETL_RETENTION", DefaultRetention, "how long system/retention keeps a terminal execution (its events, snapshots and results) after it ended; at least 24h", systembook.CheckRetention)
	fs.String(&c.TenantRetention, "tenant-retention", "NOETL_TENANT_RETENTION", "", `per-tenant retention as JSON: {"tenant": "168h"}`, func(s string) error {
		_, err := systembook.ParseTenantRetention(s)
		return err
	})
	c.Trace.Flags(fs)
	fs.Secret(&c.BootstrapAPIKey, "bootstrap-api-key", "NOETL_BOOTSTRAP_API_KEY", "", "API key (noetl_<id>_<secret>) stored on start as an admin and system key of tenant default")
}

// ParseFlags reads the orchestrator's configuration from args and the NOETL_* environment. A
// malformed or out-of-range value is an error naming the flag or variable and the value.
// printed reports that --print-config or -h printed instead of a start (exit 0).
func ParseFlags(args []string) (cfg Config, printed bool, err error) {
	fs := config.New("orchestrator")
	cfg.Flags(fs)
	printed, err = fs.Parse(args)
	return cfg, printed, err
}

// warmReads are the reads a new connection of the orchestrator's pool makes before it
// serves calls (pgxext.WarmUp): one by a key no row has in each table a start or a
// command's credentials read (the catalog, API keys, credentials).
var warmReads = []string{
	`SELECT 1 FROM noetl.catalog WHERE tenant = '' AND path = ''`,
	`SELECT 1 FROM noetl.api_key WHERE id = ''`,
	`SELECT 1 FROM noetl.credential WHERE tenant = '' AND name = ''`,
}

// Run runs the orchestrator until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	log = log.With(slog.String("service", "orchestrator"))
	if err := config.Required(&cfg, "PostgresURL", "NATSURL", "StatebuilderAddr"); err != nil {
		return err
	}
	tenantLimits, err := engine.ParseTenantLimits(cfg.TenantLimits)
	if err != nil {
		return fmt.Errorf("NOETL_TENANT_LIMITS: %w", err)
	}
	limits := engine.Limits{MaxStepEntries: int64(cfg.MaxStepEntries), MaxEvents: int64(cfg.MaxEvents), Tenants: tenantLimits}
	tenantRetention, err := systembook.ParseTenantRetention(cfg.TenantRetention)
	if err != nil {
		return fmt.Errorf("NOETL_TENANT_RETENTION: %w", err)
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if err := systembook.CheckRetention(cfg.Retention); err != nil {
		return fmt.Errorf("NOETL_RETENTION: %w", err)
	}
	trust, err := auth.NewTrust(cfg.InternalSecret)
	if err != nil {
		return err
	}
	tel, err := telemetry.Setup(ctx, "orchestrator", cfg.Trace)
	if err != nil {
		return err
	}
	defer tel.Close(log)
	var sealer *credentials.Sealer
	if cfg.EncryptionKey != "" {
		key, err := credentials.ParseKey(cfg.EncryptionKey)
		if err != nil {
			return err
		}
		if sealer, err = credentials.NewSealer(key); err != nil {
			return err
		}
	} else {
		log.Warn("NOETL_ENCRYPTION_KEY is not set: storing and resolving credentials is disabled")
	}
	db, err := pgxext.Open(ctx, cfg.PostgresURL, 16, pgxext.WarmUp(warmReads...))
	if err != nil {
		return err
	}
	defer db.Close()
	if err := schema.Check(ctx, db, schema.Orchestrator); err != nil {
		return err
	}
	creds := &credentials.Service{Store: credentials.NewStore(db), Sealer: sealer}
	if sealer != nil {
		n, err := creds.SealPlaintextCredentials(ctx)
		if err != nil {
			return err
		}
		if n > 0 {
			log.Info("sealed plaintext credentials", slog.Int("count", n))
		}
	}
	nc, js, err := natsx.Connect(cfg.NATSURL, "orchestrator", natsx.InProcess(cfg.NATSInProcess)...)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := natsx.EnsureStreams(ctx, js, natsx.StreamConfig{Replicas: cfg.StreamReplicas}); err != nil {
		return err
	}
	var results rsv1.ResultStoreServiceClient
	if cfg.ResultstoreAddr != "" {
		rconn, err := grpcx.DialSigned(cfg.ResultstoreAddr, trust.Service("orchestrator"), tel.DialOption())
		if err != nil {
			return err
		}
		defer func() { _ = rconn.Close() }()
		results = rsv1.NewResultStoreServiceClient(rconn)
	}
	conn, err := grpcx.DialSigned(cfg.StatebuilderAddr, trust.Service("orchestrator"), tel.DialOption())
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	state := sbv1.NewStateServiceClient(conn)

	grpcLis, err := app.Listen(cfg.GRPCListener, cfg.GRPCAddr)
	if err != nil {
		return err
	}
	adminLis, err := app.Listen(cfg.AdminListener, cfg.AdminAddr)
	if err != nil {
		return err
	}
	// A plug-in's registration carries its module (plugin.MaxModuleBytes at most).
	srv := app.NewServer("orchestrator", log, grpcLis, adminLis, append(auth.ServerOptions(trust), tel.ServerOption(), grpc.MaxRecvMsgSize(plugin.MaxModuleBytes+1<<20))...)
	srv.MapErrors(errorCodes...)
	cat := catalog.New(db, template.NewRenderer(), 1024)
	plugins := &plugin.Service{DB: db}
	orchv1.RegisterPluginServiceServer(srv.GRPC, plugins)
	books := &playbooks.Service{Catalog: cat, Plugins: plugins}
	execs := &executions.Service{Catalog: cat, NC: nc, JS: js, State: state, Partitions: cfg.Partitions, StartTimeout: cfg.StartTimeout, Waiters: make(chan struct{}, 10000)}
	orchv1.RegisterOrchestratorServiceServer(srv.GRPC, &orchestratorService{
		playbookRPCs:  books,
		executionRPCs: execs,
		varsRPCs:      &vars.Service{NC: nc, JS: js, State: state, Partitions: cfg.Partitions, CommitTimeout: cfg.StartTimeout},
	})
	orchv1.RegisterCredentialServiceServer(srv.GRPC, creds)
	keys := &apikeys.Service{Store: apikeys.NewStore(db)}
	orchv1.RegisterApiKeyServiceServer(srv.GRPC, keys)
	watcher := watch.NewWatcher(nc, state, cfg.MaxWatches)
	orchv1.RegisterWatchServiceServer(srv.GRPC, watcher)
	schedules := &schedule.Service{DB: db}
	orchv1.RegisterScheduleServiceServer(srv.GRPC, schedules)
	shelf := &systembook.Shelf{Catalog: cat, Schedules: schedules, Log: log,
		Settings: systembook.Settings{Tenant: systembook.PlatformTenant, Retention: cfg.Retention, TenantRetention: tenantRetention}}
	orchv1.RegisterSystemServiceServer(srv.GRPC, shelf)
	books.Registered = shelf.Registered
	if cfg.SystemPlaybooks {
		if err := shelf.Register(ctx); err != nil {
			return err
		}
	}
	ticks := &schedule.Loop{DB: db, Start: startTick(execs), Every: cfg.ScheduleEvery, Log: log}
	triggers := &trigger.Service{DB: db, JS: js, Start: startFire(execs)}
	if sealer != nil {
		triggers.Sealer = sealer
	}
	orchv1.RegisterTriggerServiceServer(srv.GRPC, triggers)
	deliveries := &trigger.Loop{DB: db, JS: js, Start: startFire(execs), Log: log}
	if cfg.BootstrapAPIKey != "" {
		created, err := keys.EnsureAPIKey(ctx, cfg.BootstrapAPIKey, "default", []string{auth.RoleAdmin, auth.RoleSystem}, "bootstrap")
		if err != nil {
			return err
		}
		if created {
			log.Info("bootstrap API key stored")
		}
	}
	srv.AddCheck("postgres", pgxext.Check(db))
	srv.AddCheck("nats", natsx.Check(nc))
	eng := engine.New(engine.Config{Results: results, Partitions: cfg.Partitions, Shards: cfg.Shards, ReconcileEvery: cfg.ReconcileEvery, StaleAfter: cfg.StaleAfter, Tracer: tel.Tracer(), Limits: limits}, log, js, state, cat, srv.Registry)
	orchv1.RegisterDecisionServiceServer(srv.GRPC, &engine.DecisionServer{Engine: eng})
	if cfg.DecisionLink != nil {
		defer cfg.DecisionLink.Serve(eng)()
	}
	execs.Finals = eng // the states it decided ends on, for the waits (engine/final.go)
	if cfg.Ready != nil {
		cfg.Ready(srv.GRPCAddr())
	}
	log.Info("orchestrator serving", slog.String("grpc", srv.GRPCAddr()), slog.String("admin", srv.AdminAddr()))
	return srv.Run(ctx, 10*time.Second, eng.Run, eng.RunTimers, eng.Reconcile, watcher.Run, ticks.Run, deliveries.Run)
}

// startTick starts a schedule's tick through StartExecution, as the schedule's own
// principal in its tenant (with the system role for a system/ playbook, which only the
// system role may schedule), with the tick's idempotency key and the label
// schedule=<name>.
func startTick(api *executions.Service) schedule.Starter {
	return func(ctx context.Context, t schedule.Tick) (string, error) {
		p := &auth.Principal{Tenant: t.Tenant, Subject: "schedule:" + t.Name, Roles: []string{auth.RoleOperator}}
		if domain.PoolFor(t.Path) == "system" {
			p.Roles = append(p.Roles, auth.RoleSystem)
		}
		resp, err := api.StartExecution(auth.NewContext(ctx, p), &orchv1.StartExecutionRequest{
			Tenant: t.Tenant, Path: t.Path, Version: t.Version, WorkloadJson: t.Workload, IdempotencyKey: t.Key,
			Labels: map[string]string{"schedule": t.Name},
		})
		if err != nil {
			return "", err
		}
		return resp.GetExecutionId(), nil
	}
}

// startFire starts a trigger's delivery through StartExecution, as the trigger's own
// principal in its tenant (with the system role for a system/ playbook, which only the
// system role may trigger), with the delivery's idempotency key and the label
// trigger=<name>.
func startFire(api *executions.Service) trigger.Starter {
	return func(ctx context.Context, f trigger.Fire) (string, error) {
		p := &auth.Principal{Tenant: f.Tenant, Subject: "trigger:" + f.Name, Roles: []string{auth.RoleOperator}}
		if domain.PoolFor(f.Path) == "system" {
			p.Roles = append(p.Roles, auth.RoleSystem)
		}
		resp, err := api.StartExecution(auth.NewContext(ctx, p), &orchv1.StartExecutionRequest{
			Tenant: f.Tenant, Path: f.Path, Version: f.Version, WorkloadJson: f.Workload, IdempotencyKey: f.Key,
			Labels: map[string]string{"trigger": f.Name},
		})
		if err != nil {
			return "", err
		}
		return resp.GetExecutionId(), nil
	}
}
