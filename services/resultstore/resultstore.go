// Package resultstore is the NoETL resultstore service: results too large to travel inline,
// stored and served by reference.
package resultstore

import (
	"context"
	"log/slog"
	"net"
	"time"

	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	"github.com/noetl/noetl/internal/platform/app"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/platform/telemetry"
	"github.com/noetl/noetl/services/resultstore/internal/store"
)

// Config is the resultstore's configuration.
type Config struct {
	GRPCAddr    string
	AdminAddr   string
	PostgresURL string

	// InternalSecret is the secret shared by the services that signs principals in internal
	// calls (package auth); required: every RPC but health needs a signed principal.
	InternalSecret string
	// Trace chooses where spans go.
	Trace telemetry.Config

	// GRPCListener and AdminListener, when set, are used instead of the addresses.
	GRPCListener  net.Listener `json:"-"`
	AdminListener net.Listener `json:"-"`
}

// Flags binds the configuration to flags and NOETL_* env vars.
func (c *Config) Flags(fs *config.FlagSet) {
	fs.String(&c.GRPCAddr, "grpc", "NOETL_RESULTSTORE_GRPC", "127.0.0.1:50065", "gRPC listen address")
	fs.String(&c.AdminAddr, "admin", "NOETL_RESULTSTORE_ADMIN", "127.0.0.1:9065", "admin HTTP listen address (/livez, /readyz, /metrics)")
	fs.Secret(&c.PostgresURL, "pg", "NOETL_PG_URL", "", "Postgres URL")
	fs.Secret(&c.InternalSecret, "internal-secret", "NOETL_INTERNAL_SECRET", "", "secret shared by the services that signs principals in internal calls (at least 32 bytes)")
	c.Trace.Flags(fs)
}

// Run runs the resultstore until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	log = log.With(slog.String("service", "resultstore"))
	if err := config.Required(&cfg, "PostgresURL"); err != nil {
		return err
	}
	trust, err := auth.NewTrust(cfg.InternalSecret)
	if err != nil {
		return err
	}
	tel, err := telemetry.Setup(ctx, "resultstore", cfg.Trace)
	if err != nil {
		return err
	}
	defer tel.Close(log)
	db, err := pgxext.Open(ctx, cfg.PostgresURL, 8, true, log)
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
	srv := app.NewServer("resultstore", log, grpcLis, adminLis, append(auth.ServerOptions(trust), tel.ServerOption())...)
	rsv1.RegisterResultStoreServiceServer(srv.GRPC, &store.Store{DB: db, Metrics: store.NewMetrics(srv.Registry)})
	srv.AddCheck("postgres", pgxext.Check(db))
	log.Info("resultstore serving", slog.String("grpc", srv.GRPCAddr()), slog.String("admin", srv.AdminAddr()))
	return srv.Run(ctx, 10*time.Second)
}
