package mesh_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/testkit"
)

// keep returns a result too large to travel inline, so it is stored in the resultstore;
// with workload.sleep it stays running that long.
const keep = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: keep, path: tests/keep}
workload: {sleep: 0}
workflow:
  - step: start
    tool:
      kind: python
      input: {sleep: "{{ workload.sleep }}"}
      code: |
        import time
        time.sleep(sleep)
        result = {"blob": "x" * 100000}
`

// retentionRig is a mesh with the system playbooks and the database as its owner, to age
// executions and look behind the services.
type retentionRig struct {
	t  *testing.T
	m  *mesh.Mesh
	db *pgx.Conn
}

func (r *retentionRig) count(q string, args ...any) int {
	r.t.Helper()
	var n int
	require.NoError(r.t, r.db.QueryRow(context.Background(), q, args...).Scan(&n))
	return n
}

// traces counts what an execution left: its row, events, snapshot and results.
func (r *retentionRig) traces(id string) []int {
	r.t.Helper()
	return []int{
		r.count(`SELECT count(*) FROM noetl.execution WHERE execution_id = $1`, id),
		r.count(`SELECT count(*) FROM noetl.event WHERE execution_id = $1`, id),
		r.count(`SELECT count(*) FROM noetl.state_snapshot WHERE execution_id = $1`, id),
		r.count(`SELECT count(*) FROM noetl.result WHERE execution_id = $1`, id),
		r.count(`SELECT count(*) FROM noetl.result_chunk c JOIN noetl.result x USING (tenant, result_id) WHERE x.execution_id = $1`, id),
	}
}

// run starts path as c and, unless wait is false, waits for it to end.
func (r *retentionRig) run(c *client, path string, workload map[string]any, wait bool) string {
	r.t.Helper()
	ctx := context.Background()
	w, err := structpb.NewStruct(workload)
	require.NoError(r.t, err)
	started, err := c.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: path, Workload: w})
	require.NoError(r.t, err)
	id := started.GetExecutionId()
	if wait {
		done, err := c.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(60 * time.Second)})
		require.NoError(r.t, err)
		require.Equal(r.t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, done.GetExecution().GetStatus(), "%s: %v", path, done.GetExecution().GetError())
	}
	return id
}

// snapshot makes the statebuilder's snapshot of an execution exist, as a long one would
// have: the state it serves, stored as its snapshot.
func (r *retentionRig) snapshot(id string) {
	r.t.Helper()
	conn, err := r.m.DialInternal(r.m.StatebuilderAddr, "test")
	require.NoError(r.t, err)
	defer func() { _ = conn.Close() }()
	st, err := sbv1.NewStateServiceClient(conn).GetState(context.Background(), &sbv1.GetStateRequest{ExecutionId: id})
	require.NoError(r.t, err)
	body, err := proto.Marshal(st.GetState())
	require.NoError(r.t, err)
	_, err = r.db.Exec(context.Background(), `INSERT INTO noetl.state_snapshot (execution_id, seq, body) VALUES ($1, $2, $3)
		ON CONFLICT (execution_id) DO UPDATE SET seq = EXCLUDED.seq, body = EXCLUDED.body`, id, st.GetState().GetSeq(), body)
	require.NoError(r.t, err)
}

// age moves an execution's end back by d, as if it had ended that long ago.
func (r *retentionRig) age(id string, d time.Duration) {
	r.t.Helper()
	_, err := r.db.Exec(context.Background(), `UPDATE noetl.execution SET ended_at = now() - make_interval(secs => $2) WHERE execution_id = $1`, id, d.Seconds())
	require.NoError(r.t, err)
}

// fire makes a schedule's tick due now and returns the execution of its next tick, once ended.
func (r *retentionRig) fire(c *client, tenant, name string) *apiv1.Execution {
	r.t.Helper()
	ctx := context.Background()
	var before string
	require.NoError(r.t, r.db.QueryRow(ctx, `SELECT last_execution_id FROM noetl.schedule WHERE tenant = $1 AND name = $2`, tenant, name).Scan(&before))
	// A tick of the interval's grid falls now: the anchor an interval back.
	_, err := r.db.Exec(ctx, `UPDATE noetl.schedule SET anchor_at = now() - make_interval(secs => interval_ms / 1000.0), next_fire_at = now()
		WHERE tenant = $1 AND name = $2`, tenant, name)
	require.NoError(r.t, err)
	var id string
	testkit.WaitFor(r.t, 30*time.Second, func() error {
		if err := r.db.QueryRow(ctx, `SELECT last_execution_id FROM noetl.schedule WHERE tenant = $1 AND name = $2`, tenant, name).Scan(&id); err != nil {
			return err
		}
		if id == "" || id == before {
			var ticks, errs string
			_ = r.db.QueryRow(ctx, `SELECT count(*)::text, coalesce(string_agg(t.error, '; '), '') FROM noetl.schedule_tick t JOIN noetl.schedule s ON s.id = t.schedule_id WHERE s.tenant = $1 AND s.name = $2`, tenant, name).Scan(&ticks, &errs)
			return fmt.Errorf("schedule %s/%s has not started a new execution (ticks %s: %s)", tenant, name, ticks, errs)
		}
		return nil
	})
	done, err := c.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(60 * time.Second)})
	require.NoError(r.t, err)
	return done.GetExecution()
}

func listed(t *testing.T, c *client) []string {
	t.Helper()
	resp, err := c.exe.ListExecutions(context.Background(), &apiv1.ListExecutionsRequest{PageSize: 500})
	require.NoError(t, err)
	var ids []string
	for _, x := range resp.GetExecutions() {
		ids = append(ids, x.GetExecutionId())
	}
	return ids
}

// TestRetentionPurgesOnlyOldTerminalExecutionsEverywhere runs system/retention from its
// schedule, as the platform does: an execution that ended past the retention is gone from
// the log, the executions, the snapshots, the results and every API; a young terminal
// execution and a running one are untouched. Then a tenant's override takes precedence
// for that tenant, with its own retention, and cannot reach past its tenant.
func TestRetentionPurgesOnlyOldTerminalExecutionsEverywhere(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{SystemPlaybooks: true, TenantRetention: `{"beta": "240h"}`})
	ctx := context.Background()
	db, err := pgx.Connect(ctx, m.PostgresURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	r := &retentionRig{t: t, m: m, db: db}
	system := newClient(t, m, m.AdminKey) // admin and system of tenant default

	// The system playbooks are ordinary catalog entries of the platform's tenant, each
	// with its schedule.
	for _, name := range []string{"retention", "cleanup", "stalled_report"} {
		_, err := system.cat.GetPlaybook(ctx, &apiv1.GetPlaybookRequest{Path: "system/" + name})
		require.NoError(t, err, name)
		require.Equal(t, 1, r.count(`SELECT count(*) FROM noetl.schedule WHERE tenant = 'default' AND name = $1 AND path = $2`, "system."+name, "system/"+name))
	}

	_, err = system.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: keep})
	require.NoError(t, err)
	old := r.run(system, "tests/keep", nil, true)
	young := r.run(system, "tests/keep", nil, true)
	running := r.run(system, "tests/keep", map[string]any{"sleep": 600}, false)
	// Its worker reports the long command as started (command.started, after 2 s); wait for
	// that, so the events the running execution holds no longer change while the purge runs.
	testkit.WaitFor(t, 30*time.Second, func() error {
		if r.count(`SELECT count(*) FROM noetl.event WHERE execution_id = $1 AND type = 'command.started'`, running) == 0 {
			return fmt.Errorf("the running execution's command has not been reported started")
		}
		return nil
	})
	for _, id := range []string{old, young} {
		r.snapshot(id)
		require.Equal(t, []int{1, 1}, r.traces(id)[2:4], "%s has a snapshot and a stored result", id)
	}
	r.age(old, 31*24*time.Hour)   // past the default 30 days
	r.age(young, 29*24*time.Hour) // within them
	// A running execution is never purged, whenever it started.
	_, err = db.Exec(ctx, `UPDATE noetl.execution SET started_at = now() - interval '90 days' WHERE execution_id = $1`, running)
	require.NoError(t, err)
	youngBefore, runningBefore := r.traces(young), r.traces(running)

	x := r.fire(system, "default", "system.retention")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
	require.Equal(t, "system/retention", x.GetPath())
	res := x.GetResult().GetStructValue().AsMap()
	require.Equal(t, float64(1), res["executions"], "%v", res)
	require.Equal(t, []any{old}, res["execution_ids"], "%v", res)
	require.Equal(t, float64(1), res["snapshots"], "%v", res)
	require.Equal(t, float64(1), res["results"], "%v", res)
	require.Positive(t, res["events"], "%v", res)

	require.Equal(t, []int{0, 0, 0, 0, 0}, r.traces(old), "the purged execution left nothing: row, events, snapshot, results, chunks")
	require.Equal(t, youngBefore, r.traces(young), "a terminal execution within its retention is untouched")
	require.Equal(t, runningBefore, r.traces(running), "a running execution is untouched")
	_, err = system.exe.GetExecution(ctx, &apiv1.GetExecutionRequest{ExecutionId: old})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	events, err := system.exe.ListExecutionEvents(ctx, &apiv1.ListExecutionEventsRequest{ExecutionId: old})
	if err == nil {
		require.Empty(t, events.GetEvents())
	}
	ids := listed(t, system)
	require.NotContains(t, ids, old)
	require.Contains(t, ids, young)
	require.Contains(t, ids, running)
	require.Contains(t, ids, x.GetExecutionId(), "the retention run is an ordinary execution")
	got, err := system.exe.GetExecution(ctx, &apiv1.GetExecutionRequest{ExecutionId: young})
	require.NoError(t, err)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, got.GetExecution().GetStatus())

	t.Run("tenant override", func(t *testing.T) {
		acmeKey, _ := system.createKey(map[string]any{"tenant": "acme", "roles": []string{"admin"}, "name": "acme admin"})
		acme := newClient(t, m, acmeKey)
		acmeOpKey, _ := acme.createKey(map[string]any{"roles": []string{"operator"}, "name": "acme operator"})
		acmeOp := newClient(t, m, acmeOpKey)
		betaKey, _ := system.createKey(map[string]any{"tenant": "beta", "roles": []string{"admin"}, "name": "beta admin"})
		beta := newClient(t, m, betaKey)
		for _, c := range []*client{acme, beta} {
			_, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: keep})
			require.NoError(t, err)
		}
		// acme keeps its executions 2 days, beta 10 (NOETL_TENANT_RETENTION), the
		// platform 30.
		acmeOld, acmeMid := r.run(acme, "tests/keep", nil, true), r.run(acme, "tests/keep", nil, true)
		betaOld, betaMid := r.run(beta, "tests/keep", nil, true), r.run(beta, "tests/keep", nil, true)
		r.age(acmeOld, 40*24*time.Hour)
		r.age(acmeMid, 3*24*time.Hour)
		r.age(betaOld, 11*24*time.Hour)
		r.age(betaMid, 3*24*time.Hour)

		override := func(name, kind string) string {
			return fmt.Sprintf(`
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: %[1]s, path: acme/system/%[1]s}
workflow:
  - step: start
    tool: {kind: %[2]s, retention: 48h, sql: "SELECT 1"}
`, name, kind)
		}
		// The tenant-safe subset is enforced at registration: no other system tool, no
		// other tenant's path, and only an admin of the tenant.
		_, err := acme.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: override("stalled_report", "system_sql_read")})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), "may use system_purge")
		_, err = acme.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: retention, path: beta/system/retention}
workflow:
  - step: start
    tool: {kind: system_purge, retention: 48h}
`})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "another tenant's override: %v", err)
		_, err = acmeOp.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: override("retention", "system_purge")})
		require.Equal(t, codes.PermissionDenied, status.Code(err), "an operator: %v", err)
		_, err = acme.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: override("retention", "system_purge")})
		require.NoError(t, err)

		// The listing shows who overrides what: every tenant to the system role, its own
		// to a tenant.
		out := system.wantREST(http.StatusOK, http.MethodGet, "/v1/system/playbooks?name=retention", nil)
		require.Equal(t, "acme", out["playbooks"].([]any)[0].(map[string]any)["overrides"].([]any)[0].(map[string]any)["tenant"], "%v", out)
		listing, err := apiv1.NewSystemServiceClient(beta.conn).ListSystemPlaybooks(ctx, &apiv1.ListSystemPlaybooksRequest{})
		require.NoError(t, err)
		require.Len(t, listing.GetPlaybooks(), 3)
		for _, b := range listing.GetPlaybooks() {
			require.Empty(t, b.GetOverrides(), "beta sees no other tenant's overrides")
		}

		// The platform's retention leaves acme to its override: acme's 40-day-old
		// execution stays; beta's past its own 10 days goes, its 3-day-old one stays.
		x := r.fire(system, "default", "system.retention")
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
		res := x.GetResult().GetStructValue().AsMap()
		require.Equal(t, []any{betaOld}, res["execution_ids"], "%v", res)
		require.Equal(t, []any{"acme"}, res["excluded"], "%v", res)
		require.Equal(t, 1, r.traces(acmeOld)[0], "acme's executions are its override's to purge")
		require.Equal(t, 0, r.traces(betaOld)[0])
		require.Equal(t, 1, r.traces(betaMid)[0])

		// acme's override runs from its own schedule, as acme, on acme only.
		y := r.fire(acme, "acme", "system.retention")
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, y.GetStatus(), "error: %v", y.GetError())
		require.Equal(t, "acme/system/retention", y.GetPath())
		res = y.GetResult().GetStructValue().AsMap()
		purged, _ := res["execution_ids"].([]any)
		require.ElementsMatch(t, []any{acmeOld, acmeMid}, purged, "%v", res)
		require.Equal(t, "acme", res["tenant"])
		require.Equal(t, []int{0, 0, 0, 0, 0}, r.traces(acmeMid))
		require.Equal(t, 1, r.traces(betaMid)[0], "an override never reaches another tenant")
		require.Equal(t, 1, r.traces(young)[0])
		_, err = system.exe.GetExecution(ctx, &apiv1.GetExecutionRequest{ExecutionId: y.GetExecutionId()})
		require.Equal(t, codes.NotFound, status.Code(err), "the override ran as acme, not in the platform's tenant")
		require.True(t, slices.Contains(listed(t, acme), y.GetExecutionId()))
	})
}

// TestCleanupAndStalledReportReportWhatTheyFound runs system/cleanup and
// system/stalled_report from their schedules: cleanup removes an expired result, an
// orphaned chunk and snapshot, a dead materializer replica row and an expired lease, and
// counts each; the report lists a running execution whose log has not grown for an hour.
func TestCleanupAndStalledReportReportWhatTheyFound(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{SystemPlaybooks: true})
	ctx := context.Background()
	db, err := pgx.Connect(ctx, m.PostgresURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	r := &retentionRig{t: t, m: m, db: db}
	system := newClient(t, m, m.AdminKey)

	for _, q := range []string{
		`INSERT INTO noetl.result (tenant, result_id, execution_id, content_type, size, sha256, expires_at) VALUES ('default', 'r-expired', 'x-gone', 'application/json', 2, 'x', now() - interval '1 hour')`,
		`INSERT INTO noetl.result_chunk (tenant, result_id, idx, data) VALUES ('default', 'r-expired', 0, '\x7b7d')`,
		`INSERT INTO noetl.result_chunk (tenant, result_id, idx, data) VALUES ('default', 'r-orphan', 0, '\x7b7d')`,
		`INSERT INTO noetl.state_snapshot (execution_id, seq, body) VALUES ('x-purged', 1, '\x00')`,
		`INSERT INTO noetl.materializer_replica (consumer, replica, expires_at) VALUES ('gone-group', 'r1', now() - interval '1 hour')`,
		`INSERT INTO noetl.materializer_partition (consumer, partition, owner, expires_at) VALUES ('gone-group', 0, 'r1', now() - interval '1 hour')`,
	} {
		_, err := db.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	x := r.fire(system, "default", "system.cleanup")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
	require.Equal(t, "system/cleanup", x.GetPath())
	removed := x.GetResult().GetStructValue().AsMap()["removed"].(map[string]any)
	require.Equal(t, float64(1), removed["orphan_chunks"], "%v", removed)
	require.Equal(t, float64(1), removed["orphan_snapshots"], "%v", removed)
	require.Equal(t, float64(1), removed["dead_replicas"], "%v", removed)
	require.Equal(t, float64(1), removed["stale_leases"], "%v", removed)
	require.LessOrEqual(t, removed["expired_results"], float64(1), "%v", removed) // the resultstore's own sweeper may have been first
	require.Equal(t, 0, r.count(`SELECT count(*) FROM noetl.result WHERE result_id = 'r-expired'`))
	require.Equal(t, 0, r.count(`SELECT count(*) FROM noetl.result_chunk WHERE result_id IN ('r-expired', 'r-orphan')`))
	require.Equal(t, 0, r.count(`SELECT count(*) FROM noetl.state_snapshot WHERE execution_id = 'x-purged'`))
	require.Equal(t, 0, r.count(`SELECT count(*) FROM noetl.materializer_replica WHERE consumer = 'gone-group'`))
	require.Equal(t, 1, r.count(`SELECT count(*) FROM noetl.materializer_partition WHERE consumer = 'gone-group' AND owner = ''`), "the lease is released, its cursor kept")
	require.Positive(t, r.count(`SELECT count(*) FROM noetl.materializer_replica WHERE expires_at > now()`), "the live replica keeps its row")

	_, err = system.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: keep})
	require.NoError(t, err)
	stuck := r.run(system, "tests/keep", map[string]any{"sleep": 600}, false)
	moving := r.run(system, "tests/keep", map[string]any{"sleep": 600}, false)
	_, err = db.Exec(ctx, `UPDATE noetl.execution SET updated_at = now() - interval '1 hour' WHERE execution_id = $1`, stuck)
	require.NoError(t, err)
	y := r.fire(system, "default", "system.stalled_report")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, y.GetStatus(), "error: %v", y.GetError())
	report := y.GetResult().GetStructValue().AsMap()
	rows := report["rows"].([]any)
	var ids []any
	for _, row := range rows {
		ids = append(ids, row.(map[string]any)["execution_id"])
	}
	require.Contains(t, ids, stuck, "%v", report)
	require.NotContains(t, ids, moving, "%v", report)
	require.Equal(t, "default", rows[slices.Index(ids, any(stuck))].(map[string]any)["tenant"])
}
