package mesh_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

const systemBook = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: probe, path: system/probe}
workflow:
  - step: start
    tool: {kind: system_info}
`

// TestSystemPlaybooksAreTheSystemRolesAndRunOnTheSystemPool checks the system pool's
// rules: only the system role registers and starts system/ playbooks, only they may use
// system_* tools, and their commands run on the system pool's worker.
func TestSystemPlaybooksAreTheSystemRolesAndRunOnTheSystemPool(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	ctx := context.Background()
	system := newClient(t, m, m.AdminKey) // the dev key holds admin and system
	adminKey, _ := system.createKey(map[string]any{"roles": []string{"admin"}, "name": "plain admin"})
	admin := newClient(t, m, adminKey)

	// An admin without the system role can neither register nor start system/ playbooks.
	_, err := admin.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: systemBook})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	admin.wantREST(http.StatusForbidden, http.MethodPost, "/v1/playbooks", map[string]any{"content": systemBook})

	// system_* tools are reserved for system/ playbooks, whoever registers them.
	_, err = system.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: sneaky, path: user/sneaky}
workflow:
  - step: start
    tool: {kind: system_info}
`})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "reserved for system/")

	_, err = system.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: systemBook})
	require.NoError(t, err)
	_, err = admin.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "system/probe"})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)

	started, err := system.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "system/probe"})
	require.NoError(t, err)
	done, err := system.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: started.GetExecutionId(), Timeout: durationpb.New(30 * time.Second)})
	require.NoError(t, err)
	x := done.GetExecution()
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
	require.Equal(t, "system", x.GetResult().GetStructValue().GetFields()["pool"].GetStringValue(), "ran on the system pool")
}
