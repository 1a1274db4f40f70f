// Package gateway is the NoETL gateway service: the public gRPC API and its REST/JSON
// mapping (grpc-gateway) with the OpenAPI document, NoETL-compatible /api/ routes and the
// web console (/ui/), forwarding to the internal services.
package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/noetl/noetl/gen"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/platform/app"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/internal/platform/telemetry"
	"github.com/noetl/noetl/services/gateway/internal/api"
	"github.com/noetl/noetl/services/gateway/internal/authn"
	"github.com/noetl/noetl/services/gateway/internal/clientaddr"
	"github.com/noetl/noetl/services/gateway/internal/compat"
	"github.com/noetl/noetl/services/gateway/internal/connlimit"
	"github.com/noetl/noetl/services/gateway/internal/console"
	"github.com/noetl/noetl/services/gateway/internal/edge"
	"github.com/noetl/noetl/services/gateway/internal/export"
	"github.com/noetl/noetl/services/gateway/internal/guard"
	"github.com/noetl/noetl/services/gateway/internal/limit"
	"github.com/noetl/noetl/services/gateway/internal/loopback"
	"github.com/noetl/noetl/services/gateway/internal/openapi"
	"github.com/noetl/noetl/services/gateway/internal/sse"
	"github.com/noetl/noetl/services/gateway/internal/webhook"
)

// Config is the gateway's configuration.
type Config struct {
	GRPCAddr         string
	HTTPAddr         string
	AdminAddr        string
	OrchestratorAddr string
	StatebuilderAddr string
	ResultstoreAddr  string
	// MaxBodyBytes bounds a REST request body and, the same number, a gRPC request
	// message (the gRPC server's receive limit): past it a request is refused with
	// RESOURCE_EXHAUSTED (HTTP 413) before it is read.
	MaxBodyBytes int
	// IdleTimeout is how long an idle client connection, REST (keep-alive) or gRPC, is
	// kept open; MaxConns bounds the client connections of each of the two listeners: past
	// it a new REST connection closes the one idle the longest, or waits for one to end,
	// and a new gRPC connection waits to be accepted. Together they bound what clients hold
	// in the gateway (a goroutine and its buffers per connection, about 80 KiB) and make
	// sure it is given back once they go quiet (package connlimit). Zero means the default.
	IdleTimeout time.Duration
	MaxConns    int

	// Insecure turns authentication off: every caller acts as an admin (and system) of
	// tenant "default". Only for a laptop (`noetl dev --insecure`); never the default.
	Insecure bool
	// InternalSecret signs the principal forwarded to the internal services; required.
	InternalSecret string
	// KeyCacheTTL is how long a verified API key is remembered: a revoked key keeps working
	// for at most this long. KeyCacheSize bounds the cached keys.
	KeyCacheTTL  time.Duration
	KeyCacheSize int
	// JWT authentication, on when JWKSFile, JWKSURL or JWTHMACSecret is set (see
	// internal/authn.JWTConfig for each field).
	JWKSFile       string
	JWKSURL        string
	JWKSRefresh    time.Duration
	JWTIssuer      string
	JWTAudience    string
	JWTAlgorithms  string
	JWTHMACSecret  string
	JWTTenantClaim string
	JWTRolesClaim  string
	JWTLeeway      time.Duration

	// Per-tenant limits (package limit): a token bucket of TenantRPS calls per second with
	// bursts of TenantBurst, at most TenantInFlight calls (streams included) at once, and at
	// most TenantWaits waiting calls (waits, starts that wait, watches) at once, which do not
	// count among the calls in flight. Past them a call is refused with ResourceExhausted
	// (HTTP 429 with Retry-After). Zero means the default.
	TenantRPS      int
	TenantBurst    int
	TenantInFlight int
	TenantWaits    int

	// Throttle of failed authentication (limit.Failures), by client address and by API key
	// id: AuthFailureBurst failures at once, forgiven at AuthFailuresPerMinute a minute. Past
	// them an attempt is refused with ResourceExhausted (HTTP 429 with Retry-After) before
	// its credential is checked, a valid one included. Zero means the default.
	AuthFailuresPerMinute int
	AuthFailureBurst      int
	// TrustedProxies lists, comma-separated, the IP addresses and CIDR prefixes of proxies
	// whose X-Forwarded-For (header, or gRPC metadata) names the client address. Empty (the
	// default): the client address is the TCP peer and X-Forwarded-For is ignored.
	TrustedProxies string

	// FlightLocation is the resultstore's Arrow Flight URI, handed to clients with tickets.
	FlightLocation string
	// TicketTTL is how long the Flight tickets the gateway signs are accepted.
	TicketTTL time.Duration
	// Trace chooses where spans go.
	Trace telemetry.Config

	// Version is the build's version, the OpenAPI document's info.version; empty means the
	// binary's build info (openapi.Version). The CLI's `noetl dev` passes its release.
	Version string `json:"-"`

	// Routes are extra HTTP handlers served on the REST listener beside the API, by
	// pattern (`noetl dev` serves the whole mesh's /livez and /readyz there). They are
	// served as given: no authentication, so they must not expose tenant data.
	Routes map[string]http.Handler `json:"-"`

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
	fs.String(&c.FlightLocation, "flight-location", "NOETL_RESULTSTORE_FLIGHT_LOCATION", "grpc://127.0.0.1:50066", "the resultstore's Arrow Flight location given to clients with their tickets")
	fs.Duration(&c.TicketTTL, "ticket-ttl", "NOETL_FLIGHT_TICKET_TTL", auth.DefaultTicketTTL, "how long a Flight ticket signed by the gateway is accepted", config.Positive)
	fs.Int(&c.MaxBodyBytes, "max-body", "NOETL_GATEWAY_MAX_BODY", DefaultMaxBodyBytes, "largest REST request body and gRPC request message, in bytes", config.Positive)
	fs.Duration(&c.IdleTimeout, "idle-timeout", "NOETL_GATEWAY_IDLE_TIMEOUT", DefaultIdleTimeout, "how long an idle client connection (REST keep-alive or gRPC) is kept open", config.Positive)
	fs.Int(&c.MaxConns, "max-conns", "NOETL_GATEWAY_MAX_CONNS", DefaultMaxConns, "most client connections of each public listener (REST, gRPC) at once; past it a new REST connection closes the longest idle one (or waits), a new gRPC one waits", config.Positive)
	fs.Bool(&c.Insecure, "insecure", "NOETL_GATEWAY_INSECURE", false, "turn authentication off: every caller is an admin of tenant default (development only)")
	fs.Secret(&c.InternalSecret, "internal-secret", "NOETL_INTERNAL_SECRET", "", "secret shared by the services that signs principals in internal calls (at least 32 bytes)")
	fs.Duration(&c.KeyCacheTTL, "key-cache-ttl", "NOETL_GATEWAY_KEY_CACHE_TTL", authn.DefaultKeyCacheTTL, "how long a verified API key is cached (a revoked key works at most this long)", config.Positive)
	fs.Int(&c.KeyCacheSize, "key-cache-size", "NOETL_GATEWAY_KEY_CACHE_SIZE", authn.DefaultKeyCacheSize, "most API keys cached", config.Positive)
	fs.String(&c.JWKSFile, "jwks-file", "NOETL_GATEWAY_JWKS_FILE", "", "JSON Web Key Set file of the JWT issuer's public keys")
	fs.String(&c.JWKSURL, "jwks-url", "NOETL_GATEWAY_JWKS_URL", "", "JSON Web Key Set URL of the JWT issuer's public keys (cached)")
	fs.Duration(&c.JWKSRefresh, "jwks-refresh", "NOETL_GATEWAY_JWKS_REFRESH", authn.DefaultJWKSRefresh, "how long a fetched JWKS is used", config.Positive)
	fs.String(&c.JWTIssuer, "jwt-issuer", "NOETL_GATEWAY_JWT_ISSUER", "", "required iss of JWTs")
	fs.String(&c.JWTAudience, "jwt-audience", "NOETL_GATEWAY_JWT_AUDIENCE", "", "required aud of JWTs")
	fs.String(&c.JWTAlgorithms, "jwt-algorithms", "NOETL_GATEWAY_JWT_ALGORITHMS", authn.DefaultJWTAlgorithms, "allowed asymmetric JWT algorithms, comma-separated")
	fs.Secret(&c.JWTHMACSecret, "jwt-hmac-secret", "NOETL_GATEWAY_JWT_HMAC_SECRET", "", "enables HS256 JWTs signed with this secret (at least 32 bytes)")
	fs.String(&c.JWTTenantClaim, "jwt-tenant-claim", "NOETL_GATEWAY_JWT_TENANT_CLAIM", authn.DefaultTenantClaim, "JWT claim holding the tenant (dotted for nested claims)")
	fs.String(&c.JWTRolesClaim, "jwt-roles-claim", "NOETL_GATEWAY_JWT_ROLES_CLAIM", authn.DefaultRolesClaim, "JWT claim holding the roles (dotted for nested claims)")
	fs.Int(&c.TenantRPS, "tenant-rps", "NOETL_GATEWAY_TENANT_RPS", limit.DefaultRPS, "calls per second each tenant may make (token bucket rate)", config.Positive)
	fs.Int(&c.TenantBurst, "tenant-burst", "NOETL_GATEWAY_TENANT_BURST", limit.DefaultBurst, "calls a tenant may make at once above its rate (token bucket size)", config.Positive)
	fs.Int(&c.TenantInFlight, "tenant-inflight", "NOETL_GATEWAY_TENANT_INFLIGHT", limit.DefaultInFlight, "calls (streams included) each tenant may have in flight, waiting calls not", config.Positive)
	fs.Int(&c.TenantWaits, "tenant-waits", "NOETL_GATEWAY_TENANT_WAITS", limit.DefaultWaits, "waiting calls (waits for an execution's end, starts that wait for it, watches of its events or logs) each tenant may hold at once", config.Positive)
	fs.Int(&c.AuthFailuresPerMinute, "auth-failures-per-minute", "NOETL_GATEWAY_AUTH_FAILURES_PER_MINUTE", limit.DefaultFailuresPerMinute, "failed authentications forgiven per minute, per client address and per API key id (token bucket rate)", config.Positive)
	fs.Int(&c.AuthFailureBurst, "auth-failure-burst", "NOETL_GATEWAY_AUTH_FAILURE_BURST", limit.DefaultFailureBurst, "failed authentications a client address or an API key id may have at once before its attempts are refused (token bucket size)", config.Positive)
	fs.String(&c.TrustedProxies, "trusted-proxies", "NOETL_GATEWAY_TRUSTED_PROXIES", "", "comma-separated IPs and CIDR prefixes of proxies whose X-Forwarded-For names the client (empty: trust none; the client is the TCP peer)", clientaddr.Check)
	fs.Duration(&c.JWTLeeway, "jwt-leeway", "NOETL_GATEWAY_JWT_LEEWAY", authn.DefaultJWTLeeway, "clock skew tolerated on JWT exp, nbf and iat", config.Positive)
	c.Trace.Flags(fs)
}

// ParseFlags reads the gateway's configuration from args and the NOETL_* environment. A
// malformed or out-of-range value is an error naming the flag or variable and the value.
// printed reports that --print-config or -h printed instead of a start (exit 0).
func ParseFlags(args []string) (cfg Config, printed bool, err error) {
	fs := config.New("gateway")
	cfg.Flags(fs)
	printed, err = fs.Parse(args)
	return cfg, printed, err
}

// Run runs the gateway until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	log = log.With(slog.String("service", "gateway"))
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	trusted, err := clientaddr.Parse(cfg.TrustedProxies)
	if err != nil {
		return fmt.Errorf("trusted proxies: %w", err)
	}
	trust, err := auth.NewTrust(cfg.InternalSecret)
	if err != nil {
		return err
	}
	tel, err := telemetry.Setup(ctx, "gateway", cfg.Trace)
	if err != nil {
		return err
	}
	defer tel.Close(log)
	// Calls to the internal services carry the caller's principal, signed, and its trace.
	forward := grpc.WithPerRPCCredentials(trust.Forward("gateway"))
	oc, err := grpcx.Dial(cfg.OrchestratorAddr, forward, tel.DialOption())
	if err != nil {
		return err
	}
	defer func() { _ = oc.Close() }()
	sc, err := grpcx.Dial(cfg.StatebuilderAddr, forward, tel.DialOption())
	if err != nil {
		return err
	}
	defer func() { _ = sc.Close() }()
	rc, err := grpcx.Dial(cfg.ResultstoreAddr, forward, tel.DialOption())
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	keys := orchv1.NewApiKeyServiceClient(oc)
	impl := &api.Server{Orchestrator: orchv1.NewOrchestratorServiceClient(oc), Credentials: orchv1.NewCredentialServiceClient(oc), State: sbv1.NewStateServiceClient(sc), Results: rsv1.NewResultStoreServiceClient(rc), Keys: keys,
		Schedules: orchv1.NewScheduleServiceClient(oc), Triggers: orchv1.NewTriggerServiceClient(oc), System: orchv1.NewSystemServiceClient(oc), Plugins: orchv1.NewPluginServiceClient(oc), Watch: orchv1.NewWatchServiceClient(oc), Stopping: ctx.Done(), Tickets: trust, TicketTTL: cfg.TicketTTL, FlightLocation: cfg.FlightLocation}
	authenticator, err := authn.New(authn.Config{
		Insecure: cfg.Insecure, KeyCacheTTL: cfg.KeyCacheTTL, KeyCacheSize: cfg.KeyCacheSize,
		JWT: authn.JWTConfig{
			JWKSFile: cfg.JWKSFile, JWKSURL: cfg.JWKSURL, JWKSRefresh: cfg.JWKSRefresh, Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience,
			Algorithms: cfg.JWTAlgorithms, HMACSecret: cfg.JWTHMACSecret, TenantClaim: cfg.JWTTenantClaim, RolesClaim: cfg.JWTRolesClaim, Leeway: cfg.JWTLeeway,
		},
	}, guard.VerifyKey(keys), nil)
	if err != nil {
		return err
	}
	if cfg.Insecure {
		log.Warn("authentication is off (NOETL_GATEWAY_INSECURE): every caller acts as an admin of tenant default")
	}

	grpcLis, err := app.Listen(cfg.GRPCListener, cfg.GRPCAddr)
	if err != nil {
		return err
	}
	grpcConns := connlimit.New(grpcLis, cfg.MaxConns)
	grpcLis = grpcConns
	adminLis, err := app.Listen(cfg.AdminListener, cfg.AdminAddr)
	if err != nil {
		return err
	}
	httpLis, err := app.Listen(cfg.HTTPListener, cfg.HTTPAddr)
	if err != nil {
		return err
	}
	restConns := connlimit.New(httpLis, cfg.MaxConns)
	httpLis = restConns
	// The chain: errors shaped at the edge (outermost, so it sees every error), then
	// authentication and authorization (with the throttle of failed attempts), then the
	// limits of the caller's tenant, then the check of the request's strings.
	e := edge.NewErrors(log)
	g := guard.New(authenticator, limit.NewFailures(limit.FailuresConfig{PerMinute: float64(cfg.AuthFailuresPerMinute), Burst: cfg.AuthFailureBurst}), trusted, log)
	lim := edge.NewLimits(limit.New(limit.Config{RPS: float64(cfg.TenantRPS), Burst: cfg.TenantBurst, InFlight: cfg.TenantInFlight, Waits: cfg.TenantWaits}))
	srv := app.NewServer("gateway", log, grpcLis, adminLis, tel.ServerOption(),
		grpc.ChainUnaryInterceptor(e.Unary, g.Unary, lim.Unary, edge.CheckStrings), grpc.ChainStreamInterceptor(e.Stream, g.Stream, lim.Stream, edge.CheckStreamStrings),
		// A request message is bounded as a REST body is, by the transport, before it is read.
		grpc.MaxRecvMsgSize(cfg.MaxBodyBytes),
		// An idle client connection is closed (clients reconnect when they call again).
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: cfg.IdleTimeout}))
	srv.Registry.MustRegister(lim.Collector(), g.Collector())
	apiv1.RegisterCatalogServiceServer(srv.GRPC, impl)
	apiv1.RegisterExecutionServiceServer(srv.GRPC, impl)
	apiv1.RegisterResultServiceServer(srv.GRPC, impl)
	apiv1.RegisterCredentialServiceServer(srv.GRPC, impl)
	apiv1.RegisterAdminServiceServer(srv.GRPC, impl)
	apiv1.RegisterScheduleServiceServer(srv.GRPC, impl)
	apiv1.RegisterTriggerServiceServer(srv.GRPC, impl)
	apiv1.RegisterSystemServiceServer(srv.GRPC, impl)
	apiv1.RegisterPluginServiceServer(srv.GRPC, impl)
	srv.AddCheck("orchestrator", grpcx.HealthCheck(oc))
	srv.AddCheck("statebuilder", grpcx.HealthCheck(sc))

	// REST and the /api/ routes call the gRPC API through an in-memory connection to this
	// same server, so they pass the same authentication and authorization (guard) as gRPC
	// callers: no route reaches the implementation around it.
	loop := bufconn.Listen(1 << 20)
	lc, err := grpcx.Dial("passthrough:///gateway-loopback",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return loop.DialContext(ctx) }),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(96<<20)))
	if err != nil {
		return err
	}
	defer func() { _ = lc.Close() }()

	marshaler := &edge.JSON{JSONPb: runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: false, UseProtoNames: false},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
	}}
	restErrors := edge.RESTError(log, cfg.MaxBodyBytes)
	mux := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, marshaler),
		runtime.WithIncomingHeaderMatcher(clientaddr.HeaderMatcher), runtime.WithMetadata(clientaddr.Metadata), runtime.WithErrorHandler(restErrors))
	for _, reg := range []func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error{
		apiv1.RegisterCatalogServiceHandler,
		apiv1.RegisterExecutionServiceHandler,
		apiv1.RegisterResultServiceHandler,
		apiv1.RegisterCredentialServiceHandler,
		apiv1.RegisterAdminServiceHandler,
		apiv1.RegisterScheduleServiceHandler,
		apiv1.RegisterTriggerServiceHandler,
		apiv1.RegisterSystemServiceHandler,
		apiv1.RegisterPluginServiceHandler,
	} {
		if err := reg(ctx, mux, lc); err != nil {
			return err
		}
	}
	top := http.NewServeMux()
	doc, err := openapi.Document(gen.OpenAPI, cmp.Or(cfg.Version, openapi.Version()))
	if err != nil {
		return err
	}
	top.HandleFunc("/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	})
	health := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	}
	// /health is NoETL's path, /healthz the Kubernetes habit; both only say the gateway
	// answers (readiness with dependencies is /readyz on the admin port).
	top.HandleFunc("/healthz", health)
	top.HandleFunc("/health", health)
	top.Handle("/api/", loopback.ForwardCredentials(compat.New(loopback.NewBackend(lc), log)))
	// Server-Sent Events, not grpc-gateway's newline-delimited JSON, for the watch route.
	exe := apiv1.NewExecutionServiceClient(lc)
	top.Handle(sse.WatchRoute, loopback.ForwardCredentials(sse.Events(exe, mux, marshaler, restErrors, ctx.Done())))
	// The step logs: a page over grpc-gateway, or with follow=true (and on :watch) the
	// watch as Server-Sent Events.
	logsSSE := loopback.ForwardCredentials(sse.Logs(exe, mux, marshaler, restErrors, ctx.Done()))
	top.Handle(sse.LogsWatchRoute, logsSSE)
	top.Handle(sse.LogsRoute, sse.FollowLogs(logsSSE, mux, marshaler, restErrors))
	// A stored table as a file (Arrow IPC or CSV), the response body itself.
	top.Handle(export.Route, loopback.ForwardCredentials(export.New(apiv1.NewResultServiceClient(lc), mux, marshaler, restErrors)))
	// The web console under /ui/, and / sends a browser there. Its graph route reads the
	// catalog over the loopback with the request's credentials, like every REST route.
	top.Handle(console.Prefix, loopback.ForwardCredentials(console.New(console.Config{
		Catalog: apiv1.NewCatalogServiceClient(lc),
		Error: func(w http.ResponseWriter, r *http.Request, err error) {
			restErrors(r.Context(), mux, marshaler, w, r, err)
		},
	})))
	// A trigger's webhook: its signature is checked over the raw body (webhook).
	top.Handle(webhook.Route, webhook.New(apiv1.NewTriggerServiceClient(lc), orchv1.NewTriggerServiceClient(oc), g, lim, marshaler,
		func(w http.ResponseWriter, r *http.Request, err error) {
			restErrors(r.Context(), mux, marshaler, w, r, err)
		}))
	top.Handle("GET /{$}", http.RedirectHandler(console.Prefix, http.StatusFound))
	for pattern, h := range cfg.Routes {
		top.Handle(pattern, h)
	}
	top.Handle("/", mux)
	maxBody := int64(cfg.MaxBodyBytes)
	httpSrv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// A declared size over the limit is refused before anything is read; a chunked
			// body is cut at the limit while it is read.
			if r.ContentLength > maxBody {
				edge.TooLarge(w, marshaler, r.ContentLength, maxBody)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxBody)
			top.ServeHTTP(w, trusted.WithAddr(r))
		}),
		ReadHeaderTimeout: 10 * time.Second,
		// A request is read within ReadTimeout (a body trickled in holds its connection no
		// longer); an idle keep-alive connection is closed after IdleTimeout. No write
		// timeout: waits and event streams answer for as long as they last.
		ReadTimeout:    readTimeout,
		IdleTimeout:    cfg.IdleTimeout,
		MaxHeaderBytes: maxHeaderBytes,
		ConnState:      restConns.ConnState,
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
	// The loopback listener is served until srv.Run's GracefulStop closes it.
	go func() { _ = srv.GRPC.Serve(loop) }()
	rctx, stopReclaim := context.WithCancel(ctx)
	reclaimDone := make(chan struct{})
	defer func() { stopReclaim(); <-reclaimDone }()
	go func() {
		defer close(reclaimDone)
		connlimit.Reclaim(rctx, log, restConns, grpcConns)
	}()
	return srv.Run(ctx, 10*time.Second, serveHTTP)
}

// Defaults of Config.
const (
	DefaultMaxBodyBytes = 2 << 20
	DefaultIdleTimeout  = time.Minute
	DefaultMaxConns     = 2048
)

// Bounds of one REST request: its headers are at most maxHeaderBytes (net/http's default is
// 1 MiB), and it is read within readTimeout.
const (
	maxHeaderBytes = 64 << 10
	readTimeout    = time.Minute
)
