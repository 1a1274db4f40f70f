// Package authz is the gateway's one authorization decision: every public RPC (gRPC, and
// REST and the NoETL-compatible routes, which the gateway serves through its own gRPC
// server) maps to the permission it needs, and anything not in the map is denied.
package authz

import (
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/internal/platform/auth"
)

// permissions maps every public RPC by full method name to the permission it needs. A test
// fails when an RPC of the public API is missing here.
var permissions = map[string]auth.Permission{
	apiv1.CatalogService_RegisterPlaybook_FullMethodName: auth.PermAdmin,
	apiv1.CatalogService_GetPlaybook_FullMethodName:      auth.PermRead,
	apiv1.CatalogService_ListPlaybooks_FullMethodName:    auth.PermRead,

	apiv1.ExecutionService_StartExecution_FullMethodName:      auth.PermExecute,
	apiv1.ExecutionService_GetExecution_FullMethodName:        auth.PermRead,
	apiv1.ExecutionService_WaitExecution_FullMethodName:       auth.PermRead,
	apiv1.ExecutionService_ListExecutions_FullMethodName:      auth.PermRead,
	apiv1.ExecutionService_CancelExecution_FullMethodName:     auth.PermExecute,
	apiv1.ExecutionService_RerunExecution_FullMethodName:      auth.PermExecute,
	apiv1.ExecutionService_ListExecutionEvents_FullMethodName: auth.PermRead,
	apiv1.ExecutionService_WatchExecution_FullMethodName:      auth.PermRead,
	apiv1.ExecutionService_ListExecutionLogs_FullMethodName:   auth.PermRead,
	apiv1.ExecutionService_WatchExecutionLogs_FullMethodName:  auth.PermRead,
	// Variables change what a running execution's later steps render: an operator's.
	apiv1.ExecutionService_ListExecutionVariables_FullMethodName:   auth.PermRead,
	apiv1.ExecutionService_SetExecutionVariables_FullMethodName:    auth.PermExecute,
	apiv1.ExecutionService_DeleteExecutionVariables_FullMethodName: auth.PermExecute,

	apiv1.ResultService_GetResult_FullMethodName:           auth.PermRead,
	apiv1.ResultService_GetResultFlightInfo_FullMethodName: auth.PermRead,
	apiv1.ResultService_ExportResult_FullMethodName:        auth.PermRead,

	apiv1.CredentialService_PutCredential_FullMethodName:    auth.PermAdmin,
	apiv1.CredentialService_ListCredentials_FullMethodName:  auth.PermAdmin,
	apiv1.CredentialService_DeleteCredential_FullMethodName: auth.PermAdmin,

	apiv1.AdminService_CreateApiKey_FullMethodName: auth.PermAdmin,
	apiv1.AdminService_ListApiKeys_FullMethodName:  auth.PermAdmin,
	apiv1.AdminService_RevokeApiKey_FullMethodName: auth.PermAdmin,

	// A schedule is standing configuration that starts executions with no caller present,
	// like an API key: creating and deleting one is the admin's; pausing and resuming are
	// the operator's (who may stop a runaway schedule); reading is anyone's.
	apiv1.ScheduleService_CreateSchedule_FullMethodName:  auth.PermAdmin,
	apiv1.ScheduleService_DeleteSchedule_FullMethodName:  auth.PermAdmin,
	apiv1.ScheduleService_PauseSchedule_FullMethodName:   auth.PermExecute,
	apiv1.ScheduleService_ResumeSchedule_FullMethodName:  auth.PermExecute,
	apiv1.ScheduleService_GetSchedule_FullMethodName:     auth.PermRead,
	apiv1.ScheduleService_ListSchedules_FullMethodName:   auth.PermRead,
	apiv1.ScheduleService_PreviewSchedule_FullMethodName: auth.PermRead,

	// A trigger is standing configuration too, like a schedule: creating and deleting one
	// is the admin's, reading is anyone's. Firing one as an authenticated caller (instead of
	// with its signature) starts an execution: the operator's.
	apiv1.TriggerService_CreateTrigger_FullMethodName: auth.PermAdmin,
	apiv1.TriggerService_DeleteTrigger_FullMethodName: auth.PermAdmin,
	apiv1.TriggerService_GetTrigger_FullMethodName:    auth.PermRead,
	apiv1.TriggerService_ListTriggers_FullMethodName:  auth.PermRead,
	apiv1.TriggerService_FireTrigger_FullMethodName:   auth.PermExecute,

	// Which system playbooks run and which tenants override them: anyone may read their
	// own tenant's part; the system role sees every tenant's overrides.
	apiv1.SystemService_ListSystemPlaybooks_FullMethodName: auth.PermRead,

	// A plug-in is code steps run, like a playbook: registering one is the admin's,
	// reading is anyone's.
	apiv1.PluginService_RegisterPlugin_FullMethodName: auth.PermAdmin,
	apiv1.PluginService_GetPlugin_FullMethodName:      auth.PermRead,
	apiv1.PluginService_ListPlugins_FullMethodName:    auth.PermRead,
}

// Required returns the permission method needs; false when method is not mapped (and so
// never allowed).
func Required(method string) (auth.Permission, bool) {
	p, ok := permissions[method]
	return p, ok
}

// Authorize decides whether p may call method (a full gRPC method name): Unauthenticated
// without a principal, PermissionDenied for a method that is not mapped or a permission p
// lacks, nil otherwise. It is the only authorization decision of the public API.
func Authorize(p *auth.Principal, method string) error {
	if p == nil {
		return status.Error(codes.Unauthenticated, "credentials: required")
	}
	perm, ok := permissions[method]
	if !ok {
		return status.Errorf(codes.PermissionDenied, "%s: not permitted", method)
	}
	if !p.Can(perm) {
		return status.Errorf(codes.PermissionDenied, "%s needs the %s permission, granted by the roles %s; the caller holds %s",
			method, perm, strings.Join(grantedBy(perm), ", "), holds(p))
	}
	return nil
}

// grantedBy lists the roles that grant perm.
func grantedBy(perm auth.Permission) []string {
	var out []string
	for _, r := range auth.Roles {
		if (&auth.Principal{Tenant: "-", Subject: "-", Roles: []string{r}}).Can(perm) {
			out = append(out, r)
		}
	}
	return out
}

func holds(p *auth.Principal) string {
	if len(p.Roles) == 0 {
		return "no role"
	}
	r := slices.Clone(p.Roles)
	slices.Sort(r)
	return strings.Join(r, ", ")
}
