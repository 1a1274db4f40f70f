package mesh_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/failpoint"
	"github.com/noetl/noetl/internal/testkit"
)

// TestReconcilerRecoversLostNoticesAndCommands loses a commit notice and, separately, a
// committed command; the execution stalls until the reconciler re-drives it.
func TestReconcilerRecoversLostNoticesAndCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := reconcilingMesh(t, ctx)
	for _, point := range []string{failpoint.MaterializerLoseNotice, failpoint.MaterializerLoseCommand} {
		t.Run(point, func(t *testing.T) {
			failpoint.Reset()
			failpoint.Enable(point, 1)
			reg, err := h.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: threeSteps})
			require.NoError(t, err)
			started, err := h.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath()})
			require.NoError(t, err)
			done, err := h.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: started.GetExecutionId(), Timeout: durationpb.New(30 * time.Second)})
			require.NoError(t, err)
			require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, done.GetExecution().GetStatus())
			require.Equal(t, 1, failpoint.Hits(point), "the message was lost once")
		})
	}
}

// reconcilingMesh starts a mesh whose reconciler re-drives an execution still for a second,
// and resets the failpoints when the test ends.
func reconcilingMesh(t *testing.T, ctx context.Context) *harness {
	t.Helper()
	pg := testkit.StartPostgres(t)
	natsURL := testkit.StartNATS(t)
	m, err := mesh.Start(ctx, mesh.Config{StateDir: t.TempDir(), PostgresURL: pg, NATSURL: natsURL, ReconcileEvery: 200 * time.Millisecond, StaleAfter: time.Second})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	conn, err := m.Dial()
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	t.Cleanup(failpoint.Reset)
	return &harness{m: m, cat: apiv1.NewCatalogServiceClient(conn), exe: apiv1.NewExecutionServiceClient(conn)}
}

// A loop whose three iterations are issued at once, as the execution's first commands.
const threeIterations = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: three_iterations, path: tests/three_iterations}
workload: {items: [1, 2, 3]}
workflow:
  - step: start
    loop: {in: "{{ workload.items }}", iterator: x, spec: {mode: parallel}}
    tool:
      kind: python
      input: {x: "{{ x }}"}
      code: |
        result = {"x": x * 10}
    next: [{step: end}]
  - step: end
    tool: {kind: noop, result: {all: "{{ start }}"}}
`

// TestReconcilerRepublishesLostLoopAndRetryCommands loses the command of a loop iteration
// and, separately, the command of a retry's second attempt: the reconciler finds each
// in the log, sees that the commands stream no longer holds it, and publishes it again.
func TestReconcilerRepublishesLostLoopAndRetryCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := reconcilingMesh(t, ctx)
	cat, exe := h.cat, h.exe
	issued := func(id string) map[string]int {
		resp, err := exe.ListExecutionEvents(ctx, &apiv1.ListExecutionEventsRequest{ExecutionId: id, PageSize: 1000})
		require.NoError(t, err)
		n := map[string]int{}
		for _, ev := range resp.GetEvents() {
			n[ev.GetType()]++
			if ev.GetType() == domain.EventCommandsIssued { // a loop's iterations issued together
				n[domain.EventCommandIssued] += len(ev.GetPayload().GetStructValue().GetFields()["commands"].GetListValue().GetValues())
			}
		}
		return n
	}

	t.Run("loop iteration", func(t *testing.T) {
		failpoint.Reset()
		reg, err := cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: threeIterations})
		require.NoError(t, err)
		failpoint.Enable(failpoint.MaterializerLoseCommand, 1)
		started, err := exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath()})
		require.NoError(t, err)
		done, err := exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: started.GetExecutionId(), Timeout: durationpb.New(60 * time.Second)})
		require.NoError(t, err)
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, done.GetExecution().GetStatus(), "error: %v", done.GetExecution().GetError())
		require.Equal(t, 1, failpoint.Hits(failpoint.MaterializerLoseCommand), "one iteration's command was lost")
		n := issued(started.GetExecutionId())
		require.Equal(t, 4, n["command.issued"], "three iterations and the end step, each issued once")
		require.Equal(t, 4, n["command.completed"], "every command completed once")
		out := done.GetExecution().GetResult().GetStructValue().AsMap()
		require.Equal(t, []any{map[string]any{"x": 10.0}, map[string]any{"x": 20.0}, map[string]any{"x": 30.0}}, out["all"], "every iteration's result, in order")
	})

	t.Run("retry attempt", func(t *testing.T) {
		failpoint.Reset()
		reg, err := cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: flaky})
		require.NoError(t, err)
		w, err := structpb.NewStruct(map[string]any{"marker": filepath.Join(t.TempDir(), "marker")})
		require.NoError(t, err)
		started, err := exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath(), Workload: w})
		require.NoError(t, err)
		id := started.GetExecutionId()
		// The first attempt failed and its retry waits 2 s on a durable timer: the command
		// of the second attempt is the next one forwarded.
		testkit.WaitFor(t, 30*time.Second, func() error {
			if issued(id)["timer.scheduled"] == 0 {
				return fmt.Errorf("no timer.scheduled yet")
			}
			return nil
		})
		failpoint.Enable(failpoint.MaterializerLoseCommand, 1)
		done, err := exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(60 * time.Second)})
		require.NoError(t, err)
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, done.GetExecution().GetStatus(), "error: %v", done.GetExecution().GetError())
		require.Equal(t, 1, failpoint.Hits(failpoint.MaterializerLoseCommand), "the second attempt's command was lost")
		n := issued(id)
		require.Equal(t, 2, n["command.issued"], "each attempt issued once")
		require.Equal(t, 1, n["command.completed"])
	})
}
