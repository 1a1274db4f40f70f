package worker

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// The worker's tool table and the kinds registration accepts are one list
// (playbook.WorkerToolKinds, plus SystemToolKinds on the system pool and the tenant-safe
// ones, for overrides of system playbooks, elsewhere): a kind registration
// accepts always has a tool, and a tool the worker runs is always accepted.
func TestToolTableIsTheKindsRegistrationAccepts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pool string
		want []string
	}{
		{"shared", slices.Concat(playbook.WorkerToolKinds, playbook.TenantSafeToolKinds)},
		{"system", slices.Concat(playbook.WorkerToolKinds, playbook.SystemToolKinds)},
	} {
		t.Run(tc.pool, func(t *testing.T) {
			t.Parallel()
			table, _, closeTools := toolTable(Config{Pool: tc.pool}, tools.EgressPublic, nil, nil, nil, nil, wasmDeps{})
			defer closeTools()
			require.ElementsMatch(t, tc.want, slices.Collect(maps.Keys(table)))
			for k := range table {
				require.True(t, playbook.KnownToolKind(k), k)
			}
		})
	}
}

// kind: shell is in every table (registration accepts it) but runs only where enabled:
// NOETL_WORKER_SHELL=true, or the system pool.
func TestShellRunsOnlyWhereEnabled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pool  string
		shell bool
		on    bool
	}{
		{"shared", false, false},
		{"shared", true, true},
		{"system", false, true},
	} {
		table, _, closeTools := toolTable(Config{Pool: tc.pool, Shell: tc.shell}, tools.EgressPublic, nil, nil, nil, nil, wasmDeps{})
		closeTools()
		require.Equal(t, tc.on, table["shell"].(*tools.Shell).Enabled, "pool %s, NOETL_WORKER_SHELL=%v", tc.pool, tc.shell)
	}
}
