package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The processors --procs gives each service are the chart's CPU limits rounded up, capped
// at the machine's cores; a limit that is not a CPU quantity is an error naming it.
func TestChartProcs(t *testing.T) {
	root, err := repoRoot()
	require.NoError(t, err)
	procs, err := chartProcs(root, 64)
	require.NoError(t, err)
	require.Len(t, procs, len(procServices))
	for _, s := range procServices {
		require.GreaterOrEqual(t, procs[s], 1, s)
	}
	one, err := chartProcs(root, 1)
	require.NoError(t, err)
	for _, s := range procServices {
		require.Equal(t, 1, one[s], "%s on one core", s)
	}

	for q, want := range map[string]float64{"2": 2, "1.5": 1.5, "500m": 0.5, "2500m": 2.5} {
		got, err := cpuCores(q)
		require.NoError(t, err, q)
		require.InDelta(t, want, got, 1e-9, q)
	}
	for _, q := range []string{"", "<nil>", "0", "-1", "two", "m"} {
		_, err := cpuCores(q)
		require.Error(t, err, q)
	}
}
