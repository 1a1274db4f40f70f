package chaos

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/pgembed"
)

// Service kinds, the targets of the nemesis's kills.
const (
	kindGateway      = "gateway"
	kindOrchestrator = "orchestrator"
	kindMaterializer = "materializer"
	kindStatebuilder = "statebuilder"
	kindResultstore  = "resultstore"
	kindWorker       = "worker"
	kindNATS         = "nats"
	kindPostgres     = "postgres"
)

// serviceBinaries are the service commands built from the workspace.
var serviceBinaries = []string{"gateway", "orchestrator", "materializer", "statebuilder", "resultstore", "worker"}

// readyTimeout bounds the wait for one process to become ready.
const readyTimeout = 90 * time.Second

// stopTimeout bounds a graceful stop before SIGKILL.
const stopTimeout = 20 * time.Second

// cluster is Postgres, a three-node NATS JetStream cluster and every service as its own OS
// process, all on 127.0.0.1, with their data and logs under one run directory.
type cluster struct {
	dir string // the run directory
	bin string // the built binaries

	pgMu     sync.Mutex
	pg       *pgembed.Cluster
	pgPort   int
	pgFast   bool
	pgStarts int

	// noetlURL is the services' database; chaosURL the probes' (effects, effect_once),
	// both as the superuser.
	noetlURL, chaosURL string

	nats    []*proc
	natsURL string // every node's client URL, comma-separated
	natsMon []string

	services []*proc
	orchLB   *balancer

	// grpcAddr and httpAddr are the gateway's; adminKey the bootstrap admin (and system)
	// key of tenant default; secret the internal secret (the checker signs service calls
	// to the statebuilder with it).
	grpcAddr, httpAddr string
	adminKey, secret   string
	statebuilderAddr   string
}

// clusterOptions configures startCluster.
type clusterOptions struct {
	// Dir is the run directory (created by the caller, readable by the postgres user).
	Dir string
	// Rev builds the services from this git revision instead of the working tree.
	Rev string
	// PGFast turns Postgres durability off (fsync, synchronous_commit): the issue's
	// "lost log tail" configuration.
	PGFast bool
	// Shared and System are the worker counts of the two pools.
	Shared, System int
	// WorkerConcurrency is NOETL_WORKER_CONCURRENCY.
	WorkerConcurrency int
	// Logf reports progress.
	Logf func(format string, args ...any)
}

// startCluster builds the binaries once and starts everything, each process once the
// ones it needs are ready. On error everything started is stopped.
func startCluster(ctx context.Context, o clusterOptions) (c *cluster, err error) {
	c = &cluster{dir: o.Dir, bin: filepath.Join(o.Dir, "bin"), pgFast: o.PGFast}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	if err := c.build(ctx, o.Rev); err != nil {
		return nil, err
	}
	o.Logf("built %s", c.bin)
	if err := c.startPostgres(ctx); err != nil {
		return nil, err
	}
	o.Logf("postgres on 127.0.0.1:%d", c.pgPort)
	if err := c.startNATS(ctx); err != nil {
		return nil, err
	}
	o.Logf("nats cluster %s", c.natsURL)
	if err := c.startServices(ctx, o); err != nil {
		return nil, err
	}
	return c, nil
}

// build compiles the six services (from the working tree or a snapshot of rev) and the
// NATS node command (always from the working tree) in one go build.
func (c *cluster) build(ctx context.Context, rev string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	src := root
	if rev != "" {
		src = filepath.Join(c.dir, "src")
		if err := os.Mkdir(src, 0o755); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, rev, src)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("snapshot %s: %w: %s", rev, err, out)
		}
	}
	if err := os.MkdirAll(c.bin, 0o755); err != nil {
		return err
	}
	args := []string{"build", "-o", c.bin + "/"}
	for _, s := range serviceBinaries {
		args = append(args, "./services/"+s+"/cmd/"+s)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build services: %w: %s", err, out)
	}
	cmd = exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(c.bin, "natsnode"), "./bench/chaos/natsnode")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build natsnode: %w: %s", err, out)
	}
	return nil
}

// startPostgres starts the private Postgres and creates the services' database and the
// probes' database with their tables and one role per tenant.
func (c *cluster) startPostgres(ctx context.Context) error {
	port, err := freePort() // kept across restarts: see freeAddr
	if err != nil {
		return err
	}
	pg, err := pgembed.Start(ctx, pgembed.Options{Dir: filepath.Join(c.dir, "postgres"), Port: port, Fast: c.pgFast})
	if err != nil {
		return err
	}
	c.pg, c.pgPort, c.pgStarts = pg, pg.Port(), 1
	if c.noetlURL, err = pg.CreateDatabase(ctx, "noetl"); err != nil {
		return err
	}
	if c.chaosURL, err = pg.CreateDatabase(ctx, "chaos"); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, c.chaosURL)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	_, err = conn.Exec(ctx, effectsSchema)
	return err
}

// effectsSchema is the probes' tables: effects has one row per run of a probe (not
// deduplicated), effect_once one row per command (ON CONFLICT DO NOTHING). db_user is the
// role the tenant's credential connected as.
const effectsSchema = `
CREATE TABLE effects (
    id           bigserial   PRIMARY KEY,
    command_id   text        NOT NULL,
    attempt      int         NOT NULL,
    execution_id text        NOT NULL,
    step         text        NOT NULL,
    idx          int         NOT NULL,
    tenant       text        NOT NULL,
    note         text        NOT NULL DEFAULT '',
    db_user      text        NOT NULL DEFAULT current_user,
    at           timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX effects_command ON effects (command_id);
CREATE INDEX effects_execution ON effects (execution_id, step);
CREATE TABLE effect_once (
    command_id   text        PRIMARY KEY,
    execution_id text        NOT NULL,
    step         text        NOT NULL,
    idx          int         NOT NULL,
    tenant       text        NOT NULL,
    db_user      text        NOT NULL DEFAULT current_user,
    at           timestamptz NOT NULL DEFAULT clock_timestamp()
);`

// createTenantRole creates the Postgres role a tenant's probe credential connects as.
func (c *cluster) createTenantRole(ctx context.Context, role, password string) error {
	conn, err := pgx.Connect(ctx, c.chaosURL)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	id := pgx.Identifier{role}.Sanitize()
	for _, q := range []string{
		"CREATE ROLE " + id + " LOGIN PASSWORD '" + strings.ReplaceAll(password, "'", "''") + "'",
		"GRANT SELECT, INSERT ON effects, effect_once TO " + id,
		"GRANT USAGE ON SEQUENCE effects_id_seq TO " + id,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// pgURLFor is the URL of the probes' database as role with password.
func (c *cluster) pgURLFor(role, password string) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/chaos?sslmode=disable", role, password, c.pgPort)
}

// killPostgres sends SIGKILL to the postmaster's process group (every backend with it) and
// waits until the postmaster is gone.
func (c *cluster) killPostgres(ctx context.Context) error {
	c.pgMu.Lock()
	pid := c.pg.PID()
	c.pgMu.Unlock()
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	// pgembed reaps the postmaster; wait until the pid is gone.
	return waitFor(ctx, 30*time.Second, 20*time.Millisecond, func() error {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return fmt.Errorf("postgres pid %d still there", pid)
	})
}

// restartPostgres starts Postgres again on the same directory and port (crash recovery).
func (c *cluster) restartPostgres(ctx context.Context) error {
	pg, err := pgembed.Start(ctx, pgembed.Options{Dir: filepath.Join(c.dir, "postgres"), Port: c.pgPort, Fast: c.pgFast})
	if err != nil {
		return err
	}
	c.pgMu.Lock()
	c.pg = pg
	c.pgStarts++
	c.pgMu.Unlock()
	return nil
}

// startNATS starts three JetStream nodes with routes to each other and waits until each
// reports healthy (JetStream current, a meta leader elected). They fsync every write
// before acknowledging it (sync_interval: always), the setting docs/operations.md ("NATS
// durability") recommends for a 3-node cluster, so a run measures the configuration a
// deployment should have.
func (c *cluster) startNATS(ctx context.Context) error {
	const n = 3
	var client, route, mon [n]string
	for i := range n {
		var err error
		if client[i], err = freeAddr(); err != nil {
			return err
		}
		if route[i], err = freeAddr(); err != nil {
			return err
		}
		if mon[i], err = freeAddr(); err != nil {
			return err
		}
	}
	var urls []string
	for i := range n {
		name := fmt.Sprintf("nats-%d", i)
		store := filepath.Join(c.dir, "nats", name)
		if err := os.MkdirAll(store, 0o755); err != nil {
			return err
		}
		var routes []string
		for j := range n {
			if j != i {
				routes = append(routes, "nats://"+route[j])
			}
		}
		conf := natsNodeConf(name, client[i], mon[i], store, route[i], routes)
		confPath := filepath.Join(c.dir, "nats", name+".conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			return err
		}
		p := &proc{
			kind: kindNATS, name: name, bin: filepath.Join(c.bin, "natsnode"), args: []string{"-c", confPath},
			env: baseEnv(), admin: mon[i], readyPath: "/healthz", logPath: filepath.Join(c.dir, "logs", name+".log"),
		}
		if err := os.MkdirAll(filepath.Dir(p.logPath), 0o755); err != nil {
			return err
		}
		if err := p.start(); err != nil {
			return err
		}
		c.nats = append(c.nats, p)
		urls = append(urls, "nats://"+client[i])
	}
	c.natsURL = strings.Join(urls, ",")
	c.natsMon = mon[:]
	for _, p := range c.nats {
		if err := p.waitReady(ctx, readyTimeout); err != nil {
			return fmt.Errorf("%s not ready: %w; log tail:\n%s", p.name, err, tailFile(p.logPath, 3000))
		}
	}
	return nil
}

// natsNodeConf is the configuration file of one NATS node of the cluster: its name, client,
// monitoring and route addresses, store directory and the routes to the other nodes.
func natsNodeConf(name, client, mon, store, route string, routes []string) string {
	return fmt.Sprintf(`server_name: %s
listen: %q
http: %q
max_payload: 1MB
jetstream {
  store_dir: %q
  max_memory_store: 256MB
  max_file_store: 8GB
  sync_interval: always
}
cluster {
  name: noetl-chaos
  listen: %q
  routes: [%s]
}
`, name, client, mon, store, route, `"`+strings.Join(routes, `", "`)+`"`)
}

// startServices starts the services in dependency order after applying the schema once.
func (c *cluster) startServices(ctx context.Context, o clusterOptions) error {
	var err error
	if c.adminKey, _, _, err = auth.NewAPIKey(); err != nil {
		return err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	c.secret = hex.EncodeToString(secret)
	encKey := make([]byte, 32)
	if _, err := rand.Read(encKey); err != nil {
		return err
	}
	addr := func() string {
		if err != nil {
			return ""
		}
		var a string
		a, err = freeAddr()
		return a
	}
	sb, rs, fl := addr(), addr(), addr()
	orch := []string{addr(), addr()}
	c.grpcAddr, c.httpAddr = addr(), addr()
	if err != nil {
		return err
	}
	c.statebuilderAddr = sb
	if c.orchLB, err = newBalancer(orch); err != nil {
		return err
	}
	common := append(baseEnv(),
		"NOETL_INTERNAL_SECRET="+c.secret,
		"NOETL_NATS_URL="+c.natsURL,
		"NOETL_STREAM_REPLICAS=3",
		"NOETL_STATEBUILDER_ADDR="+sb,
		"NOETL_RESULTSTORE_ADDR="+rs,
		"NOETL_ORCHESTRATOR_ADDR="+c.orchLB.Addr(),
		"NOETL_RESULTSTORE_FLIGHT_ADDR="+fl,
		"NOETL_RESULTSTORE_FLIGHT_LOCATION=grpc://"+fl,
	)
	// The migrate step first, as a deployment's migrate job would; then each service
	// connects as its own Postgres role.
	urls, err := mesh.PrepareDatabase(ctx, c.noetlURL, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	withPG := func(pgURL string, env ...string) []string {
		return append(append(append([]string{}, common...), "NOETL_PG_URL="+pgURL), env...)
	}
	without := func(env ...string) []string { return append(append([]string{}, common...), env...) }

	o.Logf("addresses: statebuilder %s, resultstore %s (flight %s), orchestrators %s behind %s, gateway grpc %s http %s",
		sb, rs, fl, strings.Join(orch, " "), c.orchLB.Addr(), c.grpcAddr, c.httpAddr)
	type spec struct {
		kind, name, bin string
		env             []string
	}
	specs := []spec{
		{kindStatebuilder, "statebuilder-0", "statebuilder", withPG(urls.Statebuilder, "NOETL_STATEBUILDER_GRPC="+sb)},
		{kindResultstore, "resultstore-0", "resultstore", withPG(urls.Resultstore, "NOETL_RESULTSTORE_GRPC="+rs, "NOETL_RESULTSTORE_FLIGHT="+fl)},
	}
	for i := range 2 {
		specs = append(specs, spec{kindMaterializer, fmt.Sprintf("materializer-%d", i), "materializer",
			withPG(urls.Materializer, fmt.Sprintf("NOETL_MATERIALIZER_REPLICA_ID=chaos-materializer-%d", i))})
	}
	for i := range 2 {
		specs = append(specs, spec{kindOrchestrator, fmt.Sprintf("orchestrator-%d", i), "orchestrator",
			withPG(urls.Orchestrator, "NOETL_ORCHESTRATOR_GRPC="+orch[i], "NOETL_BOOTSTRAP_API_KEY="+c.adminKey,
				"NOETL_ENCRYPTION_KEY="+base64.StdEncoding.EncodeToString(encKey))})
	}
	workerEnv := func(pool string, i int) []string {
		return without("NOETL_WORKER_POOL="+pool, fmt.Sprintf("NOETL_WORKER_ID=chaos-worker-%s-%d", pool, i),
			fmt.Sprintf("NOETL_WORKER_CONCURRENCY=%d", o.WorkerConcurrency),
			// The probes' echo server is on 127.0.0.1.
			"NOETL_HTTP_EGRESS=loopback")
	}
	for i := range o.Shared {
		specs = append(specs, spec{kindWorker, fmt.Sprintf("worker-shared-%d", i), "worker", workerEnv("shared", i)})
	}
	for i := range o.System {
		specs = append(specs, spec{kindWorker, fmt.Sprintf("worker-system-%d", i), "worker", workerEnv("system", i)})
	}
	specs = append(specs, spec{kindGateway, "gateway-0", "gateway", without("NOETL_GATEWAY_GRPC="+c.grpcAddr, "NOETL_GATEWAY_HTTP="+c.httpAddr)})
	for _, s := range specs {
		admin, err := freeAddr()
		if err != nil {
			return err
		}
		p := &proc{
			kind: s.kind, name: s.name, bin: filepath.Join(c.bin, s.bin), args: []string{"--admin", admin},
			env: s.env, admin: admin, readyPath: "/readyz", logPath: filepath.Join(c.dir, "logs", s.name+".log"),
		}
		c.services = append(c.services, p)
		if err := p.startReady(ctx, readyTimeout); err != nil {
			return err
		}
		o.Logf("%s ready (admin %s)", s.name, admin)
	}
	// The catalog answering through the gateway needs the gateway and an orchestrator.
	return waitFor(ctx, readyTimeout, 100*time.Millisecond, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.httpAddr+"/v1/playbooks", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+c.adminKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("gateway: %d", resp.StatusCode)
		}
		return nil
	})
}

// procs is every process of a kind ("" for all), NATS nodes included.
func (c *cluster) procs(kind string) []*proc {
	var out []*proc
	for _, p := range append(append([]*proc{}, c.services...), c.nats...) {
		if kind == "" || p.kind == kind {
			out = append(out, p)
		}
	}
	return out
}

// stop stops every process (services first, in reverse start order, then NATS, then
// Postgres) and the balancer.
func (c *cluster) stop() {
	var wg sync.WaitGroup
	for i := len(c.services) - 1; i >= 0; i-- {
		p := c.services[i]
		wg.Add(1)
		go func() { defer wg.Done(); p.shutdown(stopTimeout) }()
	}
	wg.Wait()
	if c.orchLB != nil {
		c.orchLB.Close()
	}
	for _, p := range c.nats {
		wg.Add(1)
		go func() { defer wg.Done(); p.shutdown(stopTimeout) }()
	}
	wg.Wait()
	c.pgMu.Lock()
	pg := c.pg
	c.pgMu.Unlock()
	if pg != nil {
		if err := pg.Stop(); err != nil {
			// Already dead (a kill that was not followed by a restart): its group may hold
			// orphans.
			_ = syscall.Kill(-pg.PID(), syscall.SIGKILL)
		}
	}
}
