package mesh_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	"github.com/noetl/noetl/internal/platform/pgxext"
)

// TestLeaveCoreToPostgres: the scheduler gets one processor fewer than it had, at least
// one, and an explicit GOMAXPROCS is left alone; left with one processor, the Postgres
// connections opened from then on poll their reads.
func TestLeaveCoreToPostgres(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before); pgxext.SetPollReads(0) })

	t.Setenv("GOMAXPROCS", "")
	runtime.GOMAXPROCS(3)
	procs, changed := mesh.LeaveCoreToPostgres()
	require.Equal(t, 2, procs)
	require.True(t, changed)
	require.Equal(t, 2, runtime.GOMAXPROCS(0))
	require.Zero(t, pgxext.PollReads(), "two processors: the runtime's poller is not starved")

	runtime.GOMAXPROCS(2)
	procs, changed = mesh.LeaveCoreToPostgres()
	require.Equal(t, 1, procs)
	require.True(t, changed)
	require.Positive(t, pgxext.PollReads(), "one processor: reads poll")
	pgxext.SetPollReads(0)

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
