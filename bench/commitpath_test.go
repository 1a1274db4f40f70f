package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A line counts the commits of the measured phase alone, and says nothing of them when the
// bench could not read the materializer (a --gateway run).
func TestCommitPathFieldsCountTheMeasuredPhase(t *testing.T) {
	before := map[string]float64{metricCommits: 10, metricOneTripTaken: 7, metricOneTripMissed: 1, metricHeadStarts: 3}
	after := map[string]float64{metricCommits: 210, metricOneTripTaken: 205, metricOneTripMissed: 2, metricHeadStarts: 199}
	out := map[string]any{}
	commitPathFields(out, true, before, after)
	require.Equal(t, int64(200), out["commits"])
	require.Equal(t, int64(198), out["commits_one_round_trip"])
	require.Equal(t, int64(1), out["commits_one_round_trip_missed"])
	require.Equal(t, int64(196), out["commits_head_start"])
	require.Equal(t, commitPathScopeField, out["commits_scope"])

	out = map[string]any{}
	commitPathFields(out, false, nil, nil)
	require.Empty(t, out)
}
