package store

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/testkit"
)

// QueryReadOnly reads with bound parameters and a row cap, and refuses writes, several
// statements and callers that are not services.
func TestQueryReadOnlyReadsBoundedAndNeverWrites(t *testing.T) {
	t.Parallel()
	s := newStore(t, testkit.StartMigratedPostgres(t), Options{})
	insert(t, s, "x1", 1, 2, 3)
	svc := auth.NewContext(context.Background(), auth.ServicePrincipal("worker"))

	resp, err := s.QueryReadOnly(svc, &sbv1.QueryReadOnlyRequest{Sql: `SELECT seq, type FROM event WHERE execution_id = $1 ORDER BY seq`, ParamsJson: []byte(`["x1"]`), MaxRows: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"seq", "type"}, resp.GetColumns())
	var rows [][]any
	require.NoError(t, json.Unmarshal(resp.GetRowsJson(), &rows))
	require.Equal(t, [][]any{{float64(1), "playbook.started"}, {float64(2), "ctx.updated"}}, rows)
	require.True(t, resp.GetTruncated(), "three rows, two asked for")

	for _, sql := range []string{
		`DELETE FROM event`,
		`UPDATE execution SET status = 2`,
		`SELECT 1; DELETE FROM event`,
		`SELECT pg_sleep(5)`,
	} {
		_, err := s.QueryReadOnly(svc, &sbv1.QueryReadOnlyRequest{Sql: sql, TimeoutMs: 200})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", sql, err)
	}
	var n int
	require.NoError(t, s.db.QueryRow(context.Background(), `SELECT count(*) FROM noetl.event WHERE execution_id = 'x1'`).Scan(&n))
	require.Equal(t, 3, n, "nothing was written")

	user := auth.NewContext(context.Background(), &auth.Principal{Tenant: "t", Subject: "apikey:x", Roles: []string{auth.RoleSystem}})
	_, err = s.QueryReadOnly(user, &sbv1.QueryReadOnlyRequest{Sql: `SELECT 1`})
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	_, err = s.PurgeSnapshots(user, &sbv1.PurgeSnapshotsRequest{Orphans: true})
	require.Equal(t, codes.PermissionDenied, status.Code(err))
}

// A cached terminal state is not served once its execution is purged, and its snapshot
// goes with PurgeSnapshots; a live execution's snapshot stays.
func TestPurgedExecutionsAreNotServedFromTheCache(t *testing.T) {
	t.Parallel()
	s := newStore(t, testkit.StartMigratedPostgres(t), Options{SnapshotEvery: 1})
	ctx := context.Background()
	for _, id := range []string{"gone", "live"} {
		insert(t, s, id, 1, 2)
		_, err := s.db.Exec(ctx, `UPDATE noetl.execution SET status = 2 WHERE execution_id = $1`, id)
		require.NoError(t, err)
		_, err = s.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: id})
		require.NoError(t, err)
	}
	// The fold decides the state's status from the events; make the cached one terminal
	// as a completed execution's would be.
	for _, id := range []string{"gone", "live"} {
		e := s.entry(id)
		e.mu.Lock()
		e.state.Status = 2
		e.mu.Unlock()
	}
	_, err := s.db.Exec(ctx, `DELETE FROM noetl.execution WHERE execution_id = 'gone'`)
	require.NoError(t, err)
	_, err = s.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: "gone"})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	_, err = s.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: "live"})
	require.NoError(t, err)

	svc := auth.NewContext(ctx, auth.ServicePrincipal("worker"))
	resp, err := s.PurgeSnapshots(svc, &sbv1.PurgeSnapshotsRequest{ExecutionIds: []string{"gone", "live"}})
	require.NoError(t, err)
	require.Equal(t, int64(1), resp.GetDeleted(), "only the purged execution's snapshot")
	var n int
	require.NoError(t, s.db.QueryRow(ctx, `SELECT count(*) FROM noetl.state_snapshot`).Scan(&n))
	require.Equal(t, 1, n)
}
