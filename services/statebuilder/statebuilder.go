// Package statebuilder is the NoETL statebuilder service: execution state rebuilt from the
// event log incrementally, pages of events and execution lists.
package statebuilder

import (
	"context"
	"log/slog"
	"net"
	"time"

	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/platform/app"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/services/statebuilder/internal/store"
)

// Config is the statebuilder's configuration.
type Config struct {
	GRPCAddr     string
	AdminAddr    string
	PostgresURL  string
	CacheEntries int
	CacheBytes   int
	// SnapshotEvery is the number of events between state snapshots.
	SnapshotEvery int

	// InternalSecret is the secret shared by the services that signs principals in internal
	// calls (package auth); required: every RPC but health needs a signed principal.
	InternalSecret string

	// GRPCListener and AdminListener, when set, are used instead of the addresses.
	GRPCListener  net.Listener `json:"-"`
	AdminListener net.Listener `json:"-"`
}

// Flags binds the configuration to flags and NOETL_* env vars.
func (c *Config) Flags(fs *config.FlagSet) {
	fs.String(&c.GRPCAddr, "grpc", "NOETL_STATEBUILDER_GRPC", "127.0.0.1:50062", "gRPC listen address")
	fs.String(&c.AdminAddr, "admin", "NOETL_STATEBUILDER_ADMIN", "127.0.0.1:9062", "admin HTTP listen address (/livez, /readyz, /metrics)")
	fs.Secret(&c.PostgresURL, "pg", "NOETL_PG_URL", "", "Postgres URL")
	fs.Secret(&c.InternalSecret, "internal-secret", "NOETL_INTERNAL_SECRET", "", "secret shared by the services that signs principals in internal calls (at least 32 bytes)")
	fs.Int(&c.CacheEntries, "cache-entries", "NOETL_STATEBUILDER_CACHE", 10000, "execution states kept in memory")
	fs.Int(&c.CacheBytes, "cache-bytes", "NOETL_STATEBUILDER_CACHE_BYTES", 256<<20, "encoded bytes of execution states kept in memory")
	fs.Int(&c.SnapshotEvery, "snapshot-every", "NOETL_STATEBUILDER_SNAPSHOT_EVERY", 1000, "events between state snapshots (bounds a cold rebuild)")
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
	db, err := pgxext.Open(ctx, cfg.PostgresURL, 16, true, log)
	if err != nil {
		return err
	}
	defer db.Close()
	grpcLis, err := app.Listen(cfg.GRPCListener, cfg.GRPCAddr)
	if err != nil {
		return err
	}
	adminLis, err := app.Listen(cfg.AdminListener, cfg.AdminAddr)
	if err != nil {
		return err
	}
	srv := app.NewServer("statebuilder", log, grpcLis, adminLis, auth.ServerOptions(trust)...)
	sbv1.RegisterStateServiceServer(srv.GRPC, store.New(db, store.Options{MaxEntries: cfg.CacheEntries, MaxBytes: int64(cfg.CacheBytes), SnapshotEvery: int64(cfg.SnapshotEvery)}, srv.Registry))
	srv.AddCheck("postgres", pgxext.Check(db))
	log.Info("statebuilder serving", slog.String("grpc", srv.GRPCAddr()), slog.String("admin", srv.AdminAddr()))
	return srv.Run(ctx, 10*time.Second)
}
