package authz

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/internal/platform/auth"
)

// publicMethods lists every RPC of every service in the public API's descriptors.
func publicMethods(t *testing.T) []string {
	t.Helper()
	_ = apiv1.File_noetl_api_v1_api_proto // the descriptors are registered by the import
	var out []string
	protoregistry.GlobalFiles.RangeFilesByPackage("noetl.api.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				out = append(out, "/"+string(sd.FullName())+"/"+string(sd.Methods().Get(j).Name()))
			}
		}
		return true
	})
	require.NotEmpty(t, out)
	return out
}

func TestEveryPublicRPCNeedsAPermission(t *testing.T) {
	t.Parallel()
	methods := publicMethods(t)
	for _, m := range methods {
		_, ok := Required(m)
		require.True(t, ok, "%s is not mapped to a permission in authz.permissions: map it, or every call is denied", m)
	}
	// And nothing stale: every mapped method exists.
	require.Len(t, permissions, len(methods))
	require.Contains(t, methods, apiv1.AdminService_CreateApiKey_FullMethodName)
}

func TestAuthorizeDeniesByDefault(t *testing.T) {
	t.Parallel()
	viewer := &auth.Principal{Tenant: "t", Subject: "apikey:v", Roles: []string{auth.RoleViewer}}
	operator := &auth.Principal{Tenant: "t", Subject: "apikey:o", Roles: []string{auth.RoleOperator}}
	admin := &auth.Principal{Tenant: "t", Subject: "apikey:a", Roles: []string{auth.RoleAdmin}}
	system := &auth.Principal{Tenant: "t", Subject: "apikey:s", Roles: []string{auth.RoleSystem}}
	none := &auth.Principal{Tenant: "t", Subject: "jwt:x"}
	cases := []struct {
		p       *auth.Principal
		method  string
		allowed bool
	}{
		{viewer, apiv1.ExecutionService_GetExecution_FullMethodName, true},
		{viewer, apiv1.ResultService_GetResult_FullMethodName, true},
		{viewer, apiv1.ExecutionService_StartExecution_FullMethodName, false},
		{viewer, apiv1.CatalogService_RegisterPlaybook_FullMethodName, false},
		{operator, apiv1.ExecutionService_StartExecution_FullMethodName, true},
		{operator, apiv1.ExecutionService_CancelExecution_FullMethodName, true},
		{operator, apiv1.CatalogService_RegisterPlaybook_FullMethodName, false},
		{operator, apiv1.CredentialService_ListCredentials_FullMethodName, false},
		{admin, apiv1.CatalogService_RegisterPlaybook_FullMethodName, true},
		{admin, apiv1.CredentialService_PutCredential_FullMethodName, true},
		{admin, apiv1.AdminService_CreateApiKey_FullMethodName, true},
		{system, apiv1.ExecutionService_StartExecution_FullMethodName, true},
		{system, apiv1.AdminService_CreateApiKey_FullMethodName, false},
		{viewer, apiv1.ScheduleService_ListSchedules_FullMethodName, true},
		{viewer, apiv1.ScheduleService_PreviewSchedule_FullMethodName, true},
		{viewer, apiv1.ScheduleService_PauseSchedule_FullMethodName, false},
		{operator, apiv1.ScheduleService_PauseSchedule_FullMethodName, true},
		{operator, apiv1.ScheduleService_ResumeSchedule_FullMethodName, true},
		{operator, apiv1.ScheduleService_CreateSchedule_FullMethodName, false},
		{operator, apiv1.ScheduleService_DeleteSchedule_FullMethodName, false},
		{admin, apiv1.ScheduleService_CreateSchedule_FullMethodName, true},
		{admin, apiv1.ScheduleService_DeleteSchedule_FullMethodName, true},
		{viewer, apiv1.TriggerService_GetTrigger_FullMethodName, true},
		{viewer, apiv1.TriggerService_ListTriggers_FullMethodName, true},
		{viewer, apiv1.TriggerService_FireTrigger_FullMethodName, false},
		{viewer, apiv1.TriggerService_CreateTrigger_FullMethodName, false},
		{operator, apiv1.TriggerService_FireTrigger_FullMethodName, true},
		{operator, apiv1.TriggerService_CreateTrigger_FullMethodName, false},
		{operator, apiv1.TriggerService_DeleteTrigger_FullMethodName, false},
		{admin, apiv1.TriggerService_CreateTrigger_FullMethodName, true},
		{admin, apiv1.TriggerService_DeleteTrigger_FullMethodName, true},
		{none, apiv1.TriggerService_GetTrigger_FullMethodName, false},
		{viewer, apiv1.PluginService_GetPlugin_FullMethodName, true},
		{viewer, apiv1.PluginService_ListPlugins_FullMethodName, true},
		{viewer, apiv1.PluginService_RegisterPlugin_FullMethodName, false},
		{operator, apiv1.PluginService_RegisterPlugin_FullMethodName, false},
		{admin, apiv1.PluginService_RegisterPlugin_FullMethodName, true},
		{none, apiv1.PluginService_GetPlugin_FullMethodName, false},
		{none, apiv1.CatalogService_ListPlaybooks_FullMethodName, false},
		{admin, "/noetl.api.v1.CatalogService/DropEverything", false},
		{admin, "/noetl.orchestrator.v1.CredentialService/ResolveCredential", false},
	}
	for _, tc := range cases {
		err := Authorize(tc.p, tc.method)
		if tc.allowed {
			require.NoError(t, err, "%v %s", tc.p.Roles, tc.method)
			continue
		}
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%v %s", tc.p.Roles, tc.method)
	}
	err := Authorize(viewer, apiv1.ExecutionService_StartExecution_FullMethodName)
	require.Equal(t, "/noetl.api.v1.ExecutionService/StartExecution needs the execute permission, granted by the roles operator, admin, system; the caller holds viewer", status.Convert(err).Message())
	require.Equal(t, codes.Unauthenticated, status.Code(Authorize(nil, apiv1.ExecutionService_GetExecution_FullMethodName)))
}

// TestEveryRoleThatStartsMayRead: a start that waits (StartExecutionRequest.wait) answers
// with the execution's view, which WaitExecution gives only to a reader, and checks no
// permission of its own: no role may start without being allowed to read.
func TestEveryRoleThatStartsMayRead(t *testing.T) {
	for _, r := range auth.Roles {
		p := &auth.Principal{Tenant: "t", Subject: "apikey:x", Roles: []string{r}}
		if Authorize(p, apiv1.ExecutionService_StartExecution_FullMethodName) == nil {
			require.NoError(t, Authorize(p, apiv1.ExecutionService_WaitExecution_FullMethodName), "role %s starts executions but cannot wait for them", r)
		}
	}
}
