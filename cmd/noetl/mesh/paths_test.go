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
	"github.com/noetl/noetl/internal/platform/auth"
)

const slashPath = `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: job, path: /team/job}
workflow:
  - step: start
    next: end
  - step: end
    tool: {kind: noop, result: {ok: true}}
`

// TestLeadingSlashPathsNameOneEntry: NoETL writes metadata.path with a leading '/';
// /team/job and team/job name one catalog entry, registration answers with the clean
// path, and every read and start resolves either spelling, over gRPC and REST. A leading
// slash never reaches a system playbook without the system role.
func TestLeadingSlashPathsNameOneEntry(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	c := newClient(t, m, m.AdminKey)
	ctx := context.Background()

	reg, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: slashPath})
	require.NoError(t, err)
	require.Equal(t, "team/job", reg.GetPlaybook().GetPath())
	require.EqualValues(t, 1, reg.GetPlaybook().GetVersion())
	again, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: slashPath})
	require.NoError(t, err)
	require.EqualValues(t, 1, again.GetPlaybook().GetVersion(), "the same content at the same entry is the same version")

	for _, p := range []string{"team/job", "/team/job"} {
		got, err := c.cat.GetPlaybook(ctx, &apiv1.GetPlaybookRequest{Path: p})
		require.NoError(t, err, p)
		require.Equal(t, "team/job", got.GetPlaybook().GetPath())
		started, err := c.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: p})
		require.NoError(t, err, p)
		done, err := c.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: started.GetExecutionId(), Timeout: durationpb.New(time.Minute)})
		require.NoError(t, err)
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, done.GetExecution().GetStatus(), p)
		require.Equal(t, "team/job", done.GetExecution().GetPath())
	}
	list, err := c.exe.ListExecutions(ctx, &apiv1.ListExecutionsRequest{Path: "/team/job"})
	require.NoError(t, err)
	require.Len(t, list.GetExecutions(), 2, "a list filtered by /team/job finds team/job's executions")
	out := c.wantREST(http.StatusOK, http.MethodPost, "/v1/executions", map[string]any{"path": "/team/job"})
	require.NotEmpty(t, out["executionId"], "%v", out)

	// A system playbook spelled with a leading slash is still a system playbook.
	_, err = c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: sys, path: /system/probe}
workflow:
  - step: start
    tool: {kind: noop}
`})
	require.NoError(t, err)
	key, err := c.admin.CreateApiKey(ctx, &apiv1.CreateApiKeyRequest{Roles: []string{auth.RoleOperator}, Name: "op"})
	require.NoError(t, err)
	op := newClient(t, m, key.GetSecret())
	for _, p := range []string{"system/probe", "/system/probe"} {
		_, err := op.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: p})
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%s: %v", p, err)
	}
}
