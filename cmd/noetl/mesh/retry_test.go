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
	"github.com/noetl/noetl/internal/testkit"
)

const flaky = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: flaky, path: tests/flaky}
workflow:
  - step: start
    tool:
      kind: python
      input: {marker: "{{ workload.marker }}"}
      code: |
        import os
        if not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("first attempt fails")
        result = {"ok": True}
      spec:
        policy:
          rules:
            - when: "{{ output.status == 'error' }}"
              then: {do: retry, attempts: 3, delay: 2}
            - else: {then: {do: continue}}
`

// TestDurableRetrySurvivesARestartOfEveryService schedules a retry timer, stops every
// service, starts new ones on the same Postgres and NATS, and sees the timer fire.
func TestDurableRetrySurvivesARestartOfEveryService(t *testing.T) {
	pg := testkit.StartPostgres(t)
	natsURL := testkit.StartNATS(t)
	dir := t.TempDir()
	startMesh := func() (*mesh.Mesh, apiv1.ExecutionServiceClient, apiv1.CatalogServiceClient) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		m, err := mesh.Start(ctx, mesh.Config{StateDir: dir, PostgresURL: pg, NATSURL: natsURL})
		require.NoError(t, err)
		conn, err := m.Dial()
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		return m, apiv1.NewExecutionServiceClient(conn), apiv1.NewCatalogServiceClient(conn)
	}
	ctx := context.Background()
	m1, exe, cat := startMesh()
	t.Cleanup(m1.Stop)
	reg, err := cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: flaky})
	require.NoError(t, err)
	w, err := structpb.NewStruct(map[string]any{"marker": filepath.Join(t.TempDir(), "marker")})
	require.NoError(t, err)
	started, err := exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath(), Workload: w})
	require.NoError(t, err)
	id := started.GetExecutionId()
	hasEvent := func(exe apiv1.ExecutionServiceClient, typ string) error {
		resp, err := exe.ListExecutionEvents(ctx, &apiv1.ListExecutionEventsRequest{ExecutionId: id, PageSize: 1000})
		if err != nil {
			return err
		}
		for _, ev := range resp.GetEvents() {
			if ev.GetType() == typ {
				return nil
			}
		}
		return fmt.Errorf("no %s yet", typ)
	}
	testkit.WaitFor(t, 30*time.Second, func() error { return hasEvent(exe, "timer.scheduled") })
	m1.Stop()

	m2, exe2, _ := startMesh()
	t.Cleanup(m2.Stop)
	done, err := exe2.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(60 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, done.GetExecution().GetStatus(), "error: %v", done.GetExecution().GetError())
	require.NoError(t, hasEvent(exe2, "timer.fired"))
	attempts := map[int32]bool{}
	resp, err := exe2.ListExecutionEvents(ctx, &apiv1.ListExecutionEventsRequest{ExecutionId: id, PageSize: 1000})
	require.NoError(t, err)
	for _, ev := range resp.GetEvents() {
		if ev.GetType() == "command.issued" {
			attempts[ev.GetAttempt()] = true
		}
	}
	require.Equal(t, map[int32]bool{1: true, 2: true}, attempts)
}
