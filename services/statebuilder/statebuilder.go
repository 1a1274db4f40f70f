// Package statebuilder is the NoETL statebuilder service: execution state rebuilt from the
// event log incrementally, pages of events and execution lists.
package statebuilder

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/platform/app"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/platform/telemetry"
	"github.com/noetl/noetl/internal/schema"
	"github.com/noetl/noetl/services/statebuilder/internal/store"
)

// Config is the statebuilder's configuration.
type Config struct {
	GRPCAddr  string
	AdminAddr string
	// PostgresURL connects as the statebuilder's own login role, a member of noetl_statebuilder
	// (`noetl migrate` creates it). The statebuilder refuses to start as a role that holds
	// other privileges, or on a schema older than it needs.
	PostgresURL  string
	CacheEntries int
	CacheBytes   int
	// SnapshotEvery is the number of events between state snapshots.
	SnapshotEvery int

	// InternalSecret is the secret shared by the services that signs principals in internal
	// calls (package auth); required: every RPC but health needs a signed principal.
	InternalSecret string
	// Trace chooses where spans go.
	Trace telemetry.Config
	// CountEvery is how often the running executions are counted for
	// noetl_executions_running (zero: every 30 s).
	CountEvery time.Duration

	// GRPCListener and AdminListener, when set, are used instead of the addresses.
	GRPCListener  net.Listener `json:"-"`
	AdminListener net.Listener `json:"-"`
}

// Flags binds the configuration to flags and NOETL_* env vars.
func (c *Config) Flags(fs *config.FlagSet) {
	fs.String(&c.GRPCAddr, "grpc", "NOETL_STATEBUILDER_GRPC", "127.0.0.1:50062", "gRPC listen address")
	fs.String(&c.AdminAddr, "admin", "NOETL_STATEBUILDER_ADMIN", "127.0.0.1:9062", "admin HTTP listen address (/livez, /readyz, /metrics)")
	fs.Secret(&c.PostgresURL, "pg", "NOETL_PG_URL", "", "Postgres URL, as the statebuilder's own login role (a member of noetl_statebuilder)")
	fs.Secret(&c.InternalSecret, "internal-secret", "NOETL_INTERNAL_SECRET", "", "secret shared by the services that signs principals in internal calls (at least 32 bytes)")
	fs.Int(&c.CacheEntries, "cache-entries", "NOETL_STATEBUILDER_CACHE", 10000, "execution states kept in memory", config.Positive)
	fs.Int(&c.CacheBytes, "cache-bytes", "NOETL_STATEBUILDER_CACHE_BYTES", 256<<20, "encoded bytes of execution states kept in memory", config.Positive)
	fs.Int(&c.SnapshotEvery, "snapshot-every", "NOETL_STATEBUILDER_SNAPSHOT_EVERY", 1000, "events between state snapshots (bounds a cold rebuild)", config.Positive)
	fs.Duration(&c.CountEvery, "count-every", "NOETL_STATEBUILDER_COUNT_EVERY", 30*time.Second, "how often running executions are counted (noetl_executions_running)", config.Positive)
	c.Trace.Flags(fs)
}

// ParseFlags reads the statebuilder's configuration from args and the NOETL_* environment. A
// malformed or out-of-range value is an error naming the flag or variable and the value.
// printed reports that --print-config or -h printed instead of a start (exit 0).
func ParseFlags(args []string) (cfg Config, printed bool, err error) {
	fs := config.New("statebuilder")
	cfg.Flags(fs)
	printed, err = fs.Parse(args)
	return cfg, printed, err
}

// Run runs the statebuilder until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	log = log.With(slog.String("service", "statebuilder"))
	if err := config.Required(&cfg, "PostgresURL"); err != nil {
		return err
	}
	trust, err := auth.NewTrust(cfg.InternalSecret)
	if err != nil {
		return err
	}
	tel, err := telemetry.Setup(ctx, "statebuilder", cfg.Trace)
	if err != nil {
		return err
	}
	defer tel.Close(log)
	db, err := pgxext.Open(ctx, cfg.PostgresURL, 16, pgxext.WarmUp(store.WarmReads...))
	if err != nil {
		return err
	}
	defer db.Close()
	if err := schema.Check(ctx, db, schema.Statebuilder); err != nil {
		return err
	}
	grpcLis, err := app.Listen(cfg.GRPCListener, cfg.GRPCAddr)
	if err != nil {
		return err
	}
	adminLis, err := app.Listen(cfg.AdminListener, cfg.AdminAddr)
	if err != nil {
		return err
	}
	srv := app.NewServer("statebuilder", log, grpcLis, adminLis, append(auth.ServerOptions(trust), tel.ServerOption())...)
	st := store.New(db, store.Options{MaxEntries: cfg.CacheEntries, MaxBytes: int64(cfg.CacheBytes), SnapshotEvery: int64(cfg.SnapshotEvery)}, srv.Registry)
	sbv1.RegisterStateServiceServer(srv.GRPC, st)
	srv.AddCheck("postgres", pgxext.Check(db))
	running := prometheus.NewGauge(prometheus.GaugeOpts{Name: "noetl_executions_running", Help: "Executions not terminal yet (counted in noetl.execution every NOETL_STATEBUILDER_COUNT_EVERY)."})
	srv.Registry.MustRegister(running)
	log.Info("statebuilder serving", slog.String("grpc", srv.GRPCAddr()), slog.String("admin", srv.AdminAddr()))
	return srv.Run(ctx, 10*time.Second, countRunning(st, running, cfg.CountEvery, log))
}

// countRunning sets gauge to the number of running executions every every (30 s when zero).
// The count reads the execution projection, which the statebuilder alone reads.
func countRunning(st *store.Store, gauge prometheus.Gauge, every time.Duration, log *slog.Logger) func(context.Context) error {
	if every <= 0 {
		every = 30 * time.Second
	}
	return func(ctx context.Context) error {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			n, err := st.RunningExecutions(cctx)
			cancel()
			switch {
			case err == nil:
				gauge.Set(float64(n))
			case ctx.Err() == nil:
				log.Warn("count running executions", slog.String("error", err.Error()))
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	}
}
