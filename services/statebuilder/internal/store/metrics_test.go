package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/testkit"
)

func TestCacheMetricsAndRunningCount(t *testing.T) {
	url := testkit.StartMigratedPostgres(t)
	ctx := context.Background()
	s := newStore(t, url, Options{MaxEntries: 3})
	for i := range 5 {
		id := fmt.Sprintf("m%d", i)
		insert(t, s, id, 1, 2)
		_, err := s.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: id})
		require.NoError(t, err)
	}
	require.Equal(t, 3.0, testutil.ToFloat64(s.cacheEntries))
	require.Equal(t, 2.0, testutil.ToFloat64(s.evictions))
	require.Equal(t, float64(s.lru.Len()), testutil.ToFloat64(s.cacheEntries))

	n, err := s.RunningExecutions(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(5), n)
	_, err = s.db.Exec(ctx, `UPDATE noetl.execution SET status = 2 WHERE execution_id IN ('m0', 'm1')`)
	require.NoError(t, err)
	n, err = s.RunningExecutions(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), n, "terminal executions are not counted")
}
