package mesh_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	"github.com/noetl/noetl/internal/schema"
	"github.com/noetl/noetl/internal/testkit"
)

// TestAPrivateClusterIsReachedThroughItsSocket: a mesh that runs its own Postgres (as
// `noetl dev` does) has its services connect through the cluster's unix socket, each as its
// own login role; the URL it reports for clients stays TCP.
func TestAPrivateClusterIsReachedThroughItsSocket(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	state := t.TempDir()
	m, err := mesh.Start(ctx, mesh.Config{StateDir: state, NATSURL: testkit.StartNATS(t)})
	require.NoError(t, err)
	// Run as root, the cluster lives outside the state directory (pgembed.DirFor: under
	// /var/lib/noetl/postgres, where the server's user can reach it), so removing the test's
	// temporary directory would leave it behind, one per run. Remove it after the mesh stops.
	t.Cleanup(func() {
		if rel, err := filepath.Rel(state, m.PostgresDir); err == nil && !strings.HasPrefix(rel, "..") {
			return // inside the state directory, which the test removes
		}
		require.NoError(t, os.RemoveAll(m.PostgresDir))
	})
	t.Cleanup(m.Stop)
	for _, u := range []string{m.PostgresURLs.Orchestrator, m.PostgresURLs.Materializer, m.PostgresURLs.Statebuilder, m.PostgresURLs.Resultstore} {
		require.Contains(t, u, "host=%2F", "a service's URL names the socket directory")
	}
	require.Contains(t, m.PostgresURL, "@127.0.0.1:", "the admin URL clients are shown")
	conn, err := pgx.Connect(ctx, m.PostgresURL)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	roles := []string{}
	for _, s := range schema.Services() {
		roles = append(roles, schema.LoginRole(s))
	}
	testkit.WaitFor(t, 30*time.Second, func() error {
		var socket, tcp int
		err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE client_addr IS NULL), count(*) FILTER (WHERE client_addr IS NOT NULL)
			FROM pg_stat_activity WHERE usename = ANY ($1)`, roles).Scan(&socket, &tcp)
		switch {
		case err != nil:
			return err
		case tcp > 0:
			return fmt.Errorf("%d service connections through TCP", tcp)
		case socket == 0:
			return fmt.Errorf("no service connection yet")
		}
		return nil
	})
	var tcp int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE usename = ANY ($1) AND client_addr IS NOT NULL`, roles).Scan(&tcp))
	require.Zero(t, tcp, "no service connects through TCP")
}
