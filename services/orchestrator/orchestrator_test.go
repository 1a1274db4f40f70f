package orchestrator

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestMigrateOnlyAppliesTheSchemaAndExits is what a deployment's migration step runs: no
// NATS, no statebuilder, only Postgres.
func TestMigrateOnlyAppliesTheSchemaAndExits(t *testing.T) {
	url := testkit.StartPostgres(t)
	ctx := context.Background()
	require.NoError(t, Run(ctx, Config{MigrateOnly: true, PostgresURL: url}, slog.New(slog.DiscardHandler)))
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'noetl' AND table_name IN ('event', 'execution', 'catalog', 'timer', 'state_snapshot', 'result')`).Scan(&n))
	require.Equal(t, 6, n)
	// Running it again is a no-op.
	require.NoError(t, Run(ctx, Config{MigrateOnly: true, PostgresURL: url}, slog.New(slog.DiscardHandler)))
}
