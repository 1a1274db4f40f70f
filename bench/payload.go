package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

var (
	payloadSizes = flag.String("size-mb", "10,100", "payload: comma-separated sizes (MiB) of the JSON passed between two steps")
	benchRuns    = flag.Int("runs", 3, "payload, flight: measured runs per size; medians are reported")
)

// payloadPlaybook passes a JSON document of workload.mb MiB from one python step to the
// next, which reads all of it.
const payloadPlaybook = `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: payload, path: bench/payload}
workload: {mb: 1}
workflow:
  - step: start
    tool:
      kind: python
      input: {mb: "{{ workload.mb }}"}
      code: |
        result = {"blob": "x" * (int(mb) << 20), "mb": int(mb)}
    next: [{step: consume}]
  - step: consume
    tool:
      kind: python
      input: {doc: "{{ start }}"}
      code: |
        result = {"len": len(doc["blob"])}
`

// startBenchMesh starts an in-process mesh on a private Postgres (or $NOETL_PG_URL); stop
// stops it and removes its state.
func startBenchMesh(ctx context.Context) (m *mesh.Mesh, stop func(), err error) {
	dir, err := os.MkdirTemp("", "noetl-bench-")
	if err != nil {
		return nil, nil, err
	}
	// The private Postgres runs as the postgres user when we are root.
	if err := os.Chmod(dir, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	m, err = mesh.Start(ctx, mesh.Config{StateDir: dir, PostgresURL: os.Getenv("NOETL_PG_URL"), Log: slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	return m, func() { m.Stop(); _ = os.RemoveAll(dir) }, nil
}

// runToEnd starts an execution and waits for its end; an end other than COMPLETED is an
// error.
func runToEnd(ctx context.Context, exe apiv1.ExecutionServiceClient, path string, workload map[string]any) (*apiv1.Execution, error) {
	w, err := structpb.NewStruct(workload)
	if err != nil {
		return nil, err
	}
	resp, err := exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: path, Workload: w})
	if err != nil {
		return nil, err
	}
	for {
		g, err := exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: resp.GetExecutionId(), Timeout: durationpb.New(time.Minute)})
		if err != nil {
			return nil, err
		}
		x := g.GetExecution()
		switch x.GetStatus() {
		case eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED:
			return x, nil
		case eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED:
			return x, fmt.Errorf("execution %s ended %s: %s", x.GetExecutionId(), x.GetStatus(), x.GetError().GetMessage())
		}
	}
}

// rssPeak samples this process's VmRSS every 50 ms and keeps the largest reading.
type rssPeak struct {
	mu   sync.Mutex
	peak float64
}

// watch samples until ctx ends.
func (r *rssPeak) watch(ctx context.Context) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		mb := currentRSSMB()
		r.mu.Lock()
		r.peak = max(r.peak, mb)
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// get returns the peak so far.
func (r *rssPeak) get() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.peak
}

// medianOf is the middle of xs (the mean of the two middle values for an even count).
func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// payloadSteps is the number of steps of payloadPlaybook.
const payloadSteps = 2

// payloadLatencyScope is what step_p50_ms and step_p99_ms measure in the payload lines.
const payloadLatencyScope = "per step of the completed runs of this size (produce, then consume), as in chain: the commit time of its outcome minus the previous step's (playbook.started for the first), read back from the event logs after the runs; cpu_s_per_1k_steps covers those runs, the python interpreters (children of the bench process, counted once it reaps them) included"

// runPayload passes a JSON document of each --size-mb between two python steps of an
// in-process mesh, --runs times per size, and prints one line per size: the median wall
// time from start to completion, the largest event the executions logged, and the peak
// resident set of this process (every service, embedded NATS included; the python
// interpreters and Postgres are other processes) during that size's runs.
func runPayload(ctx context.Context) error {
	var sizes []int
	for _, f := range strings.Split(*payloadSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("--size-mb: %q is not a positive integer", f)
		}
		sizes = append(sizes, n)
	}
	m, stop, err := startBenchMesh(ctx)
	if err != nil {
		return err
	}
	defer stop()
	conn, err := m.Dial()
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	cat := apiv1.NewCatalogServiceClient(conn)
	exe := apiv1.NewExecutionServiceClient(conn)
	pg, err := pgx.Connect(ctx, m.PostgresURL)
	if err != nil {
		return err
	}
	defer func() { _ = pg.Close(ctx) }()
	reg, err := cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: payloadPlaybook})
	if err != nil {
		return err
	}
	path := reg.GetPlaybook().GetPath()
	// Warm up: one small run, so that caches, pools and connections exist.
	if _, err := runToEnd(ctx, exe, path, map[string]any{"mb": 1}); err != nil {
		return err
	}
	for _, size := range sizes {
		peak := &rssPeak{}
		sctx, stopSampling := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); peak.watch(sctx) }()
		var walls []float64
		var ids []string
		ok, maxEvent := true, 0
		cpu := inprocCPUMeter(m.PostgresDir)
		cpuBefore := cpu.before()
		for range *benchRuns {
			began := time.Now()
			x, err := runToEnd(ctx, exe, path, map[string]any{"mb": size})
			wall := time.Since(began)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench: payload:", err)
				ok = false
				continue
			}
			walls = append(walls, float64(wall.Microseconds())/1000)
			ids = append(ids, x.GetExecutionId())
			got, _ := x.GetSteps()["consume"].GetResult().GetStructValue().AsMap()["len"].(float64)
			if int(got) != size<<20 {
				fmt.Fprintf(os.Stderr, "bench: payload: the next step read %v bytes of %d\n", got, size<<20)
				ok = false
			}
			var largest int
			if err := pg.QueryRow(ctx, `SELECT max(octet_length(body)) FROM noetl.event WHERE execution_id = $1`, x.GetExecutionId()).Scan(&largest); err != nil {
				stopSampling()
				return err
			}
			maxEvent = max(maxEvent, largest)
		}
		cpuAfter := cpu.after()
		stopSampling()
		<-done
		lat, err := latencies(ctx, exe, ids, &shed{}, chainStepLatencies)
		if err != nil {
			return err
		}
		out := map[string]any{
			"workload":        "payload",
			"size_mb":         size,
			"ok":              ok,
			"runs":            *benchRuns,
			"wall_ms":         medianOf(walls),
			"wall_ms_runs":    walls,
			"max_event_bytes": maxEvent,
			"peak_rss_mb":     peak.get(),
			"peak_rss_scope":  "process: all six services and embedded NATS in one process (python and Postgres excluded)",
		}
		latencyFields(out, lat, payloadLatencyScope)
		cpuFields(out, &cpu, cpuBefore, cpuAfter, len(ids)*payloadSteps)
		if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
			return err
		}
	}
	return nil
}
