package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// refusingGateway is an ExecutionServiceClient whose first refuse starts are refused
// (RESOURCE_EXHAUSTED with a RetryInfo of 1 ms), then one more UNAVAILABLE, and which
// then starts executions that are complete when waited for; starts whose path is "fail"
// end FAILED. It records the idempotency key of every start attempt.
type refusingGateway struct {
	apiv1.ExecutionServiceClient // calls the bench does not make panic
	t                            *testing.T
	refuse                       int64

	mu       sync.Mutex
	attempts int64
	keys     map[string]int // attempts per idempotency key
	started  map[string]string
}

func (g *refusingGateway) StartExecution(_ context.Context, in *apiv1.StartExecutionRequest, _ ...grpc.CallOption) (*apiv1.StartExecutionResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.attempts++
	g.keys[in.GetIdempotencyKey()]++
	switch {
	case g.attempts <= g.refuse:
		return nil, refusal(g.t, time.Millisecond)
	case g.attempts == g.refuse+1:
		return nil, status.Error(codes.Unavailable, "gateway restarting")
	}
	id := "x" + in.GetIdempotencyKey()
	g.started[id] = in.GetPath()
	return &apiv1.StartExecutionResponse{ExecutionId: id}, nil
}

func (g *refusingGateway) WaitExecution(_ context.Context, in *apiv1.WaitExecutionRequest, _ ...grpc.CallOption) (*apiv1.WaitExecutionResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	path, ok := g.started[in.GetExecutionId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no execution %s", in.GetExecutionId())
	}
	st := eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED
	if path == "fail" {
		st = eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED
	}
	return &apiv1.WaitExecutionResponse{Execution: &apiv1.Execution{ExecutionId: in.GetExecutionId(), Status: st}}, nil
}

func newRefusingGateway(t *testing.T, refuse int64) *refusingGateway {
	return &refusingGateway{t: t, refuse: refuse, keys: map[string]int{}, started: map[string]string{}}
}

func TestMeasureRetriesShedStartsWithTheirKeysAndCountsThem(t *testing.T) {
	g := newRefusingGateway(t, 7)
	sh := &shed{}
	o, err := measure(context.Background(), g, "bench/chain_2", 5, sh)
	if err != nil {
		t.Fatal(err)
	}
	if o.completed() != 5 || o.firstErr() != nil {
		t.Fatalf("completed %d, first error %v; want all 5", o.completed(), o.firstErr())
	}
	if sh.starts.Load() != 7 || sh.unavailable.Load() != 1 {
		t.Fatalf("starts shed %d, unavailable %d; want 7 and 1", sh.starts.Load(), sh.unavailable.Load())
	}
	// Five executions from 13 attempts: every retry reused its start's key.
	if g.attempts != 13 || len(g.keys) != 5 || len(g.started) != 5 {
		t.Fatalf("attempts %d, keys %d, started %d; want 13, 5, 5", g.attempts, len(g.keys), len(g.started))
	}
	for key := range g.keys {
		if !strings.HasPrefix(key, "bench-") {
			t.Fatalf("idempotency key %q; want bench-<run>-<i>", key)
		}
	}
	t0 := time.Now()
	ms := func(x float64) time.Time { return t0.Add(time.Duration(x * float64(time.Millisecond))) }
	lat := &stepTimes{}
	lat.add(t0, ms(0.5), ms(1))
	lat.add(t0, ms(0.5), ms(2))
	lat.add(t0, time.Time{}, ms(3)) // an outcome without a start time has no phases
	line := stepLine("concurrent", 2, o, lat, chainLatencyScope, sh)
	for field, want := range map[string]any{
		"executions": 5, "executions_completed": 5, "executions_failed": 0, "steps": 10,
		"starts_shed": int64(7), "waits_shed": int64(0), "reads_shed": int64(0), "calls_unavailable": int64(1),
		"latency_samples": 3, "step_p50_ms": 2.0, "step_p99_ms": 3.0, "workload": "concurrent",
		"phase_samples": 2,
	} {
		if line[field] != want {
			t.Errorf("%s = %v (%T); want %v (%T)", field, line[field], line[field], want, want)
		}
	}
	if _, ok := line["first_error"]; ok {
		t.Errorf("first_error %v on a run that completed", line["first_error"])
	}
	p50, p99 := line["phase_p50_ms"].(map[string]float64), line["phase_p99_ms"].(map[string]float64)
	if p50["dispatch"] != 0.5 || p50["run"] != 0.5 || p99["dispatch"] != 0.5 || p99["run"] != 1.5 {
		t.Errorf("phase_p50_ms %v, phase_p99_ms %v; want dispatch 0.5 and 0.5, run 0.5 and 1.5", p50, p99)
	}
}

func TestMeasureGivesUpOnAGatewayThatAlwaysRefuses(t *testing.T) {
	oldFor, oldAttempts := *retryFor, *retryAttempts
	*retryFor, *retryAttempts = time.Minute, 4
	t.Cleanup(func() { *retryFor, *retryAttempts = oldFor, oldAttempts })
	g := newRefusingGateway(t, 1<<40)
	sh := &shed{}
	o, err := measure(context.Background(), g, "bench/chain_2", 2, sh)
	if err != nil {
		t.Fatal(err)
	}
	if o.completed() != 0 || len(o.started()) != 0 {
		t.Fatalf("completed %d, started %v; want none", o.completed(), o.started())
	}
	if status.Code(o.firstErr()) != codes.ResourceExhausted || !strings.Contains(o.firstErr().Error(), "giving up") {
		t.Fatalf("first error %v; want the last refusal, giving up", o.firstErr())
	}
	if g.attempts != 8 || sh.starts.Load() != 8 {
		t.Fatalf("attempts %d, shed %d; want 4 per start (--retry-attempts)", g.attempts, sh.starts.Load())
	}
	line := stepLine("concurrent", 2, o, nil, chainLatencyScope, sh)
	if line["steps"] != 0 || line["steps_per_s"] != 0.0 || line["executions_failed"] != 2 {
		t.Fatalf("steps %v, steps_per_s %v, failed %v; want 0, 0, 2", line["steps"], line["steps_per_s"], line["executions_failed"])
	}
	if s, _ := line["first_error"].(string); !strings.Contains(s, "giving up") {
		t.Fatalf("first_error %q; want the refusal", s)
	}
}

func TestStepLineCountsOnlyCompletedSteps(t *testing.T) {
	o := runOutcome{ids: []string{"a", "b", "", "d"}, errs: []error{nil, errors.New("execution b ended FAILED"), errors.New("start: refused"), nil}, wall: 2 * time.Second}
	line := stepLine("concurrent", 5, o, nil, chainLatencyScope, &shed{})
	if line["steps"] != 10 || line["steps_per_s"] != 5.0 || line["executions"] != 4 || line["executions_failed"] != 2 {
		t.Fatalf("line %v; want 10 steps of 2 completed executions, 5 steps/s", line)
	}
	if line["first_error"] != "execution b ended FAILED" {
		t.Fatalf("first_error %v", line["first_error"])
	}
	if got := o.started(); len(got) != 3 {
		t.Fatalf("started %v; want the three with an id", got)
	}
	fan := stepLine("fanout", 100, runOutcome{ids: []string{"f"}, errs: []error{nil}, wall: time.Second}, &stepTimes{lat: []float64{4}}, fanoutLatencyScope, &shed{})
	if fan["tasks"] != 100 || fan["tasks_per_s"] != 100.0 || fan["latency_scope"] != fanoutLatencyScope {
		t.Fatalf("fanout line %v", fan)
	}
	if _, ok := fan["steps_per_s"]; ok {
		t.Fatalf("fanout line has steps_per_s: %v", fan)
	}
}

func TestCPUFieldsSayWhatIsNotMeasured(t *testing.T) {
	out := map[string]any{}
	cpuFields(out, nil, nil, nil, 10)
	if _, ok := out["cpu_s_per_1k_steps"]; ok || out["cpu_reason"] == nil {
		t.Fatalf("without a meter: %v; want cpu_reason alone", out)
	}
	m := &cpuMeter{pids: map[string]int{"worker": 1, "gateway": 2}, trees: map[string]int{}, scope: "s",
		missing: map[string]string{"postgres": externalPostgres}}
	out = map[string]any{}
	cpuFields(out, m, map[string]float64{"worker": 1, "gateway": 1}, map[string]float64{"worker": 3}, 2000)
	per := out["cpu_s_per_1k_steps"].(map[string]float64)
	if len(per) != 1 || per["worker"] != 1 {
		t.Fatalf("cpu_s_per_1k_steps %v; want worker 1 (2 s over 2,000 steps)", per)
	}
	missing := out["cpu_not_measured"].(map[string]string)
	if missing["postgres"] != externalPostgres || missing["gateway"] == "" || len(missing) != 2 {
		t.Fatalf("cpu_not_measured %v; want postgres and gateway", missing)
	}
}

func TestInprocCPUMeterWithoutPrivatePostgresSaysSo(t *testing.T) {
	m := inprocCPUMeter("")
	if m.missing["postgres"] != externalPostgres || len(m.trees) != 0 {
		t.Fatalf("meter %+v; want postgres missing as external", m)
	}
	m = inprocCPUMeter(t.TempDir())
	if !strings.Contains(m.missing["postgres"], "postmaster.pid") {
		t.Fatalf("meter %+v; want postgres missing for want of postmaster.pid", m)
	}
	if _, ok := m.pids["mesh_in_process"]; !ok {
		t.Fatalf("meter %+v; want the bench process", m)
	}
}

func TestUnavailableIsRetriedAndCountedApart(t *testing.T) {
	var refused, unavailable atomic.Int64
	calls := 0
	v, err := retryExhausted(context.Background(), &refused, &unavailable, func() (int, error) {
		calls++
		if calls < 3 {
			return 0, status.Error(codes.Unavailable, "connection refused")
		}
		return 7, nil
	})
	if err != nil || v != 7 || refused.Load() != 0 || unavailable.Load() != 2 {
		t.Fatalf("got %d, %v; refused %d, unavailable %d; want 7 after 2 unavailable", v, err, refused.Load(), unavailable.Load())
	}
}
