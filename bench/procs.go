package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/internal/platform/natsembed"
	"github.com/noetl/noetl/internal/platform/pgembed"
)

// procsRev, when set, builds the service binaries from that git revision (a snapshot by
// git archive) instead of the working tree, which others may be editing.
var procsRev = flag.String("procs-rev", "", "with --procs: build the services from this git revision (e.g. HEAD) instead of the working tree")

// procsLogs, when set, is a directory the service processes' logs are written to and left
// in; otherwise they go to the temporary directory and are removed with it.
var procsLogs = flag.String("procs-logs", "", "with --procs: keep the services' (and, for chain, concurrent and fanout, the NATS server's) logs in this directory (with GODEBUG=gctrace=1 in the environment, their GC traces)")

// procServices are the service binaries a process mesh runs, in start order.
var procServices = []string{"statebuilder", "resultstore", "materializer", "orchestrator", "worker", "gateway"}

// procStopTimeout bounds the wait for a service process to exit after SIGTERM before it
// is killed.
const procStopTimeout = 15 * time.Second

// procMesh is the six services, each built from ./services and running as its own OS
// process against a private Postgres and a NATS server (its own process, or embedded in the
// bench process), so that each one's memory and CPU can be read from /proc/<pid>.
type procMesh struct {
	// GRPCAddr and HTTPAddr are the gateway's gRPC and REST addresses; AdminKey the
	// bootstrap admin API key.
	GRPCAddr, HTTPAddr, AdminKey string
	// Procs is the GOMAXPROCS each service process was given (procsChartCPU), nil when
	// they were left to the runtime or to GOMAXPROCS in the bench's environment.
	Procs map[string]int

	dir   string
	pg    *pgembed.Cluster
	nats  *natsembed.Server
	procs []*serviceProc
	// natsProc is the NATS server when it runs as its own process (procMeshOptions), nil
	// when it is embedded in the bench process.
	natsProc *serviceProc
}

// procMeshOptions are the choices of startProcMeshWith.
type procMeshOptions struct {
	// natsProcess runs the NATS server (bench/chaos/natsnode, JetStream with the server's
	// default sync) as its own OS process instead of embedded in the bench process, so that
	// its CPU and memory are its own.
	natsProcess bool
}

// serviceProc is one running service process.
type serviceProc struct {
	name  string
	cmd   *exec.Cmd
	admin string // admin HTTP address (/readyz, /metrics)
	logf  *os.File
	done  chan struct{} // closed once the process has been reaped
}

// startProcMesh builds the service binaries into a temporary directory and starts each as
// its own process, the next once the one before reports ready, with the NATS server as a
// process of its own too (so that every figure by process has NATS's); it returns once the
// gateway serves the catalog. Stop stops everything it started.
func startProcMesh(ctx context.Context, log *slog.Logger) (p *procMesh, err error) {
	return startProcMeshWith(ctx, log, procMeshOptions{natsProcess: true})
}

// startProcMeshWith is startProcMesh with options.
func startProcMeshWith(ctx context.Context, log *slog.Logger, opt procMeshOptions) (p *procMesh, err error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "noetl-bench-procs-")
	if err != nil {
		return nil, err
	}
	p = &procMesh{dir: dir}
	// A failing return sets p to nil: stop what was started through a copy.
	started := p
	defer func() {
		if err != nil {
			started.Stop()
		}
	}()
	// The private Postgres runs as the postgres user when we are root.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	src, err := buildSource(ctx, root, dir, *procsRev)
	if err != nil {
		return nil, err
	}
	if *procsLogs != "" {
		if err := os.MkdirAll(*procsLogs, 0o755); err != nil {
			return nil, err
		}
	}
	bin := filepath.Join(dir, "bin")
	for _, s := range procServices {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, s), "./services/"+s+"/cmd/"+s)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build %s: %w: %s", s, err, out)
		}
	}
	if opt.natsProcess {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, "nats"), "./bench/chaos/natsnode")
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build nats: %w: %s", err, out)
		}
	}
	pgURL := os.Getenv("NOETL_PG_URL")
	if pgURL == "" {
		if p.pg, err = pgembed.Start(ctx, pgembed.Options{Dir: filepath.Join(dir, "postgres"), Fast: true, Logger: log}); err != nil {
			return nil, err
		}
		pgURL = p.pg.URL()
	}
	natsURL := ""
	if opt.natsProcess {
		if natsURL, err = p.startNATSProc(ctx, bin); err != nil {
			return nil, err
		}
	} else {
		if p.nats, err = natsembed.Start(natsembed.Options{StoreDir: filepath.Join(dir, "nats"), Logger: log}); err != nil {
			return nil, err
		}
		natsURL = p.nats.ClientURL()
	}
	var ports [6]string
	for i := range ports {
		if ports[i], err = freeAddr(); err != nil {
			return nil, err
		}
	}
	sb, rs, or, gwHTTP, gwGRPC, fl := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	if p.AdminKey, _, _, err = auth.NewAPIKey(); err != nil {
		return nil, err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	p.GRPCAddr, p.HTTPAddr = gwGRPC, gwHTTP
	env := append(os.Environ(),
		"NOETL_INTERNAL_SECRET="+hex.EncodeToString(secret), "NOETL_BOOTSTRAP_API_KEY="+p.AdminKey,
		"NOETL_NATS_URL="+natsURL,
		"NOETL_STATEBUILDER_GRPC="+sb, "NOETL_STATEBUILDER_ADDR="+sb,
		"NOETL_RESULTSTORE_GRPC="+rs, "NOETL_RESULTSTORE_ADDR="+rs,
		"NOETL_ORCHESTRATOR_GRPC="+or, "NOETL_ORCHESTRATOR_ADDR="+or,
		"NOETL_GATEWAY_HTTP="+gwHTTP, "NOETL_GATEWAY_GRPC="+gwGRPC,
		"NOETL_RESULTSTORE_FLIGHT="+fl, "NOETL_RESULTSTORE_FLIGHT_ADDR="+fl, "NOETL_RESULTSTORE_FLIGHT_LOCATION=grpc://"+fl,
	)
	env = append(env, gatewayLimitsEnv()...)
	// The migrate step first (as a deployment's migrate job would), then each service, as
	// its own Postgres role, once the ones before it are ready, so that no client starts in
	// a dial backoff towards a peer still starting.
	urls, err := mesh.PrepareDatabase(ctx, pgURL, log)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	pgFor := map[string]string{"statebuilder": urls.Statebuilder, "resultstore": urls.Resultstore, "materializer": urls.Materializer, "orchestrator": urls.Orchestrator}
	if *procsChartCPU && os.Getenv("GOMAXPROCS") == "" { // GOMAXPROCS in the environment sets every service's
		if p.Procs, err = chartProcs(root, runtime.NumCPU()); err != nil {
			return nil, err
		}
	}
	for _, s := range procServices {
		admin, err := freeAddr()
		if err != nil {
			return nil, err
		}
		logf, err := os.Create(p.logPath(s))
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(filepath.Join(bin, s), "--admin", admin)
		cmd.Env = append([]string{}, env...)
		if u := pgFor[s]; u != "" {
			cmd.Env = append(cmd.Env, "NOETL_PG_URL="+u)
		}
		if p.Procs != nil {
			cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(p.Procs[s]))
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		// The service dies with the bench process should the bench be killed.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			_ = logf.Close()
			return nil, fmt.Errorf("start %s: %w", s, err)
		}
		sp := &serviceProc{name: s, cmd: cmd, admin: admin, logf: logf, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); close(sp.done) }()
		p.procs = append(p.procs, sp)
		if err := waitUntil(ctx, 60*time.Second, func() error {
			select {
			case <-sp.done:
				return errExited
			default:
			}
			resp, err := http.Get("http://" + admin + "/readyz")
			if err != nil {
				return err
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("readyz: %d", resp.StatusCode)
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("%s not ready: %w; log:\n%s", s, err, p.logTail(s))
		}
	}
	// Listing the catalog needs the gateway and the orchestrator.
	if err := waitUntil(ctx, 60*time.Second, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+gwHTTP+"/v1/playbooks", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+p.AdminKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("gateway: %d", resp.StatusCode)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("the gateway does not list the catalog: %w; gateway log:\n%s\norchestrator log:\n%s", err, p.logTail("gateway"), p.logTail("orchestrator"))
	}
	return p, nil
}

// buildSource is the tree the services are built from: root itself, or when rev is set a
// snapshot of that revision extracted under dir.
func buildSource(ctx context.Context, root, dir, rev string) (string, error) {
	if rev == "" {
		return root, nil
	}
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, rev, src)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("snapshot %s: %w: %s", rev, err, out)
	}
	return src, nil
}

// errExited is a service process that exited while it was awaited.
var errExited = errors.New("process exited")

// Stop stops every service process (SIGTERM, then SIGKILL after procStopTimeout) in
// reverse start order, then NATS and Postgres, and removes the temporary directory.
func (p *procMesh) Stop() {
	for i := len(p.procs) - 1; i >= 0; i-- {
		p.procs[i].stop()
	}
	p.procs = nil
	if p.natsProc != nil {
		p.natsProc.stop()
		p.natsProc = nil
	}
	if p.nats != nil {
		p.nats.Shutdown()
	}
	if p.pg != nil {
		_ = p.pg.Stop()
	}
	_ = os.RemoveAll(p.dir)
}

// stop stops the process: SIGTERM, then SIGKILL after procStopTimeout.
func (sp *serviceProc) stop() {
	_ = sp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-sp.done:
	case <-time.After(procStopTimeout):
		_ = sp.cmd.Process.Kill()
		<-sp.done
	}
	_ = sp.logf.Close()
}

// startNATSProc starts the NATS server built into bin as its own process, with JetStream
// stored under the mesh's directory, waits until its health check (JetStream included)
// passes, and returns its client URL.
func (p *procMesh) startNATSProc(ctx context.Context, bin string) (string, error) {
	client, err := freeAddr()
	if err != nil {
		return "", err
	}
	mon, err := freeAddr()
	if err != nil {
		return "", err
	}
	host, port, _ := net.SplitHostPort(client)
	_, monPort, _ := net.SplitHostPort(mon)
	logf, err := os.Create(p.logPath("nats"))
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(bin, "nats"), "-n", "noetl-bench", "-a", host, "-p", port, "-m", monPort, "-js", "-sd", filepath.Join(p.dir, "nats"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return "", fmt.Errorf("start nats: %w", err)
	}
	sp := &serviceProc{name: "nats", cmd: cmd, admin: mon, logf: logf, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(sp.done) }()
	p.natsProc = sp
	if err := waitUntil(ctx, 30*time.Second, func() error {
		select {
		case <-sp.done:
			return errExited
		default:
		}
		resp, err := http.Get("http://" + mon + "/healthz")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz: %d", resp.StatusCode)
		}
		return nil
	}); err != nil {
		return "", fmt.Errorf("nats not ready: %w; log:\n%s", err, p.logTail("nats"))
	}
	return "nats://" + client, nil
}

// proc is the running service named name, nil if none.
func (p *procMesh) proc(name string) *serviceProc {
	for _, sp := range p.procs {
		if sp.name == name {
			return sp
		}
	}
	return nil
}

// logPath is the file a service's log is written to.
func (p *procMesh) logPath(name string) string {
	if *procsLogs != "" {
		return filepath.Join(*procsLogs, name+".log")
	}
	return filepath.Join(p.dir, name+".log")
}

// logTail is the end of a service's log.
func (p *procMesh) logTail(name string) string {
	b, _ := os.ReadFile(p.logPath(name))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// rssMB is a process's resident set (VmRSS) and its peak (VmHWM) in MB.
func (sp *serviceProc) rssMB() (rss, hwm float64) {
	return pidStatusMB(sp.cmd.Process.Pid, "VmRSS:"), pidStatusMB(sp.cmd.Process.Pid, "VmHWM:")
}

// heapInuseMB is the service's go_memstats_heap_inuse_bytes from its /metrics, in MB
// (0 when it cannot be read).
func (sp *serviceProc) heapInuseMB() float64 {
	resp, err := http.Get("http://" + sp.admin + "/metrics")
	if err != nil {
		return 0
	}
	defer func() { _ = resp.Body.Close() }()
	s := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "go_memstats_heap_inuse_bytes "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v / (1 << 20)
		}
	}
	return 0
}

// pidStatusMB reads a kB field of /proc/<pid>/status in MB (0 when it cannot be read).
func pidStatusMB(pid int, field string) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), field); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

// repoRoot is the directory holding go.work, searched upwards from the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work above the working directory: run the bench from the repository")
		}
		dir = parent
	}
}

// freeAddr is a free TCP address on 127.0.0.1.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// waitUntil retries f every 50 ms until it succeeds, returns errExited, or d passes.
func waitUntil(ctx context.Context, d time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		err := f()
		if err == nil || errors.Is(err, errExited) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// procMem is one process's memory at one point of a run, in MB.
type procMem struct {
	rss, hwm  float64 // VmRSS, VmHWM
	heapInuse float64 // go_memstats_heap_inuse_bytes (0 for the bench process)
}

// measured are the services whose memory the longloop workload's rss fields sum.
var measured = []string{"orchestrator", "statebuilder"}

// procMeter reads the memory of a process mesh's services: the rss fields are the sum of
// the orchestrator's and the statebuilder's.
type procMeter struct{ p *procMesh }

func (m procMeter) sampleMB() float64 {
	var sum float64
	for _, s := range measured {
		rss, _ := m.p.proc(s).rssMB()
		sum += rss
	}
	return sum
}

func (m procMeter) read(seq int64) memReading {
	r := memReading{seq: seq, procs: map[string]procMem{}}
	for _, sp := range m.p.procs {
		var pm procMem
		pm.rss, pm.hwm = sp.rssMB()
		pm.heapInuse = sp.heapInuseMB()
		r.procs[sp.name] = pm
	}
	if sp := m.p.natsProc; sp != nil {
		var pm procMem
		pm.rss, pm.hwm = sp.rssMB()
		r.procs[sp.name] = pm // the NATS server has no Go /metrics
	}
	r.procs["bench"] = procMem{rss: currentRSSMB(), hwm: peakRSSMB()}
	return r
}

func (m procMeter) rss(r memReading) (cur, peak float64) {
	for _, s := range measured {
		cur += r.procs[s].rss
		peak += r.procs[s].hwm
	}
	return cur, peak
}

func (m procMeter) report(out map[string]any, first, end memReading) {
	var hwm, rss [2]float64
	for _, s := range measured {
		hwm[0] += first.procs[s].hwm
		hwm[1] += end.procs[s].hwm
		rss[0] += first.procs[s].rss
		rss[1] += end.procs[s].rss
	}
	out["rss_of"] = strings.Join(measured, "+")
	out["rss_mb_at_10k"] = round1(hwm[0])
	out["rss_mb_end"] = round1(hwm[1])
	out["rss_ratio"] = round3(hwm[1] / hwm[0])
	out["current_rss_mb"] = []float64{round1(rss[0]), round1(rss[1])}
	by := map[string]any{}
	others := map[string]float64{}
	for name, e := range end.procs {
		f := first.procs[name]
		by[name] = map[string][]float64{
			"rss":        {round1(f.rss), round1(e.rss)},
			"peak_rss":   {round1(f.hwm), round1(e.hwm)},
			"heap_inuse": {round1(f.heapInuse), round1(e.heapInuse)},
		}
		if name != "orchestrator" && name != "statebuilder" {
			others[name] = round1(e.hwm)
		}
	}
	out["by_process_mb"] = by
	out["other_peak_rss_mb_end"] = others
	if m.p.Procs != nil {
		out["gomaxprocs_by_process"] = m.p.Procs // each service's, from the chart's CPU limits
	}
	out["memory_scope"] = "each service runs as its own OS process (built from ./services); rss_mb_at_10k and rss_mb_end are the peak resident set (VmHWM, /proc/<pid>/status) of the orchestrator plus the statebuilder process when the log passed 10,000 events and at the end, current_rss_mb their VmRSS then, rss_mb_samples their VmRSS every second; by_process_mb gives each process's rss, peak_rss and heap_inuse (go_memstats_heap_inuse_bytes from its /metrics) at 10k events and at the end, \"bench\" being the bench process (the client alone) and \"nats\" the NATS server's process (bench/chaos/natsnode); other_peak_rss_mb_end is the other processes' peak at the end, for context (Postgres not included)"
}

// runLongloopProcs runs the longloop workload against a process mesh.
func runLongloopProcs(ctx context.Context, n int) error {
	// An interrupt stops the processes and Postgres before the bench exits.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	p, err := startProcMesh(ctx, log)
	if err != nil {
		return err
	}
	defer p.Stop()
	conn, err := grpcx.DialSigned(p.GRPCAddr, auth.Bearer(p.AdminKey))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	cpu := procsCPUMeter(p)
	err = runLongloop(ctx, apiv1.NewCatalogServiceClient(conn), apiv1.NewExecutionServiceClient(conn), n, procMeter{p}, &cpu)
	if err != nil {
		for _, s := range procServices {
			fmt.Fprintf(os.Stderr, "--- %s log (tail):\n%s\n", s, p.logTail(s))
		}
	}
	return err
}
