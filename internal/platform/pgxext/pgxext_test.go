package pgxext_test

import (
	"context"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestCommitsAreSynchronousWhateverTheServerDefault: a database whose default is
// synchronous_commit=off (so an immediate stop would discard the last commits) still gets
// synchronous commits from NoETL's pools, unless the URL asks otherwise.
func TestCommitsAreSynchronousWhateverTheServerDefault(t *testing.T) {
	ctx := context.Background()
	dbURL := testkit.StartPostgres(t)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{u.Path[1:]}.Sanitize()+" SET synchronous_commit = off")
	require.NoError(t, err)
	var plain string
	require.NoError(t, conn.Close(ctx))
	conn, err = pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	require.NoError(t, conn.QueryRow(ctx, "SHOW synchronous_commit").Scan(&plain))
	require.NoError(t, conn.Close(ctx))
	require.Equal(t, "off", plain, "the database's default")

	pool, err := pgxext.Open(ctx, dbURL, 2)
	require.NoError(t, err)
	defer pool.Close()
	var got string
	require.NoError(t, pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&got))
	require.Equal(t, "on", got)

	q := u.Query()
	q.Set("synchronous_commit", "local")
	u.RawQuery = q.Encode()
	explicit, err := pgxext.Open(ctx, u.String(), 2)
	require.NoError(t, err)
	defer explicit.Close()
	require.NoError(t, explicit.QueryRow(ctx, "SHOW synchronous_commit").Scan(&got))
	require.Equal(t, "local", got, "a URL that sets it wins")
}

// A pool keeps half of its connections made from the start, so a burst of calls does not
// wait for new ones; a URL's pool_min_conns overrides it.
func TestPoolKeepsHalfItsConnections(t *testing.T) {
	ctx := context.Background()
	dbURL := testkit.StartPostgres(t)
	pool, err := pgxext.Open(ctx, dbURL, 8)
	require.NoError(t, err)
	defer pool.Close()
	require.Equal(t, int32(4), pool.Config().MinConns)
	testkit.WaitFor(t, 30*time.Second, func() error {
		if n := pool.Stat().TotalConns(); n < 4 {
			return fmt.Errorf("%d connections made, want 4", n)
		}
		return nil
	})
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("pool_min_conns", "1")
	u.RawQuery = q.Encode()
	one, err := pgxext.Open(ctx, u.String(), 8)
	require.NoError(t, err)
	defer one.Close()
	require.Equal(t, int32(1), one.Config().MinConns)
}

// WarmUp's reads run on every connection the pool makes, before it is handed out, after
// what AfterConnect set; a read that fails (a table not there yet) does not refuse the
// connection.
func TestWarmUpRunsOnEveryNewConnectionAndNeverRefusesIt(t *testing.T) {
	ctx := context.Background()
	dbURL := testkit.StartPostgres(t)
	var hooked atomic.Int32
	pool, err := pgxext.Open(ctx, dbURL, 3,
		pgxext.AfterConnect(func(ctx context.Context, c *pgx.Conn) error {
			hooked.Add(1)
			_, err := c.Exec(ctx, "SELECT set_config('noetl.hooked', 'yes', false)")
			return err
		}),
		pgxext.WarmUp("SELECT 1 FROM noetl_no_such_table WHERE id = 0", "SELECT set_config('noetl.warmed', current_setting('noetl.hooked', true), false)"))
	require.NoError(t, err)
	defer pool.Close()
	for i := range 3 { // three connections at once: each made by the pool
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
		var warmed string
		require.NoError(t, c.QueryRow(ctx, "SELECT coalesce(current_setting('noetl.warmed', true), '')").Scan(&warmed))
		require.Equal(t, "yes", warmed, "connection %d: warmed after the earlier hook, before it was handed out", i)
	}
	require.GreaterOrEqual(t, hooked.Load(), int32(3))
}
