// Package materializer is the NoETL materializer service, the only writer of the event
// log. It consumes the partitions of NOETL_EVENTS it holds leases on (all of them when it
// runs alone), commits each batch in one transaction, then forwards committed commands to
// NOETL_COMMANDS and commit notices to NOETL_COMMITTED, and only then moves the
// partition's cursor past the batch (in the next batch's transaction, or on its own when
// the partition has nothing more to commit). A crash anywhere in between loses nothing
// (the next owner reads the batch again from the cursor) and duplicates nothing (the log
// dedupes by event id), and neither does a second replica consuming a partition by mistake.
package materializer

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/decisionlink"
	"github.com/noetl/noetl/internal/platform/app"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/platform/telemetry"
	"github.com/noetl/noetl/internal/schema"
	"github.com/noetl/noetl/internal/sysop"
	"github.com/noetl/noetl/services/materializer/internal/decider"
	"github.com/noetl/noetl/services/materializer/internal/lease"
	"github.com/noetl/noetl/services/materializer/internal/partition"
	"github.com/noetl/noetl/services/materializer/internal/replica"
	"github.com/noetl/noetl/services/materializer/internal/writer"
)

// Defaults of the batch, saturation and lease settings.
const (
	// DefaultBatchSize bounds a commit. A batch takes what has arrived, never waiting for
	// more, so the bound only matters under load, where a larger batch costs less per
	// event: fewer commit notices (one per execution per batch), round trips and
	// statements (the ingest bench spends about a third less CPU per event at 4096 than at
	// 1024).
	DefaultBatchSize = 4096
	// DefaultCommitters is how many transactions a replica commits at once: enough that
	// one commits while another waits on Postgres, the decider or NATS, few enough that
	// batches still share transactions under load (partition/group.go).
	DefaultCommitters = 4
	// MaxCommitters bounds NOETL_MATERIALIZER_COMMITTERS: each holds a Postgres connection,
	// and their forwards together stay below the NATS client's 4,000 unacknowledged async
	// publishes (partition.forwardWindow each).
	MaxCommitters     = 16
	DefaultMaxLag     = 100000
	DefaultStallAfter = time.Minute
	DefaultLeaseTTL   = 15 * time.Second
)

// Config is the materializer's configuration.
type Config struct {
	AdminAddr string
	NATSURL   string
	// NATSInProcess is the embedded NATS server of the same process (noetl dev), connected
	// to without a socket; NATSURL then only names it.
	NATSInProcess nats.InProcessConnProvider
	// PostgresURL connects as the materializer's own login role, a member of noetl_materializer
	// (`noetl migrate` creates it). The materializer refuses to start as a role that holds
	// other privileges, or on a schema older than it needs.
	PostgresURL string
	Partitions  int
	BatchSize   int
	// Committers is how many transactions commit the partitions' batches at once
	// (partition/group.go); each holds one of the replica's Postgres connections.
	Committers int
	// Consumer names the group of materializer replicas that share the partitions of
	// NOETL_EVENTS (their leases and cursors); replicas of another name read every
	// partition on their own.
	Consumer string
	// ReplicaID identifies this replica within its group. A stable id (a pod name) lets a
	// restarted replica renew its predecessor's leases at once; empty means this process's
	// incarnation id (host, pid, a random suffix, start time and pid namespace), which a
	// later replica on the same host can prove gone and take over at once (internal/replica).
	ReplicaID string
	// LeaseTTL is how long a partition lease lasts unless renewed; leases are renewed every
	// third of it, and a dead replica's partitions are taken over within it.
	LeaseTTL time.Duration
	// MaxLag is the consumer lag (messages pending plus in flight, over the partitions this
	// replica owns) past which /readyz reports the materializer saturated.
	MaxLag int
	// StallAfter is how long a partition may commit nothing while its events are pending
	// before /readyz reports it stalled.
	StallAfter time.Duration
	// StreamReplicas is the JetStream replication factor of the streams this service
	// declares (zero: natsx.EnsureStreams decides).
	StreamReplicas int
	// Trace chooses where spans go.
	Trace telemetry.Config
	// InternalSecret verifies the signed requests of the system_* tools (package sysop:
	// retention's purge, cleanup); empty leaves them unanswered. It also signs the calls
	// to the orchestrator's DecisionService.
	InternalSecret string
	// OrchestratorAddr is the orchestrator's gRPC address: the decision an outcome causes
	// is then taken inside the outcome's commit and committed with it (one commit per
	// step; writer/inline.go). Empty, or without InternalSecret, every decision follows
	// its commit notice instead.
	OrchestratorAddr string
	// DecisionLink, when an orchestrator serves on it in this process (an in-process
	// mesh), is asked for those decisions by a call instead of over OrchestratorAddr, which
	// stays the way when none serves (decisionlink).
	DecisionLink *decisionlink.Link `json:"-"`

	// AdminListener, when set, is used instead of AdminAddr (in-process meshes).
	AdminListener net.Listener `json:"-"`
	// Gate, when set, is called before each batch is committed and holds the loop while it
	// blocks, as a stuck commit would (tests pause the consumer with it).
	Gate func(context.Context) error `json:"-"`
	// LagPoll is how often the consumer's lag is read (zero: natsx.DefaultLagPoll).
	LagPoll time.Duration `json:"-"`
	// OwnPartitions, when set, makes the replica consume exactly these partitions and take
	// no lease: tests use it to make two replicas own one partition at once.
	OwnPartitions []int `json:"-"`
	// PurgeEvery is how often NOETL_EVENTS is purged of committed events (zero:
	// partition.DefaultPurgeEvery; tests shorten it).
	PurgeEvery time.Duration `json:"-"`
}

// Flags binds the configuration to flags and NOETL_* env vars.
func (c *Config) Flags(fs *config.FlagSet) {
	fs.String(&c.AdminAddr, "admin", "NOETL_MATERIALIZER_ADMIN", "127.0.0.1:9063", "admin HTTP listen address (/livez, /readyz, /metrics)")
	fs.String(&c.NATSURL, "nats", "NOETL_NATS_URL", "nats://127.0.0.1:4222", "NATS URL")
	fs.Secret(&c.PostgresURL, "pg", "NOETL_PG_URL", "", "Postgres URL, as the materializer's own login role (a member of noetl_materializer)")
	fs.Int(&c.Partitions, "partitions", "NOETL_PARTITIONS", natsx.DefaultPartitions, "execution partitions", config.Positive)
	fs.Int(&c.StreamReplicas, "stream-replicas", "NOETL_STREAM_REPLICAS", 1, "JetStream replicas of the three streams (3 on a clustered NATS)", config.Positive)
	fs.Int(&c.BatchSize, "batch-size", "NOETL_MATERIALIZER_BATCH", DefaultBatchSize, "maximum events per commit", config.Positive)
	fs.Int(&c.Committers, "committers", "NOETL_MATERIALIZER_COMMITTERS", DefaultCommitters, fmt.Sprintf("transactions committing batches at once (1 to %d)", MaxCommitters), committersCheck)
	fs.String(&c.Consumer, "consumer", "NOETL_MATERIALIZER_CONSUMER", "materializer", "group name: replicas with the same name share the partitions of NOETL_EVENTS")
	fs.String(&c.ReplicaID, "replica-id", "NOETL_MATERIALIZER_REPLICA_ID", "", "this replica's id within its group, stable across restarts (the chart sets the pod name; default: host name, pid and this process's incarnation, which a later replica on the host can prove gone)")
	fs.Duration(&c.LeaseTTL, "lease-ttl", "NOETL_MATERIALIZER_LEASE_TTL", DefaultLeaseTTL, "how long a partition lease lasts unless renewed (renewed every third of it)", config.Positive)
	fs.Int(&c.MaxLag, "max-lag", "NOETL_MATERIALIZER_MAX_LAG", DefaultMaxLag, "consumer lag (messages pending plus in flight) past which /readyz fails", config.Positive)
	fs.Duration(&c.StallAfter, "stall-after", "NOETL_MATERIALIZER_STALL_AFTER", DefaultStallAfter, "how long nothing may be committed while events are pending before /readyz fails", config.Positive)
	fs.String(&c.OrchestratorAddr, "orchestrator", "NOETL_ORCHESTRATOR_ADDR", "127.0.0.1:50061", "orchestrator gRPC address: decisions are taken inside the commit that causes them (empty: each decision follows its commit notice)")
	fs.Secret(&c.InternalSecret, "internal-secret", "NOETL_INTERNAL_SECRET", "", "secret shared by the services that signs the system tools' requests (retention's purge, cleanup); empty: they are not served")
	c.Trace.Flags(fs)
}

// ParseFlags reads the materializer's configuration from args and the NOETL_* environment. A
// malformed or out-of-range value is an error naming the flag or variable and the value.
// printed reports that --print-config or -h printed instead of a start (exit 0).
func ParseFlags(args []string) (cfg Config, printed bool, err error) {
	fs := config.New("materializer")
	cfg.Flags(fs)
	printed, err = fs.Parse(args)
	return cfg, printed, err
}

// committersCheck is the check of NOETL_MATERIALIZER_COMMITTERS.
func committersCheck(n int) error {
	if err := config.Positive(n); err != nil {
		return err
	}
	if n > MaxCommitters {
		return fmt.Errorf("must be at most %d", MaxCommitters)
	}
	return nil
}

// Run runs the materializer until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	log = log.With(slog.String("service", "materializer"))
	if err := config.Required(&cfg, "PostgresURL", "NATSURL"); err != nil {
		return err
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = natsx.DefaultPartitions
	}
	if cfg.Committers <= 0 {
		cfg.Committers = DefaultCommitters
	}
	if err := committersCheck(cfg.Committers); err != nil {
		return fmt.Errorf("NOETL_MATERIALIZER_COMMITTERS: %w", err)
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "materializer"
	}
	if cfg.ReplicaID == "" {
		cfg.ReplicaID = replica.ID()
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.MaxLag <= 0 {
		cfg.MaxLag = DefaultMaxLag
	}
	if cfg.StallAfter <= 0 {
		cfg.StallAfter = DefaultStallAfter
	}
	for _, p := range cfg.OwnPartitions {
		if p < 0 || p >= cfg.Partitions {
			return fmt.Errorf("partition %d out of [0, %d)", p, cfg.Partitions)
		}
	}
	log = log.With(slog.String("replica", cfg.ReplicaID))
	tel, err := telemetry.Setup(ctx, "materializer", cfg.Trace)
	if err != nil {
		return err
	}
	defer tel.Close(log)
	// A connection for each committer, and some for leases, cursors and checks, each made
	// ready for commits when the pool makes it (writer.Warm).
	db, err := pgxext.Open(ctx, cfg.PostgresURL, int32(cfg.Committers+6), pgxext.AfterConnect(writer.Warm))
	if err != nil {
		return err
	}
	defer db.Close()
	if err := schema.Check(ctx, db, schema.Materializer); err != nil {
		return err
	}
	nc, js, err := natsx.Connect(cfg.NATSURL, "materializer", natsx.InProcess(cfg.NATSInProcess)...)
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
	srv := app.NewServer("materializer", log, nil, adminLis, tel.ServerOption())
	srv.AddCheck("postgres", pgxext.Check(db))
	srv.AddCheck("nats", natsx.Check(nc))
	var leases *lease.Table
	if cfg.OwnPartitions == nil {
		leases = &lease.Table{DB: db, Group: cfg.Consumer, Replica: cfg.ReplicaID, Partitions: cfg.Partitions, TTL: cfg.LeaseTTL}
	}
	w := &writer.Writer{DB: db}
	switch {
	case cfg.OrchestratorAddr == "":
	case cfg.InternalSecret == "":
		log.Warn("NOETL_INTERNAL_SECRET is not set: decisions are not taken inside the commit (two commits per step)")
	default:
		trust, err := auth.NewTrust(cfg.InternalSecret)
		if err != nil {
			return err
		}
		conn, err := grpcx.DialSigned(cfg.OrchestratorAddr, trust.Service("materializer"), tel.DialOption())
		if err != nil {
			return fmt.Errorf("orchestrator %s: %w", cfg.OrchestratorAddr, err)
		}
		defer func() { _ = conn.Close() }()
		d := decider.New(orchv1.NewDecisionServiceClient(conn))
		defer d.Close()
		w.Decide = d
		if cfg.DecisionLink != nil {
			w.Decide = &decider.Linked{Link: cfg.DecisionLink, Remote: d}
		}
	}
	parts := partition.New(partition.Config{Partitions: cfg.Partitions, BatchSize: cfg.BatchSize, Committers: cfg.Committers, Group: cfg.Consumer, MaxLag: cfg.MaxLag,
		StallAfter: cfg.StallAfter, LagPoll: cfg.LagPoll, RenewEvery: cfg.LeaseTTL / 3, Gate: cfg.Gate, Static: cfg.OwnPartitions, PurgeEvery: cfg.PurgeEvery},
		partition.Deps{Log: log, NC: nc, JS: js, Tracer: tel.Tracer(), Cursors: lease.Cursors{DB: db, Group: cfg.Consumer}, Writer: w,
			Leases: leases, Gone: replica.Gone, Registry: srv.Registry})
	srv.AddCheck("consumer-lag", parts.CheckLag)
	srv.AddCheck("progress", parts.CheckProgress)
	srv.AddCheck("leases", parts.CheckLeases)
	if cfg.InternalSecret == "" {
		log.Warn("NOETL_INTERNAL_SECRET is not set: the system playbooks' purge and cleanup requests are not served")
	} else {
		trust, err := auth.NewTrust(cfg.InternalSecret)
		if err != nil {
			return err
		}
		sys := &system{w: w, log: log, clean: func(ctx context.Context, grace time.Duration) (int64, int64, error) {
			return lease.Cleanup(ctx, db, grace)
		}}
		sub, err := sysop.Serve(nc, trust, time.Minute, sys.handle)
		if err != nil {
			return err
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	log.Info("materializer consuming", slog.String("admin", srv.AdminAddr()))
	for _, outcome := range []string{"taken", "missed"} {
		srv.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "noetl_materializer_one_round_trip_commits_total",
			Help:        "Commits tried in one round trip on the heads this replica committed (taken), and those of them that found the log moved and were committed again in two (missed).",
			ConstLabels: prometheus.Labels{"outcome": outcome},
		}, func() float64 {
			taken, missed := w.FastStats()
			if outcome == "missed" {
				return float64(missed)
			}
			return float64(taken)
		}))
	}
	srv.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "noetl_materializer_head_start_commits_total",
		Help: "One-round-trip commits whose head (BEGIN, guards, the batch's own rows) ran in Postgres while their decision was taken.",
	}, func() float64 { return float64(w.HeadStarts()) }))
	return srv.Run(ctx, 10*time.Second, parts.Run, parts.RunLag, parts.RunPurge)
}
