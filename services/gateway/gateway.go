// Package gateway is the NoETL gateway service: the public gRPC API and its REST/JSON
// mapping (grpc-gateway) with the OpenAPI document, plus NoETL-compatible /api/ routes,
// forwarding to the internal services.
package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/noetl/noetl/gen"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/platform/app"
	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/services/gateway/internal/api"
	"github.com/noetl/noetl/services/gateway/internal/compat"
)

// Config is the gateway's configuration.
type Config struct {
	GRPCAddr         string
	HTTPAddr         string
	AdminAddr        string
	OrchestratorAddr string
	StatebuilderAddr string
	ResultstoreAddr  string
	MaxBodyBytes     int

	// Listeners, when set, are used instead of the addresses.
	GRPCListener  net.Listener `json:"-"`
	HTTPListener  net.Listener `json:"-"`
	AdminListener net.Listener `json:"-"`
}

// Flags binds the configuration to flags and NOETL_* env vars.
func (c *Config) Flags(fs *config.FlagSet) {
	fs.String(&c.GRPCAddr, "grpc", "NOETL_GATEWAY_GRPC", "127.0.0.1:50051", "public gRPC listen address")
	fs.String(&c.HTTPAddr, "http", "NOETL_GATEWAY_HTTP", "127.0.0.1:8080", "public REST listen address")
	fs.String(&c.AdminAddr, "admin", "NOETL_GATEWAY_ADMIN", "127.0.0.1:9060", "admin HTTP listen address (/livez, /readyz, /metrics)")
	fs.String(&c.OrchestratorAddr, "orchestrator", "NOETL_ORCHESTRATOR_ADDR", "127.0.0.1:50061", "orchestrator gRPC address")
	fs.String(&c.StatebuilderAddr, "statebuilder", "NOETL_STATEBUILDER_ADDR", "127.0.0.1:50062", "statebuilder gRPC address")
	fs.String(&c.ResultstoreAddr, "resultstore", "NOETL_RESULTSTORE_ADDR", "127.0.0.1:50065", "resultstore gRPC address")
	fs.Int(&c.MaxBodyBytes, "max-body", "NOETL_GATEWAY_MAX_BODY", 2<<20, "largest REST request body in bytes")
}

// Run runs the gateway until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	log = log.With(slog.String("service", "gateway"))
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 2 << 20
	}
	oc, err := grpcx.Dial(cfg.OrchestratorAddr)
	if err != nil {
		return err
	}
	defer func() { _ = oc.Close() }()
	sc, err := grpcx.Dial(cfg.StatebuilderAddr)
	if err != nil {
		return err
	}
	defer func() { _ = sc.Close() }()
	rc, err := grpcx.Dial(cfg.ResultstoreAddr)
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	impl := &api.Server{Orchestrator: orchv1.NewOrchestratorServiceClient(oc), Credentials: orchv1.NewCredentialServiceClient(oc), State: sbv1.NewStateServiceClient(sc), Results: rsv1.NewResultStoreServiceClient(rc)}

	grpcLis, err := app.Listen(cfg.GRPCListener, cfg.GRPCAddr)
	if err != nil {
		return err
	}
	adminLis, err := app.Listen(cfg.AdminListener, cfg.AdminAddr)
	if err != nil {
		return err
	}
	httpLis, err := app.Listen(cfg.HTTPListener, cfg.HTTPAddr)
	if err != nil {
		return err
	}
	srv := app.NewServer("gateway", log, grpcLis, adminLis)
	apiv1.RegisterCatalogServiceServer(srv.GRPC, impl)
	apiv1.RegisterExecutionServiceServer(srv.GRPC, impl)
	apiv1.RegisterResultServiceServer(srv.GRPC, impl)
	apiv1.RegisterCredentialServiceServer(srv.GRPC, impl)
	srv.AddCheck("orchestrator", grpcx.HealthCheck(oc))
	srv.AddCheck("statebuilder", grpcx.HealthCheck(sc))

	mux := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: false, UseProtoNames: false},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
	}), runtime.WithErrorHandler(func(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
		runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, credentialBodyError(r, err))
	}))
	for _, reg := range []func(context.Context, *runtime.ServeMux) error{
		func(c context.Context, m *runtime.ServeMux) error {
			return apiv1.RegisterCatalogServiceHandlerServer(c, m, impl)
		},
		func(c context.Context, m *runtime.ServeMux) error {
			return apiv1.RegisterExecutionServiceHandlerServer(c, m, impl)
		},
		func(c context.Context, m *runtime.ServeMux) error {
			return apiv1.RegisterResultServiceHandlerServer(c, m, impl)
		},
		func(c context.Context, m *runtime.ServeMux) error {
			return apiv1.RegisterCredentialServiceHandlerServer(c, m, impl)
		},
	} {
		if err := reg(ctx, mux); err != nil {
			return err
		}
	}
	top := http.NewServeMux()
	top.HandleFunc("/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(gen.OpenAPI)
	})
	health := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	}
	// /health is NoETL's path, /healthz the Kubernetes habit; both only say the gateway
	// answers (readiness with dependencies is /readyz on the admin port).
	top.HandleFunc("/healthz", health)
	top.HandleFunc("/health", health)
	top.Handle("/api/", compat.New(impl, log))
	top.Handle("/", mux)
	limit := int64(cfg.MaxBodyBytes)
	httpSrv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
			top.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	serveHTTP := func(ctx context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- httpSrv.Serve(httpLis) }()
		select {
		case err := <-errc:
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return err
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = httpSrv.Shutdown(sctx)
			return nil
		}
	}
	log.Info("gateway serving", slog.String("grpc", srv.GRPCAddr()), slog.String("http", httpLis.Addr().String()), slog.String("admin", srv.AdminAddr()))
	return srv.Run(ctx, 10*time.Second, serveHTTP)
}

// credentialBodyError keeps a malformed credential body out of the error message: the JSON
// decoder quotes the offending token, which may be part of the secret. The API's own
// validation errors (which name the field and never quote data) pass through.
func credentialBodyError(r *http.Request, err error) error {
	if !strings.HasPrefix(r.URL.Path, "/v1/credentials") {
		return err
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		return err
	}
	for _, field := range []string{"name:", "type:", "data:", "page_size:"} {
		if strings.HasPrefix(st.Message(), field) {
			return err
		}
	}
	return status.Error(codes.InvalidArgument, "body: not a valid credential JSON object")
}
