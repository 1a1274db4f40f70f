// Package mesh runs the whole NoETL mesh in one process: an embedded NATS JetStream
// server, a private Postgres cluster (or an external one), and the six services. It backs
// `noetl dev`, the integration tests and the benchmarks.
package mesh

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/noetl/noetl/internal/decisionlink"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/internal/platform/natsembed"
	"github.com/noetl/noetl/internal/platform/pgembed"
	"github.com/noetl/noetl/internal/platform/telemetry"
	"github.com/noetl/noetl/services/gateway"
	"github.com/noetl/noetl/services/materializer"
	"github.com/noetl/noetl/services/orchestrator"
	"github.com/noetl/noetl/services/resultstore"
	"github.com/noetl/noetl/services/statebuilder"
	"github.com/noetl/noetl/services/worker"
)

// Config configures an in-process mesh.
type Config struct {
	// StateDir holds the NATS store and, for the private cluster, the Postgres data.
	StateDir string
	// PostgresURL uses an external Postgres instead of a private cluster, as a role that
	// owns the noetl schema (or may create it) and may create roles: the mesh migrates
	// with it and connects each service as its own login role (PrepareDatabase).
	PostgresURL string
	// PostgresDir holds the private cluster (empty: where pgembed.DirFor puts the cluster
	// of StateDir, which is StateDir/postgres unless its server user cannot reach that).
	PostgresDir string
	// NATSURL uses an external NATS instead of the embedded server.
	NATSURL string
	// NATSSync is the embedded server's JetStream fsync policy, natsembed.Options.Sync:
	// "always", a period such as "2m", or empty for the server's default (2m). It does not
	// apply to an external NATS (NATSURL), which has its own configuration.
	NATSSync string
	// HTTPAddr and GRPCAddr are the gateway's public addresses ("127.0.0.1:0" picks ports).
	HTTPAddr, GRPCAddr string
	// Partitions is the number of execution partitions.
	Partitions int
	// WorkerConcurrency is the number of commands the worker runs at once.
	WorkerConcurrency int
	// ReconcileEvery and StaleAfter tune the orchestrator's reconciler (zero: defaults).
	ReconcileEvery, StaleAfter time.Duration
	// MaxStepEntries, MaxEvents and TenantLimits bound every execution, as the
	// orchestrator's settings of the same names do (zero and empty: its defaults).
	MaxStepEntries, MaxEvents int
	TenantLimits              string
	// SystemPlaybooks registers the system playbooks and their schedules (noetl dev does;
	// tests that want them ask). Retention and TenantRetention are the orchestrator's
	// NOETL_RETENTION and NOETL_TENANT_RETENTION (zero and empty: its defaults).
	SystemPlaybooks bool
	Retention       time.Duration
	TenantRetention string
	// EncryptionKey is the base64 key that encrypts credentials at rest. Empty means the key
	// in <StateDir>/encryption.key, generated there (mode 0600) on first start.
	EncryptionKey string
	// InternalSecret signs the principals the services pass each other. Empty means the
	// secret in <StateDir>/internal.secret, generated there (mode 0600) on first start.
	InternalSecret string
	// AdminKey is an API key stored as an admin and system key of tenant "default" (the
	// orchestrator's bootstrap key). Empty means the key in <StateDir>/admin.key, generated
	// there (mode 0600) on first start.
	AdminKey string
	// Insecure turns the gateway's authentication off: every caller is an admin of tenant
	// "default". Internal calls stay signed.
	Insecure bool
	// KeyCacheTTL is how long the gateway caches a verified API key (zero: its default).
	KeyCacheTTL time.Duration
	// Trace chooses where every service's spans go (zero: nowhere). Each service has its
	// own tracer provider, so spans name the service that made them.
	Trace telemetry.Config
	// MaterializerMaxLag and MaterializerStallAfter tune when the materializer's /readyz
	// reports it saturated (zero: its defaults).
	MaterializerMaxLag     int
	MaterializerStallAfter time.Duration
	// DecideAfterNotice makes every decision follow its commit notice: the materializer
	// does not ask the orchestrator to decide inside its commits (two commits per step,
	// the path taken when the orchestrator does not answer).
	DecideAfterNotice bool
	// LagPoll is how often the services read their consumers' lag (zero: the default).
	LagPoll time.Duration
	// HTTPEgress is the workers' http egress policy: worker.HTTPEgressPublic,
	// HTTPEgressLoopback or HTTPEgressPrivate. Empty means loopback: playbooks reach public
	// addresses and services on this machine (the gateway, an echo server), never private,
	// link-local or cloud metadata addresses; `noetl dev --http-egress` changes it.
	HTTPEgress string
	// Shell lets the shared pool's worker run kind: shell steps (NOETL_WORKER_SHELL): they
	// are arbitrary commands on this machine, so it is off unless asked for; the system
	// pool's worker runs them regardless. `noetl dev --shell` sets it.
	Shell bool
	// Gateway, when set, adjusts the gateway's configuration before it starts, for the
	// settings the mesh has no field of its own for: JWT verification, per-tenant limits,
	// trusted proxies. The mesh's listeners and internal addresses are set already.
	Gateway func(*gateway.Config)
	// Worker, when set, adjusts each worker's configuration before it starts; Pool tells
	// which worker it is ("shared" or "system"), so the pools may differ as they do in a
	// deployment (each pool's NOETL_HTTP_EGRESS, for one).
	Worker func(*worker.Config)
	// Log receives every service's logs.
	Log *slog.Logger
}

// Mesh is a running mesh.
type Mesh struct {
	// HTTPAddr and GRPCAddr are the gateway's public addresses.
	HTTPAddr, GRPCAddr string
	// NATSURL is the NATS the services use. PostgresURL is the Postgres database the mesh
	// migrated, as the role it was given (the private cluster's superuser): tests read
	// and seed tables with it, the services never use it.
	NATSURL, PostgresURL string
	// PostgresURLs are the URLs the services connect with, each as its own login role.
	PostgresURLs PostgresURLs
	// PostgresDir is the private cluster's directory ("" with an external Postgres).
	PostgresDir string
	// OrchestratorAddr is the orchestrator's internal gRPC address (tests resolve
	// credentials there as a worker does).
	OrchestratorAddr string
	// StatebuilderAddr and ResultstoreAddr are the other internal gRPC addresses.
	StatebuilderAddr, ResultstoreAddr string
	// FlightAddr is the resultstore's Arrow Flight address.
	FlightAddr string
	// MaterializerAdminAddr is the materializer's admin HTTP address (/livez, /readyz,
	// /metrics).
	MaterializerAdminAddr string
	// AdminAddrs are the admin HTTP addresses by service: gateway, orchestrator,
	// materializer, statebuilder, resultstore, worker (the shared pool's) and
	// worker-system (the system pool's).
	AdminAddrs map[string]string
	// AdminKey is the API key of an admin (and system) of tenant "default"; AdminKeyCreated
	// tells whether this start generated it.
	AdminKey        string
	AdminKeyCreated bool
	// InternalSecret is the secret the services sign principals with (for tests that start
	// extra replicas beside the mesh).
	InternalSecret string

	trust  *auth.Trust
	gate   *gate
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errMu  sync.Mutex
	err    error
	pg     *pgembed.Cluster
	nats   *natsembed.Server
	done   chan struct{}
}

func listen(addr string) (net.Listener, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	return net.Listen("tcp", addr)
}

// Start starts the mesh and returns once the gateway answers health checks.
func Start(ctx context.Context, cfg Config) (_ *Mesh, err error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if cfg.StateDir == "" {
		return nil, errors.New("mesh: StateDir is required")
	}
	if cfg.EncryptionKey == "" {
		if cfg.EncryptionKey, err = stateKey(cfg.StateDir); err != nil {
			return nil, err
		}
	}
	if cfg.InternalSecret == "" {
		if cfg.InternalSecret, _, err = stateSecret(cfg.StateDir, InternalSecretFile, randomBase64); err != nil {
			return nil, err
		}
	}
	trust, err := auth.NewTrust(cfg.InternalSecret)
	if err != nil {
		return nil, err
	}
	if err := cfg.Trace.Validate(); err != nil {
		return nil, err
	}
	m := &Mesh{done: make(chan struct{}), trust: trust, gate: newGate(), AdminKey: cfg.AdminKey, InternalSecret: cfg.InternalSecret}
	if m.AdminKey == "" {
		if m.AdminKey, m.AdminKeyCreated, err = stateSecret(cfg.StateDir, AdminKeyFile, newAPIKey); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			m.Stop()
		}
	}()
	if cfg.NATSURL == "" {
		ns, err := natsembed.Start(natsembed.Options{StoreDir: filepath.Join(cfg.StateDir, "nats"), Logger: log, Sync: cfg.NATSSync})
		if err != nil {
			return nil, err
		}
		m.nats = ns
		cfg.NATSURL = ns.ClientURL()
	}
	if cfg.PostgresURL == "" {
		if cfg.PostgresDir == "" {
			if cfg.PostgresDir, err = pgembed.DirFor(cfg.StateDir); err != nil {
				return nil, err
			}
		}
		pg, err := pgembed.Start(ctx, pgembed.Options{Dir: cfg.PostgresDir, Fast: true, Logger: log})
		if err != nil {
			return nil, err
		}
		m.pg, m.PostgresDir = pg, cfg.PostgresDir
		cfg.PostgresURL = pg.URL()
	}
	m.NATSURL, m.PostgresURL = cfg.NATSURL, cfg.PostgresURL
	// Migrations run once, here, before any service starts; each service connects as its
	// own role and checks the schema it needs.
	if m.PostgresURLs, err = PrepareDatabase(ctx, cfg.PostgresURL, log); err != nil {
		return nil, err
	}
	if m.pg != nil {
		// The private cluster runs beside the services: they connect through its socket,
		// whose round trip is a third of loopback TCP's (pgembed.SocketURL).
		if m.PostgresURLs, err = m.PostgresURLs.Through(m.pg.SocketURL()); err != nil {
			return nil, err
		}
	}
	pgURLs := m.PostgresURLs

	var lis [10]net.Listener
	for i := range lis {
		if lis[i], err = listen(""); err != nil {
			return nil, err
		}
	}
	gwGRPC, err := listen(cfg.GRPCAddr)
	if err != nil {
		return nil, err
	}
	gwHTTP, err := listen(cfg.HTTPAddr)
	if err != nil {
		return nil, err
	}
	m.GRPCAddr, m.HTTPAddr = gwGRPC.Addr().String(), gwHTTP.Addr().String()

	rctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	run := func(name string, f func(context.Context) error) {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			if err := f(rctx); err != nil && rctx.Err() == nil {
				log.Error("service stopped", slog.String("service", name), slog.String("error", err.Error()))
				m.errMu.Lock()
				if m.err == nil {
					m.err = fmt.Errorf("%s: %w", name, err)
				}
				m.errMu.Unlock()
				cancel()
			}
		}()
	}
	sbAddr, orAddr, rsAddr := lis[0].Addr().String(), lis[1].Addr().String(), lis[2].Addr().String()
	m.OrchestratorAddr, m.StatebuilderAddr, m.ResultstoreAddr = orAddr, sbAddr, rsAddr
	flightLis, err := listen("")
	if err != nil {
		return nil, err
	}
	m.FlightAddr = flightLis.Addr().String()
	m.AdminAddrs = map[string]string{"statebuilder": lis[3].Addr().String(), "resultstore": lis[4].Addr().String(), "materializer": lis[5].Addr().String(),
		"orchestrator": lis[6].Addr().String(), "worker": lis[7].Addr().String(), "gateway": lis[8].Addr().String(), "worker-system": lis[9].Addr().String()}
	m.MaterializerAdminAddr = m.AdminAddrs["materializer"]
	// The materializer asks the orchestrator of this process for its decisions by a call,
	// and over orAddr only while that orchestrator does not serve (decisionlink).
	link := &decisionlink.Link{}
	run("statebuilder", func(ctx context.Context) error {
		return statebuilder.Run(ctx, statebuilder.Config{PostgresURL: pgURLs.Statebuilder, InternalSecret: cfg.InternalSecret, Trace: cfg.Trace, GRPCListener: lis[0], AdminListener: lis[3]}, log)
	})
	run("resultstore", func(ctx context.Context) error {
		return resultstore.Run(ctx, resultstore.Config{PostgresURL: pgURLs.Resultstore, InternalSecret: cfg.InternalSecret, Trace: cfg.Trace, GRPCListener: lis[2], AdminListener: lis[4], FlightListener: flightLis}, log)
	})
	run("materializer", func(ctx context.Context) error {
		return materializer.Run(ctx, materializer.Config{NATSInProcess: m.inProcessNATS(), PostgresURL: pgURLs.Materializer, InternalSecret: cfg.InternalSecret, OrchestratorAddr: inlineDecider(cfg, orAddr), DecisionLink: link, NATSURL: cfg.NATSURL, StreamReplicas: 1, Partitions: cfg.Partitions, Trace: cfg.Trace,
			MaxLag: cfg.MaterializerMaxLag, StallAfter: cfg.MaterializerStallAfter, LagPoll: cfg.LagPoll, Gate: m.gate.wait, AdminListener: lis[5]}, log)
	})
	run("orchestrator", func(ctx context.Context) error {
		return orchestrator.Run(ctx, orchestrator.Config{NATSInProcess: m.inProcessNATS(), DecisionLink: link, PostgresURL: pgURLs.Orchestrator, StreamReplicas: 1, InternalSecret: cfg.InternalSecret, BootstrapAPIKey: m.AdminKey, NATSURL: cfg.NATSURL, StatebuilderAddr: sbAddr, ResultstoreAddr: rsAddr, Partitions: cfg.Partitions, EncryptionKey: cfg.EncryptionKey, ReconcileEvery: cfg.ReconcileEvery, StaleAfter: cfg.StaleAfter, MaxStepEntries: cfg.MaxStepEntries, MaxEvents: cfg.MaxEvents, TenantLimits: cfg.TenantLimits, SystemPlaybooks: cfg.SystemPlaybooks, Retention: cfg.Retention, TenantRetention: cfg.TenantRetention, Trace: cfg.Trace, GRPCListener: lis[1], AdminListener: lis[6]}, log)
	})
	for pool, admin := range map[string]net.Listener{"shared": lis[7], "system": lis[9]} {
		wcfg := worker.Config{NATSInProcess: m.inProcessNATS(), NATSURL: cfg.NATSURL, StreamReplicas: 1, InternalSecret: cfg.InternalSecret, Pool: pool, Partitions: cfg.Partitions, Concurrency: cfg.WorkerConcurrency, OrchestratorAddr: orAddr, StatebuilderAddr: sbAddr, ResultstoreAddr: rsAddr, FlightAddr: m.FlightAddr, HTTPEgress: cmp.Or(cfg.HTTPEgress, worker.HTTPEgressLoopback), Shell: cfg.Shell, Trace: cfg.Trace, LagPoll: cfg.LagPoll, AdminListener: admin}
		if cfg.Worker != nil {
			cfg.Worker(&wcfg)
		}
		name := "worker"
		if pool != "shared" {
			name += "-" + pool
		}
		run(name, func(ctx context.Context) error { return worker.Run(ctx, wcfg, log) })
	}
	gcfg := gateway.Config{InternalSecret: cfg.InternalSecret, Insecure: cfg.Insecure, KeyCacheTTL: cfg.KeyCacheTTL, Trace: cfg.Trace, OrchestratorAddr: orAddr, StatebuilderAddr: sbAddr, ResultstoreAddr: rsAddr, FlightLocation: "grpc://" + m.FlightAddr, GRPCListener: gwGRPC, HTTPListener: gwHTTP, AdminListener: lis[8],
		Routes: map[string]http.Handler{"/livez": http.HandlerFunc(livez), "/readyz": http.HandlerFunc(m.readyz)}}
	if cfg.Gateway != nil {
		cfg.Gateway(&gcfg)
	}
	run("gateway", func(ctx context.Context) error { return gateway.Run(ctx, gcfg, log) })
	go func() {
		m.wg.Wait()
		close(m.done)
	}()
	// Ready when every gRPC service answers SERVING and the materializer holds its leases.
	for _, addr := range []string{sbAddr, orAddr, rsAddr, m.GRPCAddr} {
		if err := waitServing(ctx, addr, m.done, 60*time.Second); err != nil {
			if e := m.Err(); e != nil {
				return nil, e
			}
			return nil, err
		}
	}
	if err := waitReady(ctx, "http://"+m.MaterializerAdminAddr+"/readyz", m.done, 60*time.Second); err != nil {
		if e := m.Err(); e != nil {
			return nil, e
		}
		return nil, err
	}
	return m, nil
}

// TraceConfig reads the value of `noetl dev --trace`: empty is off, "stdout" writes spans
// to standard output, anything else is the address of an OTLP/gRPC collector.
func TraceConfig(v string) telemetry.Config {
	switch v = strings.TrimSpace(v); {
	case v == "" || strings.EqualFold(v, telemetry.ExporterNone):
		return telemetry.Config{}
	case strings.EqualFold(v, telemetry.ExporterStdout):
		return telemetry.Config{Exporter: telemetry.ExporterStdout}
	default:
		return telemetry.Config{Exporter: telemetry.ExporterOTLP, Endpoint: v}
	}
}

// Files of the state directory that hold generated secrets (mode 0600).
const (
	EncryptionKeyFile  = "encryption.key"
	InternalSecretFile = "internal.secret"
	AdminKeyFile       = "admin.key"
	// PostgresURLFile holds the private cluster's URL while `noetl dev` runs it.
	PostgresURLFile = "postgres.url"
)

// stateKey returns the credential encryption key kept in dir/encryption.key, generating a
// random one there on first use. Keeping it beside the data means credentials stored by one
// `noetl dev` remain readable by the next.
func stateKey(dir string) (string, error) {
	k, _, err := stateSecret(dir, EncryptionKeyFile, randomBase64)
	return k, err
}

// randomBase64 returns base64 of 32 random bytes.
func randomBase64() (string, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(key), nil
}

// newAPIKey returns a new API key.
func newAPIKey() (string, error) {
	key, _, _, err := auth.NewAPIKey()
	return key, err
}

// stateSecret returns the secret kept in dir/name, generating it with gen on first use
// (created is then true). The file is private to the user (mode 0600).
func stateSecret(dir, name string, gen func() (string, error)) (secret string, created bool, err error) {
	path := filepath.Join(dir, name)
	if b, err := os.ReadFile(path); err == nil {
		if k := strings.TrimSpace(string(b)); k != "" {
			return k, false, nil
		}
		return "", false, fmt.Errorf("mesh: %s is empty; remove it to generate a new one", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("mesh: %s: %w", name, err)
	}
	enc, err := gen()
	if err != nil {
		return "", false, fmt.Errorf("mesh: %s: %w", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, fmt.Errorf("mesh: %s: %w", name, err)
	}
	// Write a private temporary file (CreateTemp makes it 0600), then link it into place:
	// the link fails if the file appeared meanwhile (another mesh on the same dir), and no
	// reader sees a partial file.
	tmp, err := os.CreateTemp(dir, "."+name+"-*")
	if err != nil {
		return "", false, fmt.Errorf("mesh: %s: %w", name, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	_, err = tmp.WriteString(enc + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path)
	}
	if errors.Is(err, fs.ErrExist) {
		return stateSecret(dir, name, gen)
	}
	if err != nil {
		return "", false, fmt.Errorf("mesh: %s: %w", name, err)
	}
	return enc, true, nil
}

// Dial connects to the gateway's gRPC API with the admin key.
func (m *Mesh) Dial() (*grpc.ClientConn, error) {
	return grpcx.DialSigned(m.GRPCAddr, auth.Bearer(m.AdminKey))
}

// DialInternal connects to an internal service at addr, signing every call as the
// internal service name (as the services do among themselves).
func (m *Mesh) DialInternal(addr, service string) (*grpc.ClientConn, error) {
	return grpcx.DialSigned(addr, m.trust.Service(service))
}

// waitReady polls url until it answers 200 (a service's /readyz).
func waitReady(ctx context.Context, url string, done <-chan struct{}, timeout time.Duration) error {
	return waitFor(ctx, done, timeout, func() string { return probe(ctx, url) }, url+" not ready")
}

// waitServing waits until the gRPC service at addr answers its health check SERVING.
func waitServing(ctx context.Context, addr string, done <-chan struct{}, timeout time.Duration) error {
	conn, err := grpcx.Dial(addr)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	client := healthpb.NewHealthClient(conn)
	return waitFor(ctx, done, timeout, func() string {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		resp, err := client.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		switch {
		case err != nil:
			return err.Error()
		case resp.GetStatus() != healthpb.HealthCheckResponse_SERVING:
			return resp.GetStatus().String()
		}
		return "ok"
	}, "service at "+addr+" not serving")
}

// waitFor calls check, with a growing pause between calls, until it answers "ok", the
// timeout passes (the error says what, and check's last answer), ctx ends or done closes.
func waitFor(ctx context.Context, done <-chan struct{}, timeout time.Duration, check func() string, what string) error {
	deadline := time.Now().Add(timeout)
	backoff := 10 * time.Millisecond
	for {
		why := check()
		if why == "ok" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s after %s: %s", what, timeout, why)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return errors.New("mesh stopped while starting")
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 200*time.Millisecond)
	}
}

// PauseMaterializer holds the materializer's loop before its next commit, as a stuck
// commit would, until resume is called: events pile up in its consumer while the rest of
// the materializer (admin server, lag monitor) keeps running.
func (m *Mesh) PauseMaterializer() (resume func()) {
	m.gate.close()
	return m.gate.open
}

// gate holds whoever waits on it while closed.
type gate struct {
	mu     sync.Mutex
	opened chan struct{} // closed while the gate is open
}

func newGate() *gate {
	g := &gate{opened: make(chan struct{})}
	close(g.opened)
	return g
}

// wait returns once the gate is open, or with ctx's error.
func (g *gate) wait(ctx context.Context) error {
	g.mu.Lock()
	opened := g.opened
	g.mu.Unlock()
	select {
	case <-opened:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.opened:
		g.opened = make(chan struct{})
	default: // closed already
	}
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.opened:
	default:
		close(g.opened)
	}
}

// Err returns the first service failure, if any.
func (m *Mesh) Err() error {
	m.errMu.Lock()
	defer m.errMu.Unlock()
	return m.err
}

// Done is closed when every service has stopped.
func (m *Mesh) Done() <-chan struct{} { return m.done }

// Stop stops the services, then NATS and Postgres.
func (m *Mesh) Stop() {
	if m.cancel != nil {
		m.cancel()
		m.wg.Wait()
	}
	if m.nats != nil {
		m.nats.Shutdown()
	}
	if m.pg != nil {
		_ = m.pg.Stop()
	}
}

// inlineDecider is the orchestrator address the materializer asks for decisions inside its
// commits, or "" with cfg.DecideAfterNotice.
func inlineDecider(cfg Config, orAddr string) string {
	if cfg.DecideAfterNotice {
		return ""
	}
	return orAddr
}

// inProcessNATS is the embedded NATS server the services connect to without a socket, or
// nil with an external NATS (Config.NATSURL).
func (m *Mesh) inProcessNATS() nats.InProcessConnProvider {
	if m.nats == nil {
		return nil
	}
	return m.nats.NATS()
}
