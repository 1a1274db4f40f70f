package execute

import (
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

func TestWorkersAdmitOnlyTheirPoolsCommands(t *testing.T) {
	cases := []struct {
		pool, path, kind string
		ok               bool
	}{
		// A tenant's override of a system playbook runs on its own pool with the
		// tenant-safe system tools only, and only as that tenant's.
		{"shared", "acme/system/retention", "system_purge", true},
		{"shared", "acme/system/retention", "system_sql_read", false},
		{"shared", "acme/system/retention", "system_cleanup", false},
		{"shared", "beta/system/retention", "system_purge", false}, // not acme's own path
		{"shared", "acme/other/retention", "system_purge", false},
		{"system", "acme/system/retention", "system_purge", false}, // not a system/ playbook
		{"system", "system/retention", "system_purge", true},
		{"system", "system/stalled_report", "system_sql_read", true},
		{"shared", "user/p", "python", true},
		{"shared", "system/p", "python", false},    // a system playbook's command pinned to the shared pool
		{"shared", "user/p", "system_info", false}, // a system tool outside the system pool
		{"system", "system/p", "system_info", true},
		{"system", "user/p", "python", false}, // a user command pinned to the system pool
		{"system", "user/p", "system_info", false},
	}
	for _, c := range cases {
		t.Run(c.pool+" "+c.path+" "+c.kind, func(t *testing.T) {
			ex := &Executor{Pool: c.pool}
			err := ex.admit(&eventv1.Command{Step: "s", Tenant: "acme", PlaybookPath: c.path, Tools: []*eventv1.ToolCall{{Kind: c.kind}}})
			if c.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}
