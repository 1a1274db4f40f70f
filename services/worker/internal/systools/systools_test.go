package systools

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/services/worker/internal/tools"
)

// Each system tool decides who it acts for from the command: a system/ playbook on the
// system pool (every tenant), a tenant's own override with a tenant-safe kind (that
// tenant), nothing else; and it refuses a bad configuration naming the field before it
// calls anything.
func TestSystemToolsActOnlyForTheirScope(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pool, tenant, path, kind string
		want                     scope
		refused                  string
	}{
		{pool: "system", tenant: "default", path: "system/retention", kind: "system_purge", want: scope{platform: true, name: "retention"}},
		{pool: "shared", tenant: "acme", path: "acme/system/retention", kind: "system_purge", want: scope{tenant: "acme", name: "retention"}},
		{pool: "shared", tenant: "default", path: "system/retention", kind: "system_purge", refused: "runs only on the system pool"},
		{pool: "shared", tenant: "acme", path: "beta/system/retention", kind: "system_purge", refused: "reserved for system/ playbooks"},
		{pool: "shared", tenant: "acme", path: "acme/system/cleanup", kind: "system_cleanup", refused: "reserved for system/ playbooks"},
		{pool: "shared", tenant: "acme", path: "acme/jobs/x", kind: "system_purge", refused: "reserved for system/ playbooks"},
	} {
		got, err := scopeOf(&tools.Call{Kind: c.kind, Tenant: c.tenant, PlaybookPath: c.path}, c.pool)
		if c.refused != "" {
			require.ErrorContains(t, err, c.refused, "%+v", c)
			continue
		}
		require.NoError(t, err, "%+v", c)
		require.Equal(t, c.want, got)
	}

	ctx := context.Background()
	call := func(kind string, cfg map[string]any) *tools.Call {
		return &tools.Call{Kind: kind, Tenant: "default", PlaybookPath: "system/x", Config: cfg}
	}
	r := tools.Registry{}
	Register(r, "system", nil)
	for _, c := range []struct {
		kind string
		cfg  map[string]any
		want string
	}{
		{"system_purge", map[string]any{}, "retention: 0s is shorter than the minimum of 24h0m0s"},
		{"system_purge", map[string]any{"retention": "1h"}, "retention: 1h0m0s is shorter"},
		{"system_purge", map[string]any{"retention": "soon"}, `retention: "soon" is not a duration`},
		{"system_purge", map[string]any{"retention": "48h", "tenants": map[string]any{"acme": "2h"}}, "tenants.acme: 2h0m0s is shorter"},
		{"system_sql_read", map[string]any{}, "sql: required"},
		{"system_sql_read", map[string]any{"sql": "SELECT 1", "max_rows": 0}, "max_rows: must be between 1 and 10000"},
		{"system_sql_read", map[string]any{"sql": "SELECT 1", "timeout": "2m"}, "timeout: must be a duration up to 1m"},
		{"system_cleanup", map[string]any{"grace": "later"}, "grace: want a duration"},
	} {
		_, err := r.Run(ctx, call(c.kind, c.cfg))
		var te *tools.Error
		require.True(t, errors.As(err, &te), "%s %v: %v", c.kind, c.cfg, err)
		require.False(t, te.Retryable)
		require.Contains(t, te.Msg, c.want, "%s %v", c.kind, c.cfg)
	}
	// A worker without its dependencies says so instead of failing obscurely.
	_, err := r.Run(ctx, call("system_purge", map[string]any{"retention": "48h"}))
	require.ErrorContains(t, err, ErrNotWired.Error())
}
