package playbooks

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/playbook"
)

// The system pool's rules at registration: system/ needs the system role; system_* tools
// only there, except the tenant-safe ones in a tenant's override of a system playbook,
// which needs the admin role.
func TestSystemGuard(t *testing.T) {
	t.Parallel()
	as := func(roles ...string) context.Context {
		return auth.NewContext(context.Background(), &auth.Principal{Tenant: "acme", Subject: "u", Roles: roles})
	}
	step := func(kind string) *playbook.Playbook {
		return &playbook.Playbook{Steps: []*playbook.Step{{Name: "start", Line: 7, Tool: []*playbook.Tool{{Kind: kind}}}}}
	}
	workbook := &playbook.Playbook{Workbook: map[string]*playbook.Tool{"purge": {Kind: "system_cleanup"}}}
	for _, c := range []struct {
		name string
		ctx  context.Context
		pb   *playbook.Playbook
		path string
		code codes.Code
		msg  string
	}{
		{"system path as operator", as(auth.RoleOperator), step("python"), "system/retention", codes.PermissionDenied, "metadata.path: registering system/ playbooks requires the system role"},
		{"system path as system", as(auth.RoleSystem), step("system_purge"), "system/retention", codes.OK, ""},
		{"plain playbook", as(auth.RoleOperator), step("python"), "etl/daily", codes.OK, ""},
		{"system tool outside system/", as(auth.RoleAdmin), step("system_purge"), "etl/daily", codes.InvalidArgument, `line 7: step "start": tool kind "system_purge" is reserved for system/ playbooks`},
		{"system tool in a workbook", as(auth.RoleAdmin), workbook, "etl/daily", codes.InvalidArgument, `workbook task "purge": tool kind "system_cleanup" is reserved for system/ playbooks`},
		{"override with a tenant-safe tool as admin", as(auth.RoleAdmin), step("system_purge"), "acme/system/retention", codes.OK, ""},
		{"override with a tenant-safe tool as operator", as(auth.RoleOperator), step("system_purge"), "acme/system/retention", codes.PermissionDenied, "requires the admin role"},
		{"override with another system tool", as(auth.RoleAdmin), step("system_cleanup"), "acme/system/retention", codes.InvalidArgument, "(an override of a system playbook may use system_purge)"},
	} {
		err := systemGuard(c.ctx, "acme", c.pb, c.path)
		require.Equal(t, c.code, status.Code(err), c.name)
		if c.msg != "" {
			require.Contains(t, status.Convert(err).Message(), c.msg, c.name)
		}
	}
}
