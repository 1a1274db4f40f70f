package mesh_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/testkit"
)

// held is a playbook whose one step calls a URL the test answers when it chooses.
const held = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: held, path: tests/held}
workflow:
  - step: start
    tool: {kind: http, url: "{{ workload.url }}", timeout_seconds: 120}
`

// TestWaitReadsTheFinalStateOnce waits on an execution while it runs (a short wait times
// out with what is known; a long one ends with the final state), then again once it
// ended, on another tenant's, and on none; and counts the statebuilder's reads: a wait on
// an ended execution reads its head and its state once each.
func TestWaitReadsTheFinalStateOnce(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	ctx := context.Background()
	def := newClient(t, m, m.AdminKey)
	acmeKey, _ := def.createKey(map[string]any{"tenant": "acme", "roles": []string{"admin"}})
	acme := newClient(t, m, acmeKey)

	called, release := make(chan struct{}, 1), make(chan struct{})
	answer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		called <- struct{}{}
		<-release
		_, _ = w.Write([]byte(`{"answered": true}`))
	}))
	t.Cleanup(answer.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})

	reg, err := def.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: held})
	require.NoError(t, err)
	w, err := structpb.NewStruct(map[string]any{"url": answer.URL})
	require.NoError(t, err)
	started, err := def.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath(), Workload: w})
	require.NoError(t, err)
	id := started.GetExecutionId()
	<-called // the step runs until release

	short, err := def.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(100 * time.Millisecond)})
	require.NoError(t, err, "a wait that times out answers with what is known")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, short.GetExecution().GetStatus())
	require.Positive(t, short.GetExecution().GetLastSeq())

	orch := "http://" + m.AdminAddrs["orchestrator"]
	type result struct {
		resp *apiv1.WaitExecutionResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := def.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(2 * time.Minute)})
		done <- result{resp, err}
	}()
	testkit.WaitFor(t, time.Minute, func() error {
		if n := metricTotalOf(t, orch, "grpc_server_in_flight", `method="/noetl.orchestrator.v1.OrchestratorService/WaitExecution"`); n != 1 {
			return fmt.Errorf("%v waits in flight, want the one", n)
		}
		return nil
	})
	close(release)
	r := <-done
	require.NoError(t, r.err)
	x := r.resp.GetExecution()
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
	require.Greater(t, x.GetLastSeq(), short.GetExecution().GetLastSeq())
	require.Contains(t, x.GetSteps(), "start")

	sb := "http://" + m.AdminAddrs["statebuilder"]
	reads := func() (states, heads float64) {
		return metricTotalOf(t, sb, "grpc_server_handled_total", `method="/noetl.statebuilder.v1.StateService/GetState"`),
			metricTotalOf(t, sb, "grpc_server_handled_total", `method="/noetl.statebuilder.v1.StateService/GetExecutionHead"`)
	}
	states, heads := reads()
	again, err := def.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: id})
	require.NoError(t, err)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, again.GetExecution().GetStatus())
	require.Equal(t, x.GetLastSeq(), again.GetExecution().GetLastSeq())
	statesAfter, headsAfter := reads()
	require.Equal(t, 1.0, statesAfter-states, "a wait on an ended execution reads its state once")
	require.Equal(t, 1.0, headsAfter-heads, "and its head once")

	_, err = acme.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(time.Second)})
	require.Equal(t, codes.NotFound, status.Code(err), "another tenant's execution: %v", err)
	_, err = def.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: uuid.NewString(), Timeout: durationpb.New(time.Second)})
	require.Equal(t, codes.NotFound, status.Code(err), "no such execution: %v", err)
}

// metricTotalOf sums the series of the metric name on admin's /metrics whose labels
// include sel (zero when there is none).
func metricTotalOf(t *testing.T, admin, name, sel string) float64 {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(admin + "/metrics")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		series, value, ok := strings.Cut(sc.Text(), " ")
		metric, labels, _ := strings.Cut(series, "{")
		if !ok || metric != name || !hasLabels(labels, sel) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		require.NoError(t, err, sc.Text())
		sum += v
	}
	require.NoError(t, sc.Err())
	return sum
}

// twoSteps is a playbook of two no-op steps.
const twoSteps = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: two-steps, path: tests/two-steps}
workflow:
  - step: start
    tool: {kind: noop}
    next: [{step: second}]
  - step: second
    tool: {kind: noop}
`

// TestStartThatWaitsAnswersTheEnd starts executions with a wait: a new one answers with
// its final view, having read no head of the execution (the start's own subscription saw
// its end) and its state once; a start whose key names an ended execution answers that
// one's view; a start whose wait runs out answers without a view, and the execution goes
// on; a negative wait is refused naming the field; REST takes the wait as a JSON duration.
func TestStartThatWaitsAnswersTheEnd(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	ctx := context.Background()
	def := newClient(t, m, m.AdminKey)
	reg, err := def.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: twoSteps})
	require.NoError(t, err)
	path := reg.GetPlaybook().GetPath()

	sb := "http://" + m.AdminAddrs["statebuilder"]
	orch := "http://" + m.AdminAddrs["orchestrator"]
	reads := func() (states, heads, engine float64) {
		return metricTotalOf(t, sb, "grpc_server_handled_total", `method="/noetl.statebuilder.v1.StateService/GetState"`),
			metricTotalOf(t, sb, "grpc_server_handled_total", `method="/noetl.statebuilder.v1.StateService/GetExecutionHead"`),
			metricTotalOf(t, orch, "noetl_orchestrator_final_states_total", `answer="held"`)
	}
	states, heads, engine := reads()
	started, err := def.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: path, Wait: durationpb.New(time.Minute)})
	require.NoError(t, err)
	x := started.GetExecution()
	require.NotNil(t, x, "the start waited for the end")
	require.Equal(t, started.GetExecutionId(), x.GetExecutionId())
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
	require.Contains(t, x.GetSteps(), "second")
	statesAfter, headsAfter, engineAfter := reads()
	require.Equal(t, 0.0, headsAfter-heads, "a start that waits reads no head")
	// The final state once: the engine's, which decided the end (engine/final.go), or,
	// had it not held it at the log's head, the statebuilder's.
	require.Equal(t, 1.0, (statesAfter-states)+(engineAfter-engine), "and the final state once")
	got, err := def.exe.GetExecution(ctx, &apiv1.GetExecutionRequest{ExecutionId: started.GetExecutionId()})
	require.NoError(t, err)
	require.Equal(t, got.GetExecution().GetLastSeq(), x.GetLastSeq(), "the view is the log's at its end")
	require.True(t, proto.Equal(got.GetExecution(), x), "the view is the log's at its end: %v != %v", got.GetExecution(), x)

	// A key that names an ended execution: that one's view, nothing started.
	keyed, err := def.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: path, IdempotencyKey: "start-wait-1", Wait: durationpb.New(time.Minute)})
	require.NoError(t, err)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, keyed.GetExecution().GetStatus())
	again, err := def.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: path, IdempotencyKey: "start-wait-1", Wait: durationpb.New(time.Minute)})
	require.NoError(t, err)
	require.True(t, again.GetExisting())
	require.Equal(t, keyed.GetExecutionId(), again.GetExecutionId())
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, again.GetExecution().GetStatus())
	require.Equal(t, keyed.GetExecution().GetLastSeq(), again.GetExecution().GetLastSeq())

	// A wait that runs out: the start stands, without a view.
	called, release := make(chan struct{}, 1), make(chan struct{})
	answer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		called <- struct{}{}
		<-release
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(answer.Close)
	t.Cleanup(func() { close(release) })
	heldReg, err := def.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: held})
	require.NoError(t, err)
	w, err := structpb.NewStruct(map[string]any{"url": answer.URL})
	require.NoError(t, err)
	short, err := def.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: heldReg.GetPlaybook().GetPath(), Workload: w, Wait: durationpb.New(200 * time.Millisecond)})
	require.NoError(t, err)
	require.NotEmpty(t, short.GetExecutionId())
	require.Nil(t, short.GetExecution(), "a wait that ran out answers without a view")
	<-called // the execution runs on
	running, err := def.exe.GetExecution(ctx, &apiv1.GetExecutionRequest{ExecutionId: short.GetExecutionId()})
	require.NoError(t, err)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, running.GetExecution().GetStatus())

	_, err = def.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: path, Wait: durationpb.New(-time.Second)})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "wait")

	// Over REST, the wait is a JSON duration and the view comes back in the answer.
	out := def.wantREST(http.StatusOK, http.MethodPost, "/v1/executions", map[string]any{"path": path, "wait": "60s"})
	view, _ := out["execution"].(map[string]any)
	require.Equal(t, "EXECUTION_STATUS_COMPLETED", view["status"], "%v", out)
	require.Equal(t, out["executionId"], view["executionId"])
}
