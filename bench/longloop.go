package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// memprofile is the heap profile path of the longloop workload, written at its end.
var memprofile = flag.String("memprofile", "", "longloop with --procs=false: write a heap profile of the in-process mesh at the end of the run to this file")

// longloopAt10k is the log length at which the longloop workload takes its first memory
// reading.
const longloopAt10k = 10_000

// longloopLatencyScope is what step_p50_ms and step_p99_ms measure in the longloop line.
const longloopLatencyScope = "per-iteration latency: commit time of an iteration's command.completed minus the previous iteration's (step.enter for the first), read back from the event log; step_p50_ms and step_p99_ms over all latency_samples iterations, median_ms_first_1k and median_ms_last_1k over the first and last 1,000; phase_median_ms splits it (first 1k, last 1k): decide = previous command.completed to this command.issued (commit, notice, decision, publish, commit), dispatch = command.issued to the command's start (command.started, or for a short command the start time its command.completed carries: command publish, worker claim), run = that start to command.completed"

// longloopStall is how long the longloop workload waits for its execution's log to grow
// before it gives up.
const longloopStall = 2 * time.Minute

// longloop is one step looping sequentially over n items: about 2n events in one execution.
func longloop(name string, n int) string {
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
      spec: {mode: sequential}
    tool: {kind: noop}
`, name, name, n)
}

// memReading is the memory of the mesh at one point of a run. When the mesh runs
// in-process (orchestrator, statebuilder, materializer, worker, resultstore, gateway and
// embedded NATS share the bench process; Postgres does not), the resident set is the
// whole mesh's; when each service runs as its own process, procs holds each one's.
type memReading struct {
	seq       int64
	rssMB     float64 // VmRSS
	peakRSSMB float64 // VmHWM
	heapMB    float64 // live heap objects after a GC
	goTotalMB float64 // all memory mapped by the Go runtime
	// servicesMB is the live heap allocated under orchestrator or statebuilder code, natsMB
	// under the embedded NATS server's (from the heap profile, scaled for sampling).
	servicesMB, natsMB float64
	// procs is, when each service runs as its own process, each one's memory by name
	// ("bench" for the bench process, "nats" for the NATS server's).
	procs map[string]procMem
}

// longloopProfileRate is the heap profile sampling rate of the longloop workload, fine
// enough to attribute a few MB to the services that hold them.
const longloopProfileRate = 16 << 10

func readMem(seq int64) memReading {
	runtime.GC()
	runtime.GC() // the heap profile reflects the last completed cycle
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/total:bytes"}}
	metrics.Read(s)
	r := memReading{seq: seq, rssMB: currentRSSMB(), peakRSSMB: peakRSSMB(),
		heapMB: float64(s[0].Value.Uint64()) / (1 << 20), goTotalMB: float64(s[1].Value.Uint64()) / (1 << 20)}
	r.servicesMB, r.natsMB = heapByOwner()
	return r
}

// heapByOwner sums the live heap whose allocation stack runs through orchestrator or
// statebuilder code, and through the embedded NATS server, in MB.
func heapByOwner() (services, nats float64) {
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	rate := float64(runtime.MemProfileRate)
	for i := range recs {
		r := &recs[i]
		if r.InUseBytes() == 0 || r.AllocObjects == 0 {
			continue
		}
		avg := float64(r.AllocBytes) / float64(r.AllocObjects)
		bytes := float64(r.InUseBytes()) / (1 - math.Exp(-avg/rate))
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			if strings.HasPrefix(f.Function, "github.com/noetl/noetl/services/orchestrator") || strings.HasPrefix(f.Function, "github.com/noetl/noetl/services/statebuilder") {
				services += bytes
				break
			}
			if strings.HasPrefix(f.Function, "github.com/nats-io/nats-server") {
				nats += bytes
				break
			}
			if !more {
				break
			}
		}
	}
	return services / (1 << 20), nats / (1 << 20)
}

// longloopMeter takes the memory readings of the longloop workload.
type longloopMeter interface {
	// sampleMB is the resident set (MB) sampled every second while the loop runs.
	sampleMB() float64
	// read takes a reading when the execution's log is seq events long.
	read(seq int64) memReading
	// report adds the memory fields of the readings at 10,000 events and at the end.
	report(out map[string]any, first, end memReading)
	// rss is the resident set and its peak (MB) the rss fields report in a reading.
	rss(r memReading) (cur, peak float64)
}

// inprocMeter reads the memory of the bench process, which runs the whole mesh.
type inprocMeter struct{}

func (inprocMeter) sampleMB() float64                    { return currentRSSMB() }
func (inprocMeter) read(seq int64) memReading            { return readMem(seq) }
func (inprocMeter) rss(r memReading) (cur, peak float64) { return r.rssMB, r.peakRSSMB }

func (inprocMeter) report(out map[string]any, first, end memReading) {
	out["rss_mb_at_10k"] = round1(first.peakRSSMB)
	out["rss_mb_end"] = round1(end.peakRSSMB)
	out["rss_ratio"] = round3(end.peakRSSMB / first.peakRSSMB)
	out["current_rss_mb"] = []float64{round1(first.rssMB), round1(end.rssMB)}
	out["heap_mb"] = []float64{round1(first.heapMB), round1(end.heapMB)}
	out["go_total_mb"] = []float64{round1(first.goTotalMB), round1(end.goTotalMB)}
	out["services_heap_mb"] = []float64{round1(first.servicesMB), round1(end.servicesMB)}
	out["nats_heap_mb"] = []float64{round1(first.natsMB), round1(end.natsMB)}
	out["memory_scope"] = "rss_mb_* are the peak resident set (VmHWM) of the bench process, which runs the whole mesh in-process (orchestrator, statebuilder, materializer, worker, resultstore, gateway, embedded NATS; not Postgres); heap_mb is the live Go heap after a GC, go_total_mb all memory of the Go runtime, services_heap_mb the live heap allocated under orchestrator or statebuilder code and nats_heap_mb under the embedded NATS server (heap profile, scaled), each at 10k events and at the end"
}

// runLongloop runs the longloop workload: after a small warm-up execution, one execution
// of a sequential loop of n noop iterations. It reads memory (through m) when the log
// reaches 10,000 events and at the end, then reads the log back and measures each
// iteration's latency as the commit-time distance between its command.completed and the
// previous iteration's (the first one's: from step.enter), which covers the decision, the
// materializer's commits and the worker.
//
// cpu, when set, meters the mesh's processes over the loop (warm-up and log reading
// excluded) for cpu_s_per_1k_steps, an iteration being a step.
func runLongloop(ctx context.Context, cat apiv1.CatalogServiceClient, exe apiv1.ExecutionServiceClient, n int, m longloopMeter, cpu *cpuMeter) error {
	_, inproc := m.(inprocMeter)
	if inproc {
		runtime.MemProfileRate = longloopProfileRate
	}
	warm, err := cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: longloop("longloop_warmup", 100)})
	if err != nil {
		return err
	}
	if err := once(ctx, exe, warm.GetPlaybook().GetPath()); err != nil {
		return err
	}
	reg, err := cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: longloop(fmt.Sprintf("longloop_%d", n), n)})
	if err != nil {
		return err
	}
	stopProfile, err := startCPUProfile(profile)
	if err != nil {
		return err
	}
	defer stopProfile()
	sctx, stopSamples := context.WithCancel(ctx)
	defer stopSamples()
	rss := &rssSamples{}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				v := m.sampleMB()
				rss.mu.Lock()
				rss.mbs = append(rss.mbs, round1(v))
				rss.mu.Unlock()
			}
		}
	}()

	var cpuBefore, cpuAfter map[string]float64
	if cpu != nil {
		cpuBefore = cpu.before()
	}
	loadStart := loadavg()
	start := time.Now()
	resp, err := exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath()})
	if err != nil {
		return err
	}
	id := resp.GetExecutionId()
	// Watch the log grow to take the reading at 10,000 events, and give up on an execution
	// whose log stops growing.
	at10k, atLast := make(chan memReading, 1), make(chan memReading, 1)
	// playbook.started, step.enter, then a noop iteration's command.issued and its
	// command.completed (which carries the call).
	lastIteration := int64(2 + 2*n)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	ctx, stalled := context.WithCancelCause(ctx)
	defer stalled(nil)
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		var last int64
		moved, read, readLast := time.Now(), false, false
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			g, err := exe.GetExecution(wctx, &apiv1.GetExecutionRequest{ExecutionId: id})
			if err != nil {
				continue
			}
			seq := g.GetExecution().GetLastSeq()
			if seq != last {
				last, moved = seq, time.Now()
			} else if time.Since(moved) > longloopStall {
				stalled(fmt.Errorf("execution %s stalled: its log has stayed at seq %d for %s", id, seq, longloopStall))
				return
			}
			if !read && seq >= longloopAt10k {
				at10k <- m.read(seq)
				read = true
			}
			if !readLast && seq >= lastIteration {
				atLast <- m.read(seq)
				readLast = true
			}
		}
	}()
	final, err := wait(ctx, exe, id)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			return cause
		}
		return err
	}
	wall := time.Since(start)
	if cpu != nil {
		cpuAfter = cpu.after()
	}
	end := m.read(final.GetLastSeq())
	loadEnd := loadavg()
	stopWatch()
	stopSamples() // reading the log back below is not the loop's
	var first, last memReading
	select {
	case first = <-at10k:
	default:
		first = end // the log never reached 10,000 events
	}
	select {
	case last = <-atLast:
	default:
		last = end
	}
	if *memprofile != "" && inproc {
		f, err := os.Create(*memprofile)
		if err != nil {
			return err
		}
		err = pprof.WriteHeapProfile(f)
		_ = f.Close()
		if err != nil {
			return err
		}
	}
	lat, phases, events, err := iterationLatencies(ctx, exe, id, n)
	if err != nil {
		return err
	}
	k := min(1000, len(lat))
	phaseMedians := map[string][]float64{}
	for name, xs := range phases {
		phaseMedians[name] = []float64{round3(median(xs[:k])), round3(median(xs[len(xs)-k:]))}
	}
	out := map[string]any{
		"workload":           "longloop",
		"iterations":         n,
		"events":             events,
		"wall_ms":            float64(wall.Microseconds()) / 1000,
		"events_per_s":       float64(events) / wall.Seconds(),
		"at_seq":             []int64{first.seq, end.seq},
		"median_ms_first_1k": round3(median(lat[:k])),
		"median_ms_last_1k":  round3(median(lat[len(lat)-k:])),
		"latency_ratio":      round3(median(lat[len(lat)-k:]) / median(lat[:k])),
		"phase_median_ms":    phaseMedians,
		"rss_mb_samples":     rss.get(),
		"loadavg":            []string{loadStart, loadEnd},
	}
	latencyFields(out, &stepTimes{lat: lat}, longloopLatencyScope)
	cpuFields(out, cpu, cpuBefore, cpuAfter, n)
	m.report(out, first, end)
	// Between the last iteration's commit and the end, the engine assembles the loop's list
	// of results (one pass over the log) and routes the loop.
	cur, peak := m.rss(last)
	out["at_last_iteration"] = map[string]any{"seq": last.seq, "rss_mb": round1(cur), "peak_rss_mb": round1(peak)}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// loadavg is the machine's 1, 5 and 15 minute load averages (/proc/loadavg), since other
// work on the machine moves the latencies.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// wait waits for an execution to end and requires it to complete.
func wait(ctx context.Context, exe apiv1.ExecutionServiceClient, id string) (*apiv1.Execution, error) {
	for {
		g, err := exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(time.Minute)})
		if err != nil {
			return nil, err
		}
		x := g.GetExecution()
		switch x.GetStatus() {
		case eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED:
			// WaitExecution's view may predate the projection's last seq; read it again.
			gx, err := exe.GetExecution(ctx, &apiv1.GetExecutionRequest{ExecutionId: id})
			if err != nil {
				return nil, err
			}
			return gx.GetExecution(), nil
		case eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED:
			return nil, fmt.Errorf("execution %s ended %s: %s", id, x.GetStatus(), x.GetError().GetMessage())
		}
	}
}

// iterationLatencies reads an execution's log and returns, in iteration order, each loop
// iteration's latency in ms and its phases (decide, dispatch, run), and the number of
// events.
func iterationLatencies(ctx context.Context, exe apiv1.ExecutionServiceClient, id string, n int) ([]float64, map[string][]float64, int, error) {
	issued, started, done := make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
	var enter time.Time
	events := 0
	err := readLog(ctx, exe, id, &shed{}, func(ev *apiv1.Event) {
		events++
		i := ev.GetIteration().GetIndex()
		if ev.GetType() == evStepEnter {
			enter = ev.GetCommitTime().AsTime()
		}
		if i < 0 || int(i) >= n {
			return
		}
		switch ev.GetType() {
		case "command.issued":
			issued[i] = ev.GetCommitTime().AsTime()
		case "command.started":
			started[i] = ev.GetCommitTime().AsTime()
		case evCommandCompleted:
			done[i] = ev.GetCommitTime().AsTime()
			if started[i].IsZero() && ev.GetStartTime() != nil {
				// A short command reports no command.started: its outcome says when it began.
				started[i] = ev.GetStartTime().AsTime()
			}
		}
	})
	if err != nil {
		return nil, nil, 0, err
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	lat := make([]float64, n)
	phases := map[string][]float64{"decide": make([]float64, n), "dispatch": make([]float64, n), "run": make([]float64, n)}
	prev := enter
	for i, t := range done {
		if t.IsZero() || issued[i].IsZero() || started[i].IsZero() {
			return nil, nil, 0, fmt.Errorf("iteration %d is missing events in the log", i)
		}
		lat[i] = ms(t.Sub(prev))
		phases["decide"][i] = ms(issued[i].Sub(prev))
		phases["dispatch"][i] = ms(started[i].Sub(issued[i]))
		phases["run"][i] = ms(t.Sub(started[i]))
		prev = t
	}
	return lat, phases, events, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func round1(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }
func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }
