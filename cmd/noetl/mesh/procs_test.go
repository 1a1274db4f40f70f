package mesh_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/cmd/noetl/mesh"
)

// TestLeaveCoreToPostgres: the scheduler gets one processor fewer than it had, at least
// one, and an explicit GOMAXPROCS is left alone.
func TestLeaveCoreToPostgres(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })

	t.Setenv("GOMAXPROCS", "")
	runtime.GOMAXPROCS(3)
	procs, changed := mesh.LeaveCoreToPostgres()
	require.Equal(t, 2, procs)
	require.True(t, changed)
	require.Equal(t, 2, runtime.GOMAXPROCS(0))

	runtime.GOMAXPROCS(1)
	procs, changed = mesh.LeaveCoreToPostgres()
	require.Equal(t, 1, procs, "never below one")
	require.False(t, changed)

	t.Setenv("GOMAXPROCS", "3")
	runtime.GOMAXPROCS(3)
	procs, changed = mesh.LeaveCoreToPostgres()
	require.Equal(t, 3, procs, "GOMAXPROCS wins")
	require.False(t, changed)
	require.Equal(t, 3, runtime.GOMAXPROCS(0))
}
