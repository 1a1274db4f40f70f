package mesh_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

const threeSteps = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: three, path: tests/three}
workload: {base: 20}
workflow:
  - step: start
    tool:
      kind: python
      input: {base: "{{ workload.base }}"}
      code: |
        result = {"n": base + 1}
    next: [{step: double}]
  - step: double
    tool:
      kind: python
      input: {n: "{{ start.n }}"}
      code: |
        result = {"n": n * 2, "from": "double"}
    next: {arcs: [{step: end}]}
  - step: end
    tool:
      kind: noop
      result: {answer: "{{ double.n }}", label: "{{ double.data.from }}-{{ execution_id | length }}"}
`

type harness struct {
	m   *mesh.Mesh
	cat apiv1.CatalogServiceClient
	exe apiv1.ExecutionServiceClient
}

func start(t *testing.T, dupEvents bool) *harness {
	t.Helper()
	return startWith(t, dupEvents, nil)
}

// startWith is start with set changing the mesh's configuration first.
func startWith(t *testing.T, dupEvents bool, set func(*mesh.Config)) *harness {
	t.Helper()
	pg := testkit.StartPostgres(t)
	natsURL := testkit.StartNATS(t)
	if dupEvents {
		duplicateEvents(t, natsURL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cfg := mesh.Config{StateDir: t.TempDir(), PostgresURL: pg, NATSURL: natsURL}
	if set != nil {
		set(&cfg)
	}
	m, err := mesh.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	conn, err := m.Dial()
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &harness{m: m, cat: apiv1.NewCatalogServiceClient(conn), exe: apiv1.NewExecutionServiceClient(conn)}
}

// duplicateEvents republishes every event published to NOETL_EVENTS once more, with a
// different Nats-Msg-Id so that JetStream does not drop the copy: the materializer sees
// every event twice.
func duplicateEvents(t *testing.T, url string) {
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	_, err = nc.Subscribe("noetl.events.>", func(m *nats.Msg) {
		if m.Header.Get("X-Test-Dup") != "" {
			return
		}
		cp := nats.NewMsg(m.Subject)
		cp.Data = m.Data
		cp.Header.Set("X-Test-Dup", "1")
		cp.Header.Set(nats.MsgIdHdr, m.Header.Get(nats.MsgIdHdr)+"-dup")
		_ = nc.PublishMsg(cp)
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
}

func (h *harness) run(t *testing.T, content string, workload map[string]any, key string) *apiv1.Execution {
	t.Helper()
	ctx := context.Background()
	reg, err := h.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: content})
	require.NoError(t, err)
	w, err := structpb.NewStruct(workload)
	require.NoError(t, err)
	resp, err := h.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath(), Workload: w, IdempotencyKey: key})
	require.NoError(t, err)
	done, err := h.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: resp.GetExecutionId(), Timeout: durationpb.New(60 * time.Second)})
	require.NoError(t, err)
	x := done.GetExecution()
	require.Contains(t, []eventv1.ExecutionStatus{eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED}, x.GetStatus(), "wait returned before the end")
	return x
}

func (h *harness) events(t *testing.T, id string) []*apiv1.Event {
	t.Helper()
	var out []*apiv1.Event
	token := ""
	for {
		resp, err := h.exe.ListExecutionEvents(context.Background(), &apiv1.ListExecutionEventsRequest{ExecutionId: id, PageSize: 7, PageToken: token})
		require.NoError(t, err)
		out = append(out, resp.GetEvents()...)
		if token = resp.GetNextPageToken(); token == "" {
			return out
		}
	}
}

func TestThreeStepPlaybookPassesDataAndLogsInOrder(t *testing.T) {
	h := start(t, false)
	x := h.run(t, threeSteps, map[string]any{"base": 10}, "")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
	got, err := protojson.Marshal(x.GetResult())
	require.NoError(t, err)
	require.JSONEq(t, `{"answer": 22, "label": "double-36"}`, string(got))

	evs := h.events(t, x.GetExecutionId())
	var types []string
	for i, ev := range evs {
		require.Equal(t, int64(i+1), ev.GetSeq(), "seq must be gap-free")
		if progressReport(ev) {
			continue
		}
		types = append(types, ev.GetType()+":"+ev.GetStep())
	}
	// A step's step.exit follows the events its routing emitted (the next step's command,
	// which enters it).
	want := []string{"playbook.started:"}
	prev := ""
	for _, s := range []string{"start", "double", "end"} {
		want = append(want, "command.issued:"+s)
		if prev != "" {
			want = append(want, "step.exit:"+prev)
		}
		// A short command reports one outcome event, carrying its result.
		want = append(want, "command.completed:"+s)
		prev = s
	}
	want = append(want, "step.exit:end", "playbook.completed:")
	require.Equal(t, want, types)
}

// progressReport reports whether ev is a command.started, which a worker publishes only for
// a command that runs a while (the worker's startedAfter): whether a log holds one depends
// on how long a tool took on a busy machine, so logs compared by shape leave it out.
func progressReport(ev *apiv1.Event) bool { return ev.GetType() == "command.started" }

func TestEveryEventPublishedTwiceYieldsTheSameLog(t *testing.T) {
	ids := func(dup bool) []string {
		h := start(t, dup)
		x := h.run(t, threeSteps, nil, "same-key")
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
		// The copies cost no stall: nothing was left for the reconciler to re-drive.
		require.Zero(t, metricTotal(t, "http://"+h.m.AdminAddrs["orchestrator"], "noetl_orchestrator_reconcile_redrives_total"))
		var out []string
		for i, ev := range h.events(t, x.GetExecutionId()) {
			require.Equal(t, int64(i+1), ev.GetSeq(), "seq must be gap-free")
			if !progressReport(ev) {
				out = append(out, ev.GetEventId()+" "+ev.GetType())
			}
		}
		return out
	}
	single := ids(false)
	double := ids(true)
	require.NotEmpty(t, single)
	require.Equal(t, single, double)
}

func TestBadInputIsRejectedWithAClearError(t *testing.T) {
	h := start(t, false)
	ctx := context.Background()
	cases := []struct {
		name, content, want string
	}{
		{"invalid yaml", "apiVersion: noetl.io/v2\nkind: Playbook\nworkflow: [\n  - step: start\n", "line"},
		{"no start step", "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: x, path: x}\nworkflow:\n  - step: other\n    tool: {kind: noop}\n", "start"},
		{"unknown tool kind", "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: x, path: x}\nworkflow:\n  - step: start\n    tool: {kind: htp}\n", `"start"`},
		{"kind no pool runs", "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: x, path: x}\nworkflow:\n  - step: start\n    tool: {kind: rhai}\n", `line 6, column 18: step "start": field "tool.kind": unknown tool kind "rhai" (this engine runs: `},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: tc.content})
			require.Error(t, err)
			require.Equal(t, codes.InvalidArgument, status.Code(err), err.Error())
			require.Contains(t, status.Convert(err).Message(), tc.want)
		})
	}
	_, err := h.exe.GetExecution(ctx, &apiv1.GetExecutionRequest{ExecutionId: "01930000-0000-7000-8000-000000000000"})
	require.Equal(t, codes.NotFound, status.Code(err))
	_, err = h.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "no/such/playbook"})
	require.Equal(t, codes.NotFound, status.Code(err))
}

func TestFailingStepFailsTheExecutionNamingTheStep(t *testing.T) {
	h := start(t, false)
	x := h.run(t, `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: boom, path: tests/boom}
workflow:
  - step: start
    tool: {kind: noop}
    next: [{step: explode}]
  - step: explode
    tool:
      kind: python
      code: |
        raise ValueError("kaboom")
    next: [{step: end}]
  - step: end
    tool: {kind: noop}
`, nil, "")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, x.GetStatus())
	require.Equal(t, []string{"explode"}, x.GetFailedSteps())
	require.True(t, strings.Contains(x.GetError().GetMessage(), "explode") && strings.Contains(x.GetError().GetMessage(), "kaboom"), x.GetError().GetMessage())
}

// harnessRun is a finished execution with its whole log.
type harnessRun struct {
	exec   *apiv1.Execution
	events []*apiv1.Event
}

// runFull runs the three-step playbook with an idempotency key and reads its log.
func (h *harness) runFull(t *testing.T, key string) *harnessRun {
	t.Helper()
	x := h.run(t, threeSteps, nil, key)
	return &harnessRun{exec: x, events: h.events(t, x.GetExecutionId())}
}

// A command reports one outcome event, carrying its result and when it began; only one
// that runs past the worker's startedAfter (2 s) also reports command.started while it
// runs, before its outcome.
func TestOnlyALongCommandReportsItsStart(t *testing.T) {
	h := start(t, false)
	x := h.run(t, `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: slow, path: tests/slow}
workflow:
  - step: start
    tool: {kind: noop, result: {quick: true}}
    next: [{step: slow}]
  - step: slow
    tool:
      kind: python
      code: |
        import time
        time.sleep(3)
        result = {"slept": 3}
`, nil, "")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
	byStep := map[string][]string{}
	var completed []*apiv1.Event
	for _, ev := range h.events(t, x.GetExecutionId()) {
		switch ev.GetType() {
		case "command.started", "command.completed", "call.done":
			byStep[ev.GetStep()] = append(byStep[ev.GetStep()], ev.GetType())
		}
		if ev.GetType() == "command.completed" {
			completed = append(completed, ev)
		}
	}
	require.Equal(t, map[string][]string{"start": {"command.completed"}, "slow": {"command.started", "command.completed"}}, byStep)
	require.Len(t, completed, 2)
	for _, ev := range completed {
		require.NotNil(t, ev.GetResult(), "the outcome carries the result")
		require.NotNil(t, ev.GetStartTime(), "and when the command began")
		require.False(t, ev.GetStartTime().AsTime().After(ev.GetProduceTime().AsTime()))
	}
	require.Equal(t, true, completed[0].GetResult().GetStructValue().AsMap()["quick"])
	require.InDelta(t, 3, completed[1].GetResult().GetStructValue().AsMap()["slept"], 0)
}
