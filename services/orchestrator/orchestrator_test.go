package orchestrator

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestRunRefusesADatabaseItCannotUse: the orchestrator no longer migrates at start. On a
// database without the schema it stops, saying to run the migration; as the superuser
// (which may write the event log) it stops too, naming the role it needs. Both happen
// before it needs NATS or the statebuilder.
func TestRunRefusesADatabaseItCannotUse(t *testing.T) {
	ctx := context.Background()
	run := func(url string) error {
		return Run(ctx, Config{PostgresURL: url, NATSURL: "nats://127.0.0.1:1", StatebuilderAddr: "127.0.0.1:1",
			InternalSecret: "orchestrator-test-internal-secret-0123456789"}, slog.New(slog.DiscardHandler))
	}
	err := run(testkit.StartPostgres(t))
	require.ErrorContains(t, err, "holds no NoETL schema")
	require.ErrorContains(t, err, "run `noetl migrate`")

	err = run(testkit.StartMigratedPostgres(t))
	require.ErrorContains(t, err, "may write noetl.event, which only the materializer writes")
	require.ErrorContains(t, err, "noetl_orchestrator")
}
