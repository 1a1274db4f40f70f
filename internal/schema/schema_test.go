package schema_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/schema"
	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// setup runs the migrate step on a new database with a login role per service and returns
// the superuser's URL and each service's URL (as its login role).
func setup(t *testing.T) (admin string, urls map[string]string) {
	t.Helper()
	admin = testkit.StartPostgres(t)
	urls = map[string]string{}
	var logins []schema.Login
	for _, s := range schema.Services() {
		l := schema.Login{Service: s, User: schema.LoginRole(s), Password: "pw-" + s}
		logins = append(logins, l)
		urls[s] = asUser(t, admin, l.User, l.Password)
	}
	require.NoError(t, schema.Setup(t.Context(), admin, logins, nil))
	return admin, urls
}

// asUser is u connecting as user with password.
func asUser(t *testing.T, u, user, password string) string {
	t.Helper()
	pu, err := url.Parse(u)
	require.NoError(t, err)
	pu.User = url.UserPassword(user, password)
	return pu.String()
}

func connect(t *testing.T, u string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(t.Context(), u)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func sqlstate(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

const insertEvent = `INSERT INTO noetl.event (execution_id, seq, event_id, tenant, type, body) VALUES ($1, 1, 'e1', 't', 'playbook.started', '\x00')`

// TestOnlyTheMaterializerMayWriteTheEventLog is the sole writer by permission: every
// service connects as its own role, and Postgres itself refuses the event log's writes to
// all but the materializer's, whose writes are appends only.
func TestOnlyTheMaterializerMayWriteTheEventLog(t *testing.T) {
	t.Parallel()
	_, urls := setup(t)
	ctx := t.Context()
	for _, s := range []string{schema.Orchestrator, schema.Statebuilder, schema.Resultstore} {
		t.Run(s, func(t *testing.T) {
			c := connect(t, urls[s])
			_, err := c.Exec(ctx, insertEvent, "x-"+s)
			require.Error(t, err)
			require.Equal(t, "42501", sqlstate(err), "%v", err)
			require.ErrorContains(t, err, "permission denied")
		})
	}
	m := connect(t, urls[schema.Materializer])
	_, err := m.Exec(ctx, insertEvent, "x-materializer")
	require.NoError(t, err)
	for _, q := range []string{`UPDATE noetl.event SET type = 'x'`, `DELETE FROM noetl.event`, `TRUNCATE noetl.event`} {
		_, err := m.Exec(ctx, q)
		require.Equal(t, "42501", sqlstate(err), "%s: %v", q, err)
	}
	// The statebuilder reads what the materializer wrote; the orchestrator does not read
	// the log at all (it asks the statebuilder).
	var n int
	require.NoError(t, connect(t, urls[schema.Statebuilder]).QueryRow(ctx, `SELECT count(*) FROM noetl.event`).Scan(&n))
	require.Equal(t, 1, n)
	_, err = connect(t, urls[schema.Orchestrator]).Exec(ctx, `SELECT 1 FROM noetl.event`)
	require.Equal(t, "42501", sqlstate(err), "%v", err)
}

// TestEachServiceWritesOnlyItsOwnTables: each role writes the tables the matrix gives it
// and no other table of the schema.
func TestEachServiceWritesOnlyItsOwnTables(t *testing.T) {
	t.Parallel()
	admin, urls := setup(t)
	ctx := t.Context()
	tables := noetlTables(t, admin)
	for _, s := range schema.Services() {
		c := connect(t, urls[s])
		for _, table := range tables {
			var want []string
			for _, g := range schema.Grants() {
				if g.Service == s && g.Table == table {
					want = g.Privileges
				}
			}
			for _, p := range []string{"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"} {
				var ok bool
				require.NoError(t, c.QueryRow(ctx, `SELECT has_table_privilege($1, $2)`, "noetl."+table, p).Scan(&ok))
				require.Equal(t, slices.Contains(want, p), ok, "%s: %s on noetl.%s", s, p, table)
			}
		}
		_, err := c.Exec(ctx, `CREATE TABLE noetl.intruder (x int)`)
		require.Equal(t, "42501", sqlstate(err), "%s may create tables: %v", s, err)
	}
}

// TestGrantsCoverEveryTable: a migration that adds a table must say which services may
// use it (Grants), or no service may.
func TestGrantsCoverEveryTable(t *testing.T) {
	t.Parallel()
	admin := testkit.StartMigratedPostgres(t)
	for _, table := range noetlTables(t, admin) {
		require.True(t, slices.ContainsFunc(schema.Grants(), func(g schema.Grant) bool { return g.Table == table }),
			"noetl.%s is in no service's grants (internal/schema/roles.go)", table)
	}
}

func noetlTables(t *testing.T, admin string) []string {
	t.Helper()
	rows, err := connect(t, admin).Query(t.Context(), `SELECT tablename::text FROM pg_tables WHERE schemaname = 'noetl' ORDER BY 1`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, tables)
	return tables
}

// TestCheck: a service's start-up check refuses a database without the schema, a schema
// older than this build's, and a role that may write the log (the superuser), and accepts
// each service's own role.
func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	open := func(u string) func(string) error {
		db, err := pgxext.Open(ctx, u, 2)
		require.NoError(t, err)
		t.Cleanup(db.Close)
		return func(service string) error { return schema.Check(ctx, db, service) }
	}

	empty := open(testkit.StartPostgres(t))
	err := empty(schema.Statebuilder)
	require.ErrorContains(t, err, "holds no NoETL schema (no table noetl_goose_version): run `noetl migrate`")

	admin, urls := setup(t)
	for _, s := range schema.Services() {
		require.NoError(t, open(urls[s])(s), s)
	}
	super := open(admin)
	require.NoError(t, super(schema.Materializer), "the materializer may run as the superuser")
	require.ErrorContains(t, super(schema.Resultstore), "may write noetl.event, which only the materializer writes")
	require.ErrorContains(t, open(urls[schema.Orchestrator])(schema.Materializer), "lacks SELECT on noetl.event")

	_, err = connect(t, admin).Exec(ctx, `DELETE FROM noetl_goose_version WHERE version_id = $1`, schema.Version())
	require.NoError(t, err)
	require.ErrorContains(t, open(urls[schema.Orchestrator])(schema.Orchestrator), "needs")
	require.ErrorContains(t, open(urls[schema.Orchestrator])(schema.Orchestrator), "run `noetl migrate`")
}

// TestEnsureLoginsRefusesRolesWithMorePrivileges: a login that would hold more than its
// service's privileges is refused, naming why, and nothing is changed.
func TestEnsureLoginsRefusesRolesWithMorePrivileges(t *testing.T) {
	t.Parallel()
	admin, _ := setup(t)
	ctx := t.Context()
	db, err := pgxext.Open(ctx, admin, 2)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	var self string
	require.NoError(t, db.QueryRow(ctx, `SELECT current_user`).Scan(&self))
	for name, tc := range map[string]struct {
		logins []schema.Login
		want   string
	}{
		"the migrating role": {[]schema.Login{{Service: schema.Resultstore, User: self}}, "is the role running the migration"},
		"another service's login": {[]schema.Login{{Service: schema.Orchestrator, User: schema.LoginRole(schema.Materializer)}},
			"is a member of noetl_materializer, another service's role"},
		"one user for two services": {[]schema.Login{{Service: schema.Orchestrator, User: "shared_login"}, {Service: schema.Statebuilder, User: "shared_login"}},
			"each service needs a role of its own"},
		"a group role":    {[]schema.Login{{Service: schema.Orchestrator, User: "noetl_orchestrator"}}, "is a group role"},
		"no user":         {[]schema.Login{{Service: schema.Orchestrator}}, "names no user"},
		"unknown service": {[]schema.Login{{Service: "gateway", User: "gw"}}, "unknown service"},
	} {
		t.Run(name, func(t *testing.T) {
			require.ErrorContains(t, schema.EnsureLogins(ctx, db, tc.logins, nil), tc.want)
		})
	}
	var super bool
	require.NoError(t, db.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = $1`, self).Scan(&super))
	require.True(t, super, "the migrating role is untouched")
}

// TestMigrateStepIsIdempotentAndConcurrentAcrossDatabases: roles belong to the whole
// cluster, so the migrate steps of several databases of one cluster (parallel tests,
// several releases on one server) may run at once and again; all succeed.
func TestMigrateStepIsIdempotentAndConcurrentAcrossDatabases(t *testing.T) {
	t.Parallel()
	var dbs []string
	for range 4 {
		dbs = append(dbs, testkit.StartPostgres(t))
	}
	logins := []schema.Login{{Service: schema.Statebuilder, User: "noetl_statebuilder_concurrent", Password: "same"}}
	for round := range 2 {
		var wg sync.WaitGroup
		errs := make([]error, len(dbs))
		for i, u := range dbs {
			wg.Go(func() { errs[i] = schema.Setup(t.Context(), u, logins, nil) })
		}
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "round %d, database %d", round, i)
		}
	}
}

// TestOnlyTheMaterializerMayPurge: the log's one way out is noetl.purge_executions, which
// only the materializer may call and which deletes only terminal executions, with their
// events and timers.
func TestOnlyTheMaterializerMayPurge(t *testing.T) {
	t.Parallel()
	_, urls := setup(t)
	ctx := t.Context()
	m := connect(t, urls[schema.Materializer])
	for id, st := range map[string]int{"done": 2, "running": 1} {
		_, err := m.Exec(ctx, `INSERT INTO noetl.execution (execution_id, tenant, status, last_seq) VALUES ($1, 't', $2, 1)`, id, st)
		require.NoError(t, err)
		_, err = m.Exec(ctx, `INSERT INTO noetl.event (execution_id, seq, event_id, tenant, type, body) VALUES ($1, 1, 'e1', 't', 'playbook.started', '\x00')`, id)
		require.NoError(t, err)
		_, err = m.Exec(ctx, `INSERT INTO noetl.timer (execution_id, timer_id, tenant, due_at) VALUES ($1, 'x', 't', now())`, id)
		require.NoError(t, err)
	}
	for _, s := range []string{schema.Orchestrator, schema.Statebuilder, schema.Resultstore} {
		_, err := connect(t, urls[s]).Exec(ctx, `SELECT * FROM noetl.purge_executions(ARRAY['done'])`)
		require.Equal(t, "42501", sqlstate(err), "%s: %v", s, err)
	}
	rows, err := m.Query(ctx, `SELECT tenant, execution_id, events FROM noetl.purge_executions(ARRAY['done', 'running', 'unknown'])`)
	require.NoError(t, err)
	type gone struct {
		Tenant, ID string
		Events     int64
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (gone, error) {
		var g gone
		return g, r.Scan(&g.Tenant, &g.ID, &g.Events)
	})
	require.NoError(t, err)
	require.Equal(t, []gone{{"t", "done", 1}}, got, "only the terminal execution is purged")
	var events, timers, executions int
	require.NoError(t, m.QueryRow(ctx, `SELECT (SELECT count(*) FROM noetl.event), (SELECT count(*) FROM noetl.timer), (SELECT count(*) FROM noetl.execution)`).Scan(&events, &timers, &executions))
	require.Equal(t, []int{1, 1, 1}, []int{events, timers, executions}, "the running execution keeps its rows")
	// Deleting from the log directly stays refused, the function notwithstanding.
	_, err = m.Exec(ctx, `DELETE FROM noetl.event`)
	require.Equal(t, "42501", sqlstate(err), "%v", err)
}

// TestEventBodiesAreCompressedWithLz4: a body large enough for Postgres to compress is
// compressed with lz4 where the server has it (00019_event_body_lz4.sql), reads back
// whole, and a server without lz4 keeps its default rather than fail the migration.
func TestEventBodiesAreCompressedWithLz4(t *testing.T) {
	t.Parallel()
	admin, urls := setup(t)
	ctx := t.Context()
	a := connect(t, admin)
	var attcompression string
	require.NoError(t, a.QueryRow(ctx, `SELECT attcompression::text FROM pg_attribute
		WHERE attrelid = 'noetl.event'::regclass AND attname = 'body'`).Scan(&attcompression))
	_, lz4Err := a.Exec(ctx, `SET default_toast_compression = lz4`)
	if lz4Err != nil {
		require.Equal(t, "", attcompression, "a server without lz4 (%v) keeps the default", lz4Err)
		return
	}
	require.Equal(t, "l", attcompression)
	body := []byte(strings.Repeat("commands of one fan-out share most of their bytes; ", 2000))
	m := connect(t, urls[schema.Materializer])
	_, err := m.Exec(ctx, `INSERT INTO noetl.event (execution_id, seq, event_id, tenant, type, body) VALUES ('x', 1, 'e1', 't', 'commands.issued', $1)`, body)
	require.NoError(t, err)
	var method string
	var back []byte
	require.NoError(t, a.QueryRow(ctx, `SELECT pg_column_compression(body), body FROM noetl.event WHERE execution_id = 'x'`).Scan(&method, &back))
	require.Equal(t, "lz4", method)
	require.Equal(t, body, back)
}
