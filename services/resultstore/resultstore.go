// Package resultstore is the NoETL resultstore service: results too large to travel inline,
// stored and served by reference.
package resultstore

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"

	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	"github.com/noetl/noetl/internal/platform/app"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/platform/telemetry"
	"github.com/noetl/noetl/internal/schema"
	"github.com/noetl/noetl/services/resultstore/internal/store"
)

// DefaultResultTTL is how long stored results are kept unless configured.
const DefaultResultTTL = 7 * 24 * time.Hour

// Config is the resultstore's configuration.
type Config struct {
	GRPCAddr  string
	AdminAddr string
	// PostgresURL connects as the resultstore's own login role, a member of noetl_resultstore
	// (`noetl migrate` creates it). The resultstore refuses to start as a role that holds
	// other privileges, or on a schema older than it needs.
	PostgresURL string

	// FlightAddr is where the Arrow Flight server listens.
	FlightAddr string
	// FlightLocation is the URI Flight clients are told to reach FlightAddr at (default
	// grpc://<FlightAddr as bound>); set it when clients reach the resultstore through a
	// Service or load balancer.
	FlightLocation string
	// ResultTTL is how long a stored result is kept; zero keeps results until deleted.
	ResultTTL time.Duration
	// SweepEvery is how often expired results are deleted.
	SweepEvery time.Duration
	// TicketTTL is how long the Flight tickets GetFlightInfo signs are accepted.
	TicketTTL time.Duration

	// InternalSecret is the secret shared by the services that signs principals in internal
	// calls (package auth); required: every RPC but health needs a signed principal.
	InternalSecret string
	// Trace chooses where spans go.
	Trace telemetry.Config

	// GRPCListener and AdminListener, when set, are used instead of the addresses.
	GRPCListener   net.Listener `json:"-"`
	AdminListener  net.Listener `json:"-"`
	FlightListener net.Listener `json:"-"`
}

// Flags binds the configuration to flags and NOETL_* env vars.
func (c *Config) Flags(fs *config.FlagSet) {
	fs.String(&c.GRPCAddr, "grpc", "NOETL_RESULTSTORE_GRPC", "127.0.0.1:50065", "gRPC listen address")
	fs.String(&c.AdminAddr, "admin", "NOETL_RESULTSTORE_ADMIN", "127.0.0.1:9065", "admin HTTP listen address (/livez, /readyz, /metrics)")
	fs.String(&c.FlightAddr, "flight", "NOETL_RESULTSTORE_FLIGHT", "127.0.0.1:50066", "Arrow Flight listen address")
	fs.String(&c.FlightLocation, "flight-location", "NOETL_RESULTSTORE_FLIGHT_LOCATION", "", "Flight location advertised to clients (default grpc://<flight address>)")
	fs.Duration(&c.ResultTTL, "result-ttl", "NOETL_RESULT_TTL", DefaultResultTTL, "how long stored results are kept (0: until deleted)", config.NonNegative)
	fs.Duration(&c.SweepEvery, "sweep-every", "NOETL_RESULT_SWEEP_EVERY", time.Minute, "how often expired results are deleted (0: never)", config.NonNegative)
	fs.Duration(&c.TicketTTL, "ticket-ttl", "NOETL_FLIGHT_TICKET_TTL", auth.DefaultTicketTTL, "how long Flight tickets signed here are accepted", config.Positive)
	fs.Secret(&c.PostgresURL, "pg", "NOETL_PG_URL", "", "Postgres URL, as the resultstore's own login role (a member of noetl_resultstore)")
	fs.Secret(&c.InternalSecret, "internal-secret", "NOETL_INTERNAL_SECRET", "", "secret shared by the services that signs principals in internal calls (at least 32 bytes)")
	c.Trace.Flags(fs)
}

// ParseFlags reads the resultstore's configuration from args and the NOETL_* environment. A
// malformed or out-of-range value is an error naming the flag or variable and the value.
// printed reports that --print-config or -h printed instead of a start (exit 0).
func ParseFlags(args []string) (cfg Config, printed bool, err error) {
	fs := config.New("resultstore")
	cfg.Flags(fs)
	printed, err = fs.Parse(args)
	return cfg, printed, err
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
	db, err := pgxext.Open(ctx, cfg.PostgresURL, 8)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := schema.Check(ctx, db, schema.Resultstore); err != nil {
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
	flightLis, err := app.Listen(cfg.FlightListener, cfg.FlightAddr)
	if err != nil {
		return err
	}
	srv := app.NewServer("resultstore", log, grpcLis, adminLis, append(auth.ServerOptions(trust), tel.ServerOption())...)
	st := &store.Store{Backend: &store.Postgres{DB: db}, Metrics: store.NewMetrics(srv.Registry), TTL: cfg.ResultTTL}
	rsv1.RegisterResultStoreServiceServer(srv.GRPC, st)
	srv.AddCheck("postgres", pgxext.Check(db))

	location := cfg.FlightLocation
	if location == "" {
		location = "grpc://" + flightLis.Addr().String()
	}
	fsrv := grpc.NewServer(append(auth.ServerOptions(trust), tel.ServerOption(),
		grpc.ChainUnaryInterceptor((&grpcx.Errors{Log: log}).Unary),
		grpc.MaxRecvMsgSize(store.MaxFlightMessage), grpc.MaxSendMsgSize(store.MaxFlightMessage))...)
	flight.RegisterFlightServiceServer(fsrv, &store.Flight{Store: st, Trust: trust, Location: location, TicketTTL: cfg.TicketTTL})
	serveFlight := func(ctx context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- fsrv.Serve(flightLis) }()
		select {
		case err := <-errc:
			return fmt.Errorf("resultstore flight: %w", err)
		case <-ctx.Done():
		}
		done := make(chan struct{})
		go func() { fsrv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			fsrv.Stop()
		}
		return nil
	}
	sweep := func(ctx context.Context) error {
		st.RunSweeper(ctx, cfg.SweepEvery, func(err error) { log.Warn("sweeping expired results failed", slog.String("error", err.Error())) })
		return nil
	}
	log.Info("resultstore serving", slog.String("grpc", srv.GRPCAddr()), slog.String("flight", location), slog.String("admin", srv.AdminAddr()))
	return srv.Run(ctx, 10*time.Second, serveFlight, sweep)
}
