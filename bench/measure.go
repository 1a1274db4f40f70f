package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// errIncomplete is a measured run some of whose executions did not complete.
var errIncomplete = errors.New("executions did not complete")

// runOutcome is what the measured phase of chain, concurrent or fanout did: every
// execution's id ("" if it never started) and error (nil once it completed).
type runOutcome struct {
	ids  []string
	errs []error
	wall time.Duration
}

// completed is how many executions completed.
func (o runOutcome) completed() int {
	n := 0
	for _, err := range o.errs {
		if err == nil {
			n++
		}
	}
	return n
}

// started is the ids of the executions that started, completed or not.
func (o runOutcome) started() []string {
	var ids []string
	for _, id := range o.ids {
		if id != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

// firstErr is the first execution's error, nil if all completed.
func (o runOutcome) firstErr() error {
	for _, err := range o.errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// measure starts count executions of the playbook at path at once and waits for each to
// end. A start carries an idempotency key of this run, so that a start retried after an
// UNAVAILABLE the gateway answered once it had started the execution returns that
// execution rather than starting a second.
func measure(ctx context.Context, exe apiv1.ExecutionServiceClient, path string, count int, sh *shed) (runOutcome, error) {
	run := make([]byte, 8)
	if _, err := rand.Read(run); err != nil {
		return runOutcome{}, err
	}
	prefix := "bench-" + hex.EncodeToString(run)
	o := runOutcome{ids: make([]string, count), errs: make([]error, count)}
	start := time.Now()
	win := newWindow(count)
	var wg sync.WaitGroup
	for i := range count {
		wg.Go(func() {
			o.ids[i], o.errs[i] = execute(ctx, exe, path, fmt.Sprintf("%s-%d", prefix, i), sh, win)
		})
	}
	wg.Wait()
	o.wall = time.Since(start)
	return o, nil
}

// once runs one execution of the playbook at path to completion.
func once(ctx context.Context, exe apiv1.ExecutionServiceClient, path string) error {
	_, err := execute(ctx, exe, path, "", &shed{}, nil)
	return err
}

// execute runs one execution of the playbook at path to completion and returns its id.
// Calls the gateway refuses for its per-tenant limits or answers UNAVAILABLE are retried
// (retryExhausted) and counted in sh; key, when set, is the start's idempotency key. With
// a window, the execution holds one of its slots from its start to its end, and a start
// refused for the tenant's calls in flight is retried when the window lets it, as long
// as other executions of the window are running (their ends free the calls); otherwise
// after the refusal's delay.
func execute(ctx context.Context, exe apiv1.ExecutionServiceClient, path, key string, sh *shed, win *window) (string, error) {
	started, err := start(ctx, exe, path, key, sh, win)
	if err != nil {
		return "", fmt.Errorf("start %s: %w", path, err)
	}
	id := started.GetExecutionId()
	// An execution seen to its end widens the window; one whose wait gave up does not.
	ended := false
	if win != nil {
		defer func() { win.release(ended) }()
	}
	// A start that waited and saw the end answers with the execution's view; otherwise
	// WaitExecution waits on.
	x := started.GetExecution()
	for {
		switch x.GetStatus() {
		case eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED:
			ended = true
			return id, nil
		case eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED:
			ended = true
			return id, fmt.Errorf("execution %s ended %s: %s", id, x.GetStatus(), x.GetError().GetMessage())
		}
		g, err := retryExhausted(ctx, &sh.waits, &sh.unavailable, func() (*apiv1.WaitExecutionResponse, error) {
			return exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(time.Minute)})
		})
		if err != nil {
			return id, fmt.Errorf("wait for %s: %w", id, err)
		}
		x = g.GetExecution()
	}
}

// startWait makes each start also wait for its execution's end (StartExecutionRequest.wait):
// one call and one subscription per execution instead of a start and a WaitExecution.
var startWait = flag.Bool("start-wait", true, "chain, concurrent, fanout: start each execution with a wait for its end (StartExecutionRequest.wait, one call per execution); --start-wait=false starts and then calls WaitExecution, as the bench did before the start could wait")

// stepLine is the JSON line of chain, concurrent and fanout, less the mesh's fields: the
// throughput counts the steps (fanout: tasks) of the executions that completed, over the
// wall time of the whole measured phase, shed and retried calls included.
func stepLine(workload string, perExec int, o runOutcome, lat *stepTimes, scope string, sh *shed) map[string]any {
	done := o.completed()
	steps := done * perExec
	wallMS := float64(o.wall.Microseconds()) / 1000
	var out map[string]any
	if workload == "fanout" {
		out = map[string]any{"tasks": steps, "tasks_per_s": float64(steps) / o.wall.Seconds()}
	} else {
		out = map[string]any{
			"executions":  len(o.errs),
			"steps":       steps,
			"per_step_ms": wallMS / float64(perExec),
			"steps_per_s": float64(steps) / o.wall.Seconds(),
		}
	}
	out["workload"] = workload
	out["wall_ms"] = wallMS
	out["executions_completed"] = done
	out["executions_failed"] = len(o.errs) - done
	if err := o.firstErr(); err != nil {
		out["first_error"] = err.Error()
	}
	latencyFields(out, lat, scope)
	out["starts_shed"] = sh.starts.Load()
	out["waits_shed"] = sh.waits.Load()
	out["reads_shed"] = sh.reads.Load()
	out["calls_unavailable"] = sh.unavailable.Load()
	return out
}

// latencyFields adds the per-step latency fields: step_p50_ms, step_p99_ms,
// latency_samples and latency_scope, and phase_p50_ms and phase_p99_ms (dispatch and run,
// see stepTimes) with phase_samples and phase_scope when some outcome said when its
// command began.
func latencyFields(out map[string]any, lat *stepTimes, scope string) {
	if lat == nil {
		lat = &stepTimes{} // a run whose logs were not read
	}
	out["step_p50_ms"] = round3(percentile(lat.lat, 50))
	out["step_p99_ms"] = round3(percentile(lat.lat, 99))
	out["latency_samples"] = len(lat.lat)
	out["latency_scope"] = scope
	if len(lat.dispatch) == 0 {
		return
	}
	out["phase_p50_ms"] = map[string]float64{"dispatch": round3(percentile(lat.dispatch, 50)), "run": round3(percentile(lat.run, 50))}
	out["phase_p99_ms"] = map[string]float64{"dispatch": round3(percentile(lat.dispatch, 99)), "run": round3(percentile(lat.run, 99))}
	out["phase_samples"] = len(lat.dispatch)
	out["phase_scope"] = phaseScope
}

// phaseScope is what phase_p50_ms and phase_p99_ms measure.
const phaseScope = "each step's latency split at the start time its command.completed carries (the worker's start of the command): dispatch, from where the step's latency begins to that start (the commit that issued the command, counted from the start of its transaction, the forward and the worker's claim), and run, from that start to the commit of the outcome (the tool, the outcome's publish, the materializer's read and its batch's wait until the transaction begins); commit times are the materializer's, start times the worker's, on one machine's clock"

// noStepFields marks a line whose workload has no per-step figures: step_p50_ms,
// step_p99_ms and cpu_s_per_1k_steps are left out and steps_reason says why.
func noStepFields(out map[string]any, reason string) {
	out["steps_reason"] = reason
}

// cpuFields adds cpu_s_per_1k_steps (per process, between the readings before and after),
// cpu_scope and cpu_not_measured (processes of the mesh with no figure, and why); without
// a meter, cpu_reason says why there is none.
func cpuFields(out map[string]any, m *cpuMeter, before, after map[string]float64, steps int) {
	if m == nil {
		out["cpu_reason"] = "a running gateway (--gateway): the mesh's processes are not the bench's to read"
		return
	}
	out["cpu_s_per_1k_steps"] = perKSteps(before, after, steps)
	out["cpu_scope"] = m.scope
	missing := map[string]string{}
	for name, why := range m.missing {
		missing[name] = why
	}
	for name := range m.pids {
		if _, ok := after[name]; !ok {
			missing[name] = "its /proc/<pid>/stat could not be read"
		}
	}
	for name := range m.trees {
		if _, ok := after[name]; !ok {
			missing[name] = "its /proc/<pid>/stat could not be read"
		}
	}
	if len(missing) > 0 {
		out["cpu_not_measured"] = missing
	}
}

// errWindowFull ends a start's retries at a refusal for calls in flight that the window
// retries itself.
var errWindowFull = errors.New("bench: refused for calls in flight; retried when the window lets it")

// start starts one execution of the playbook at path (with --start-wait, waiting for its
// end) and returns the gateway's answer, holding a slot of win (if any) once it returns
// without an error.
func start(ctx context.Context, exe apiv1.ExecutionServiceClient, path, key string, sh *shed, win *window) (*apiv1.StartExecutionResponse, error) {
	req := &apiv1.StartExecutionRequest{Path: path, IdempotencyKey: key}
	if *startWait {
		req.Wait = durationpb.New(time.Minute)
	}
	for {
		if win != nil {
			if err := win.acquire(ctx); err != nil {
				return nil, err
			}
		}
		resp, err := retryExhausted(ctx, &sh.starts, &sh.unavailable, func() (*apiv1.StartExecutionResponse, error) {
			var endedBefore uint64
			if win != nil {
				endedBefore = win.ended()
			}
			resp, err := exe.StartExecution(ctx, req)
			if win != nil && inFlightRefusal(err) && win.refused(endedBefore) {
				sh.starts.Add(1)
				return nil, errWindowFull
			}
			return resp, err
		})
		switch {
		case err == nil:
			return resp, nil
		case errors.Is(err, errWindowFull):
			win.release(false)
		default:
			if win != nil {
				win.release(false)
			}
			return nil, err
		}
	}
}

// The materializer's metrics read before and after the measured phase: its commits, those
// of them tried in one round trip and those of these that found the log moved
// (services/materializer/internal/writer/fast.go), and those whose head ran while their
// decision was taken (headstart.go).
const (
	metricCommits        = "noetl_materializer_commit_seconds_count"
	metricOneTripTaken   = `noetl_materializer_one_round_trip_commits_total{outcome="taken"}`
	metricOneTripMissed  = `noetl_materializer_one_round_trip_commits_total{outcome="missed"}`
	metricHeadStarts     = "noetl_materializer_head_start_commits_total"
	commitPathScopeField = "commits, commits_one_round_trip, commits_one_round_trip_missed and commits_head_start count the materializer's transactions during the measured phase (warm-up excluded), from its /metrics: all of them, those sent in one round trip on its heads, those of these that found the log moved and went again in two, and those whose head (BEGIN, guards, the batch's own rows) ran in Postgres while their decision was taken"
)

// commitPath reads the materializer's commit counters from its admin address (nil when
// there is none: a --gateway run).
func commitPath(admin string) map[string]float64 {
	if admin == "" {
		return nil
	}
	return metricsOf(admin, metricCommits, metricOneTripTaken, metricOneTripMissed, metricHeadStarts)
}

// commitPathFields adds the measured phase's commit counts (commitPathScopeField) when the
// bench started the mesh and so could read them.
func commitPathFields(out map[string]any, read bool, before, after map[string]float64) {
	if !read {
		return
	}
	out["commits"] = int64(after[metricCommits] - before[metricCommits])
	out["commits_one_round_trip"] = int64(after[metricOneTripTaken] - before[metricOneTripTaken])
	out["commits_one_round_trip_missed"] = int64(after[metricOneTripMissed] - before[metricOneTripMissed])
	out["commits_head_start"] = int64(after[metricHeadStarts] - before[metricHeadStarts])
	out["commits_scope"] = commitPathScopeField
}
