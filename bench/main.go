// Command bench measures NoETL end to end and prints one JSON line per workload.
//
//	go run ./bench --workload chain --n 200
//	go run ./bench --workload concurrent --executions 50 --steps 10
//	go run ./bench --workload flood --starts 10000 --concurrency 200
//	go run ./bench --workload chaos --executions 100 --faults 10 --seed 1
//	go run ./bench --workload natssync
//	go run ./bench --workload concurrent --nats-sync always
//	go run ./bench --workload concurrent --executions 1000 --steps 5 --procs
//
// It starts its own mesh in-process (embedded NATS, private Postgres) unless --gateway
// points at a running one; --procs runs chain, concurrent and fanout on one OS process per
// service instead.
//
// The line of chain and concurrent has wall_ms, per_step_ms (wall time over the steps of
// one execution) and steps_per_s (the steps of the executions that completed, over the
// whole run); fanout's has tasks and tasks_per_s. Each also has step_p50_ms and step_p99_ms
// (per-step latency read back from the event logs, latency_scope says what is measured,
// latency_samples over how many; phase_p50_ms and phase_p99_ms split it at the worker's
// start of the command into dispatch and run), starts_shed, waits_shed and reads_shed (calls the gateway
// refused with RESOURCE_EXHAUSTED) and calls_unavailable (UNAVAILABLE), each retried after
// the delay the refusal names or a backoff with jitter, for at most --retry-for and
// --retry-attempts, and, on a mesh the bench started, cpu_s_per_1k_steps (CPU seconds per
// 1,000 steps or tasks, by process; cpu_scope says which, cpu_not_measured what is
// missing) and commits, commits_one_round_trip, commits_one_round_trip_missed and
// commits_head_start (the materializer's transactions in the measured phase; commits_scope),
// and, for the in-process mesh, mesh_gc_cycles, mesh_alloc_mb, mesh_allocs, mesh_minor_faults
// and mesh_heap_grown_mb (its memory in that phase; mesh_memory_scope). Each has warmups (the
// runs before the measured one, --warmups) and gomaxprocs,
// the Go scheduler's processors in the bench's process: the in-process mesh runs on one
// fewer than the machine's cores, as noetl dev does beside its private Postgres
// (mesh.LeaveCoreToPostgres). The other workloads have these where they apply and
// steps_reason where not.
// docs/operations.md ("Benchmarks") has the details.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/services/gateway"
)

func main() {
	workload := flag.String("workload", "chain", "chain | concurrent | fanout | longloop | ingest (the materializer alone against a raw COPY; --ingest-*) | payload (--size-mb) | flight (--rows) | flood (the gateway's memory after --starts starts; --concurrency, --transport, --settle) | natssync (JetStream's acknowledged publishes per second for each sync_interval of --natssync-policies, on one server and on three; --natssync-*) | chaos (the fault harness of bench/chaos: --executions (default 1000), --faults, --seed, --chaos-*)")
	n := flag.Int("n", 200, "steps of the chain workload, iterations of the fanout workload")
	executions := flag.Int("executions", 50, "executions of the concurrent workload (50) and of the chaos workload (1000)")
	steps := flag.Int("steps", 10, "steps per execution of the concurrent workload")
	gateway := flag.String("gateway", "", "use a running gateway (gRPC address, API key in $NOETL_API_KEY) instead of an in-process mesh")
	procs := flag.Bool("procs", true, "longloop (on by default): run each service and the NATS server as its own OS process (built from ./services and bench/chaos/natsnode) against a private Postgres, and measure the orchestrator's and statebuilder's RSS; --procs=false runs the mesh in-process. chain, concurrent, fanout (only when given): run each service and the NATS server as its own OS process, so that cpu_s_per_1k_steps has one figure per process")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the measured phase (in-process mesh included) to this file")
	flag.StringVar(&execTrace, "trace", "", "chain, concurrent, fanout: write a Go execution trace of the measured phase to this file (go tool trace): which goroutines of the bench's process, an in-process mesh's included, ran when, and what each waited on")
	chaosOpts := chaosFlags()
	flag.StringVar(&natsSync, "nats-sync", "", "the in-process mesh's NATS jetstream.sync_interval: always, a period (2m), or empty for the server's default (2m)")
	flag.Parse()
	profile = *cpuprofile
	if *workload == "chaos" {
		if err := runChaos(context.Background(), chaosOpts, *executions); err != nil { // bench/chaos.go
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *workload == "natssync" {
		if err := runNATSSync(context.Background()); err != nil { // bench/natssync.go
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *workload == "flood" {
		if err := runFloodProcs(context.Background()); err != nil { // bench/flood.go
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *workload == "longloop" && *procs && *gateway == "" {
		if err := runLongloopProcs(context.Background(), *n); err != nil { // bench/procs.go
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	// --procs runs chain, concurrent and fanout as one process per service only when given.
	procsSet := false
	flag.Visit(func(f *flag.Flag) { procsSet = procsSet || f.Name == "procs" })
	procsMode := procsSet && *procs && (*workload == "chain" || *workload == "concurrent" || *workload == "fanout")
	if err := run(*workload, *n, *executions, *steps, *gateway, procsMode); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// tenantInFlight and tenantWaits are the gateway's per-tenant caps of calls in flight and
// of waiting calls on a mesh the bench starts (0: the gateway's defaults).
var (
	tenantInFlight = flag.Int("tenant-inflight", 0, "chain, concurrent, fanout, longloop on a mesh the bench starts: the gateway's per-tenant in-flight cap (NOETL_GATEWAY_TENANT_INFLIGHT; 0 keeps its default, 256), which a start without --start-wait holds until it is committed; lowering it shows the client's backoff at a small scale")
	tenantWaits    = flag.Int("tenant-waits", 0, "as --tenant-inflight, the gateway's per-tenant cap of waiting calls (NOETL_GATEWAY_TENANT_WAITS; 0 keeps its default, 4096), which each execution's start that waits, or its WaitExecution, holds until the execution ends")
)

// tenantRPS and tenantBurst are the gateway's per-tenant call rate on a mesh the bench
// starts (0: the gateway's defaults).
var (
	tenantRPS   = flag.Int("tenant-rps", 0, "as --tenant-inflight, the gateway's per-tenant calls per second (NOETL_GATEWAY_TENANT_RPS; 0 keeps its default, 2400): a start and a wait per execution are two calls, so at a low rate 1000 executions of 5 steps cannot start faster than the rate lets them")
	tenantBurst = flag.Int("tenant-burst", 0, "as --tenant-rps, the burst above that rate (NOETL_GATEWAY_TENANT_BURST; 0 keeps its default, 4800)")
)

// gatewayLimits applies --tenant-inflight, --tenant-waits, --tenant-rps and --tenant-burst to an
// in-process mesh's gateway.
func gatewayLimits(c *gateway.Config) {
	if *tenantInFlight > 0 {
		c.TenantInFlight = *tenantInFlight
	}
	if *tenantWaits > 0 {
		c.TenantWaits = *tenantWaits
	}
	if *tenantRPS > 0 {
		c.TenantRPS = *tenantRPS
	}
	if *tenantBurst > 0 {
		c.TenantBurst = *tenantBurst
	}
}

// gatewayLimitsEnv is gatewayLimits for a gateway started as its own process.
func gatewayLimitsEnv() []string {
	var env []string
	for name, v := range map[string]int{"NOETL_GATEWAY_TENANT_INFLIGHT": *tenantInFlight, "NOETL_GATEWAY_TENANT_WAITS": *tenantWaits, "NOETL_GATEWAY_TENANT_RPS": *tenantRPS, "NOETL_GATEWAY_TENANT_BURST": *tenantBurst} {
		if v > 0 {
			env = append(env, name+"="+strconv.Itoa(v))
		}
	}
	return env
}

// profile is the CPU profile path, empty for none.
var profile string

// execTrace is the execution trace path (--trace), empty for none.
var execTrace string

// natsSync is the in-process mesh's NATS sync policy (--nats-sync).
var natsSync string

func chain(name string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: %s, path: bench/%s}\nworkflow:\n", name, name)
	for i := 0; i < n; i++ {
		step := "s" + strconv.Itoa(i)
		if i == 0 {
			step = "start"
		}
		fmt.Fprintf(&b, "  - step: %s\n    tool: {kind: noop}\n", step)
		if i < n-1 {
			fmt.Fprintf(&b, "    next: [{step: s%d}]\n", i+1)
		}
	}
	return b.String()
}

// rssSamples records the resident set every second while a workload runs, to show whether
// memory stays flat as an execution's log grows.
type rssSamples struct {
	mu  sync.Mutex
	mbs []float64
}

func (r *rssSamples) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.mu.Lock()
			r.mbs = append(r.mbs, currentRSSMB())
			r.mu.Unlock()
		}
	}
}

func (r *rssSamples) get() []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]float64(nil), r.mbs...)
}

var samples = &rssSamples{}

// currentRSSMB is this process's resident set (VmRSS).
func currentRSSMB() float64 { return procStatusMB("VmRSS:") }

// fanout is one step looping in parallel over n items with every iteration in flight.
func fanout(name string, n int) string {
	return fmt.Sprintf(`apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: %s, path: bench/%s}
workload:
  n: %d
workflow:
  - step: start
    loop:
      in: "{{ range(workload.n) | list }}"
      iterator: i
      spec: {mode: parallel, max_in_flight: %d}
    tool: {kind: noop}
`, name, name, n, n)
}

func run(workload string, n, executions, steps int, gateway string, procsMode bool) error {
	ctx := context.Background()
	// heap is what mesh.HugePageHeap did to the in-process mesh's heap; nil for a mesh of
	// other processes or another's gateway.
	var heap *mesh.Heap
	if workload == "ingest" {
		return runIngest(ctx) // bench/ingest.go
	}
	switch workload {
	case "payload":
		return runPayload(ctx) // bench/payload.go
	case "flight":
		return runFlight(ctx) // bench/flight.go
	}
	key := os.Getenv("NOETL_API_KEY") // for a running gateway
	meshMode := "gateway " + gateway
	var meter *cpuMeter
	var pm *procMesh
	materializerAdmin := "" // the materializer's /metrics, for commitPathFields
	switch {
	case gateway != "" && procsMode:
		return errors.New("--procs starts its own mesh: it cannot be combined with --gateway")
	case procsMode && natsSync != "":
		return errors.New("--nats-sync sets the in-process mesh's NATS: it cannot be combined with --procs, whose NATS server keeps JetStream's default sync")
	case gateway == "" && procsMode:
		// An interrupt stops the processes and Postgres before the bench exits.
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		p, err := startProcMeshWith(ctx, slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})), procMeshOptions{natsProcess: true})
		if err != nil {
			return err
		}
		defer p.Stop()
		gateway, key, pm, meshMode = p.GRPCAddr, p.AdminKey, p, "procs"
		for _, sp := range p.procs {
			if sp.name == "materializer" {
				materializerAdmin = sp.admin
			}
		}
		m := procsCPUMeter(p)
		meter = &m
	case gateway == "":
		dir, err := os.MkdirTemp("", "noetl-bench-")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(dir) }()
		// The private Postgres runs as the postgres user when we are root.
		if err := os.Chmod(dir, 0o755); err != nil {
			return err
		}
		// As noetl dev does beside its private Postgres (mesh.LeaveCoreToPostgres).
		if os.Getenv("NOETL_PG_URL") == "" {
			mesh.LeaveCoreToPostgres()
		}
		// As noetl dev does by default (mesh.HugePageHeap).
		h, err := mesh.HugePageHeap()
		if err != nil {
			fmt.Fprintf(os.Stderr, "huge pages for the heap: %v\n", err)
		} else if h.Reason != "" {
			fmt.Fprintf(os.Stderr, "huge pages for the heap: none: %s\n", h.Reason)
		}
		heap = &h
		m, err := mesh.Start(ctx, mesh.Config{StateDir: dir, PostgresURL: os.Getenv("NOETL_PG_URL"), NATSSync: natsSync, Gateway: gatewayLimits,
			Log: slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
		if err != nil {
			return err
		}
		defer m.Stop()
		gateway, key, meshMode = m.GRPCAddr, m.AdminKey, "in-process"
		materializerAdmin = m.MaterializerAdminAddr
		cm := inprocCPUMeter(m.PostgresDir)
		meter = &cm
	}
	conn, err := grpcx.DialSigned(gateway, auth.Bearer(key))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	cat := apiv1.NewCatalogServiceClient(conn)
	exe := apiv1.NewExecutionServiceClient(conn)

	perExec, count := n, 1
	name := fmt.Sprintf("%s_%d", workload, n)
	content := chain(name, n)
	switch workload {
	case "chain":
	case "concurrent":
		perExec, count = steps, executions
		name = fmt.Sprintf("%s_%d", workload, steps)
		content = chain(name, steps)
	case "fanout":
		content = fanout(name, n)
	case "longloop":
		return runLongloop(ctx, cat, exe, n, inprocMeter{}, meter) // bench/longloop.go
	default:
		return fmt.Errorf("unknown workload %q (chain, concurrent, fanout)", workload)
	}
	reg, err := cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: content})
	if err != nil {
		return err
	}
	// Warm up: --warmups runs (one by default) so that caches and connections exist.
	for range max(*warmups, 1) {
		if err := once(ctx, exe, reg.GetPlaybook().GetPath()); err != nil {
			return err
		}
	}
	sctx, stopSamples := context.WithCancel(ctx)
	defer stopSamples()
	go samples.run(sctx)
	// The readings of the materializer's /metrics and of the processes' CPU bracket the
	// measured phase from outside, and the profile covers that phase alone, as
	// cpu_s_per_1k_steps does: not the readings (a /metrics answer is compressed by the
	// mesh's own process), nor the read-back of the logs for the latencies after it.
	commitsBefore := commitPath(materializerAdmin)
	var cpuBefore map[string]float64
	if meter != nil {
		cpuBefore = meter.before()
	}
	stopProfile, err := startCPUProfile(profile)
	if err != nil {
		return err
	}
	defer stopProfile()
	stopTrace, err := startTrace(execTrace)
	if err != nil {
		return err
	}
	defer stopTrace()
	sh := &shed{}
	mem := readMeshMemory(meshMode)
	stopPerf, err := startPerfControl(*perfControl) // perfctl.go
	if err != nil {
		return err
	}
	defer func() { _ = stopPerf() }()
	o, err := measure(ctx, exe, reg.GetPlaybook().GetPath(), count, sh)
	if perr := stopPerf(); err == nil && perr != nil {
		err = perr
	}
	if err != nil {
		return err
	}
	stopTrace()
	stopProfile()
	memAfter := readMeshMemory(meshMode)
	var cpuAfter map[string]float64
	if meter != nil {
		cpuAfter = meter.after()
	}
	commitsAfter := commitPath(materializerAdmin)
	stopSamples()
	read, scope := chainStepLatencies, chainLatencyScope
	if workload == "fanout" {
		read, scope = fanoutTaskLatencies, fanoutLatencyScope
	}
	// Every started execution's log is read, a failed one's too: its steps that ended
	// are latencies all the same.
	lat, err := latencies(ctx, exe, o.started(), sh, read)
	if err != nil {
		return err
	}
	out := stepLine(workload, perExec, o, lat, scope, sh)
	out["mesh"] = meshMode
	out["gomaxprocs"] = runtime.GOMAXPROCS(0) // the bench's, and the in-process mesh's
	// The in-process mesh's heap, as mesh.HugePageHeap set it up.
	if heap != nil {
		out["heap_huge_pages"] = heap.HugePages
		out["heap_ahead_mb"] = heap.Ahead >> 20
		out["heap_gogc"] = gogc(heap)
		if heap.MemoryLimit > 0 {
			out["heap_memory_limit_mb"] = heap.MemoryLimit >> 20
		}
	}
	if pm != nil && pm.Procs != nil {
		out["gomaxprocs_by_process"] = pm.Procs // each service's, from the chart's CPU limits
	}
	out["peak_rss_mb"] = peakRSSMB()
	cpuFields(out, meter, cpuBefore, cpuAfter, o.completed()*perExec)
	meshMemoryFields(out, mem, memAfter)
	out["warmups"] = max(*warmups, 1)
	commitPathFields(out, materializerAdmin != "", commitsBefore, commitsAfter)
	if pm != nil {
		// The bench process holds the client alone: the mesh's peak is its processes'.
		by := map[string]float64{"bench": round1(peakRSSMB())}
		var sum float64
		for _, sp := range append(append([]*serviceProc{}, pm.procs...), pm.natsProc) {
			_, hwm := sp.rssMB()
			by[sp.name] = round1(hwm)
			sum += hwm
		}
		out["peak_rss_mb"] = round1(sum)
		out["peak_rss_mb_by_process"] = by
		out["rss_scope"] = "peak_rss_mb is the sum of the peak resident sets (VmHWM) of the services' and the NATS server's processes (Postgres not included); peak_rss_mb_by_process gives each, bench being the bench's client"
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		return err
	}
	if err := o.firstErr(); err != nil {
		return fmt.Errorf("%d of %d %w; the first: %w", count-o.completed(), count, errIncomplete, err)
	}
	return nil
}

// warmups is how many runs of the workload precede the measured one.
var warmups = flag.Int("warmups", 1, "chain, concurrent, fanout: runs of the workload before the measured one (at least one); more leave an in-process mesh's heap and its NATS server's caches at the size they keep, as in a mesh that has run a while, where the first runs of a new process still grow them")

// meshMemory is what the Go runtime and the kernel say of the bench's process, which holds
// an in-process mesh: its garbage collections, its allocations and its minor page faults
// (fresh memory the kernel maps in, about 10 us each on a virtual machine).
type meshMemory struct {
	ok                  bool
	gcs, allocs, faults uint64
	allocBytes, heapSys uint64
}

// readMeshMemory reads meshMemory when the mesh runs in the bench's process.
func readMeshMemory(meshMode string) meshMemory {
	if meshMode != "in-process" {
		return meshMemory{}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return meshMemory{ok: true, gcs: uint64(ms.NumGC), allocs: ms.Mallocs, faults: uint64(ru.Minflt), allocBytes: ms.TotalAlloc, heapSys: ms.HeapSys}
}

// meshMemoryFields adds what the in-process mesh's memory did in the measured phase.
func meshMemoryFields(out map[string]any, before, after meshMemory) {
	if !before.ok || !after.ok {
		return
	}
	out["mesh_gc_cycles"] = after.gcs - before.gcs
	out["mesh_alloc_mb"] = round1(float64(after.allocBytes-before.allocBytes) / (1 << 20))
	out["mesh_allocs"] = after.allocs - before.allocs
	out["mesh_minor_faults"] = after.faults - before.faults
	out["mesh_heap_grown_mb"] = round1((float64(after.heapSys) - float64(before.heapSys)) / (1 << 20))
	out["mesh_memory_scope"] = "the measured phase in the bench's process (the in-process mesh and the bench's client): mesh_gc_cycles garbage collections, mesh_alloc_mb and mesh_allocs allocated, mesh_minor_faults minor page faults (fresh memory mapped in), mesh_heap_grown_mb the Go heap's growth"
}

// peakRSSMB is this process's peak resident set (VmHWM), which includes every in-process
// service but not Postgres.
func peakRSSMB() float64 { return procStatusMB("VmHWM:") }

// procStatusMB reads a kB field of /proc/self/status in MB.
func procStatusMB(field string) float64 {
	f, err := os.Open("/proc/self/status")
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

// startCPUProfile starts a CPU profile (runtime/pprof) written to path; see startRecording.
func startCPUProfile(path string) (stop func(), err error) {
	return startRecording(path, pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// startTrace starts a Go execution trace (runtime/trace) written to path; see
// startRecording. A CPU profile shows where time was spent over many samples; a trace shows
// one run's timeline: on a one-processor mesh, which service's goroutine held the
// processor, and the stretches it sat idle waiting on Postgres.
func startTrace(path string) (stop func(), err error) {
	return startRecording(path, trace.Start, trace.Stop)
}

// startRecording starts a recording of the process (start) into a file created at path,
// and returns what stops it (stop) and closes the file, which may be called more than
// once. An empty path records nothing.
func startRecording(path string, start func(io.Writer) error, stop func()) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			stop()
			_ = f.Close()
		})
	}, nil
}

// gogc is the in-process mesh's collector target: the one mesh.HugePageHeap set, or else
// GOGC's ("off", or a percent; 100 when unset).
func gogc(h *mesh.Heap) string {
	if h.GCPercent > 0 {
		return strconv.Itoa(h.GCPercent)
	}
	if v, ok := os.LookupEnv("GOGC"); ok {
		return v
	}
	return "100"
}
