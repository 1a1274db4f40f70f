package mesh_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/failpoint"
	"github.com/noetl/noetl/internal/testkit"
)

// TestReconcilerRecoversLostNoticesAndCommands loses a commit notice and, separately, a
// committed command; the execution stalls until the reconciler re-drives it.
func TestReconcilerRecoversLostNoticesAndCommands(t *testing.T) {
	pg := testkit.StartPostgres(t)
	natsURL := testkit.StartNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m, err := mesh.Start(ctx, mesh.Config{StateDir: t.TempDir(), PostgresURL: pg, NATSURL: natsURL, ReconcileEvery: 200 * time.Millisecond, StaleAfter: time.Second})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	conn, err := m.Dial()
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	h := &harness{m: m, cat: apiv1.NewCatalogServiceClient(conn), exe: apiv1.NewExecutionServiceClient(conn)}
	t.Cleanup(failpoint.Reset)
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
