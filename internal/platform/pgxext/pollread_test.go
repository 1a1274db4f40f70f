//go:build unix

package pgxext_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/testkit"
)

// TestPoolsOpenedAfterSetPollReadsPollAndStillCancel: a pool opened after SetPollReads
// holds polling connections, which answer queries, and a query whose context ends is
// cancelled as on any connection (pgconn sets a deadline in the past) and leaves the pool
// usable.
func TestPoolsOpenedAfterSetPollReadsPollAndStillCancel(t *testing.T) {
	dbURL := testkit.StartPostgres(t)
	pgxext.SetPollReads(300)
	t.Cleanup(func() { pgxext.SetPollReads(0) })
	ctx := context.Background()
	pool, err := pgxext.Open(ctx, dbURL, 2)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	polling := pgxext.Polling(conn.Conn().PgConn().Conn())
	conn.Release()
	require.True(t, polling, "the pool's connections poll their reads")

	var sum int
	require.NoError(t, pool.QueryRow(ctx, `SELECT sum(g)::int FROM generate_series(1, 1000) g`).Scan(&sum))
	require.Equal(t, 500500, sum)

	qctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = pool.Exec(qctx, `SELECT pg_sleep(60)`)
	require.Error(t, err)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "the query ended with its context: %v", err)
	// The backend stops sleeping (the cancel request, or the closed connection) long
	// before its 60 s.
	testkit.WaitFor(t, 20*time.Second, func() error {
		var sleeping int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)' AND state = 'active'`).Scan(&sleeping); err != nil {
			return err
		}
		if sleeping > 0 {
			return fmt.Errorf("%d backends still sleep", sleeping)
		}
		return nil
	})

	require.NoError(t, pool.QueryRow(ctx, `SELECT 41 + 1`).Scan(&sum))
	require.Equal(t, 42, sum)
}

// TestPollReadsOffByDefault: without SetPollReads a pool's connections are the dialer's own.
func TestPollReadsOffByDefault(t *testing.T) {
	pool, err := pgxext.Open(context.Background(), testkit.StartPostgres(t), 1)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	conn, err := pool.Acquire(context.Background())
	require.NoError(t, err)
	defer conn.Release()
	polling := pgxext.Polling(conn.Conn().PgConn().Conn())
	require.False(t, polling)
}
