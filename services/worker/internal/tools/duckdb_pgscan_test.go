//go:build cgo

package tools

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/testkit"
)

// pgExec runs SQL on a Postgres database for a test.
func pgExec(t *testing.T, dsn, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer func() { _ = c.Close(context.Background()) }()
	_, err = c.Exec(ctx, sql)
	require.NoError(t, err, sql)
}

// pgParts is a URL DSN as a credential's keyword fields.
func pgParts(t *testing.T, dsn string) map[string]any {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	pw, _ := u.User.Password()
	return map[string]any{"host": u.Hostname(), "port": u.Port(), "user": u.User.Username(), "password": pw,
		"database": strings.TrimPrefix(u.Path, "/"), "sslmode": u.Query().Get("sslmode")}
}

// workerBackends counts the worker's backends in database db: all of them, or with
// running set, those running a query like it.
func workerBackends(t *testing.T, dsn, db, running string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer func() { _ = c.Close(context.Background()) }()
	var n int
	require.NoError(t, c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'noetl-worker'
		AND ($2 = '' OR state = 'active' AND query LIKE $2)`, db, running).Scan(&n))
	return n
}

// Without DuckDB's postgres extension, auth attaches the credential through the worker's
// own scanner: <alias>.<schema>.<table> reads Postgres tables and views with their
// types, joins with DuckDB tables, postgres_query runs a query in Postgres, several
// aliases attach at once, and the command leaves no connection open.
func TestDuckDBAttachPostgres(t *testing.T) {
	if postgresExtensionLoadable(t) {
		t.Skip("DuckDB's postgres extension is installed here: auth attaches through it")
	}
	dsn := testkit.StartPostgres(t)
	pgExec(t, dsn, `
		CREATE TABLE t (id int PRIMARY KEY, small int2, big int8, r float4, d float8, n numeric(12, 2),
		  wide numeric(30, 4), nu numeric, ok bool, name text, code varchar(5), ch char(3), day date,
		  at timestamp, atz timestamptz, tm time, u uuid, doc jsonb, j json, raw bytea, tags text[], nums int4[],
		  iv interval, addr inet);
		INSERT INTO t VALUES
		  (1, 2, 9000000000, 1.5, 2.25, 1234.50, 12345678901234567890.1234, 3.14159, true, 'one', 'ab', 'x',
		   '2024-01-02', '2024-01-02 03:04:05.5', '2024-01-02 03:04:05+02', '13:14:15.25',
		   'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"k": [1, "two"]}', '[1,2]', '\x0102', '{x,NULL}', '{1,2,3}',
		   '1 day 2 hours', '10.0.0.1'),
		  (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
		   NULL, NULL, NULL, NULL, NULL, NULL),
		  (3, -1, 7, NULL, NULL, -0.05, NULL, NULL, false, 'three', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
		   NULL, NULL, '{}', '{}', NULL, NULL);
		CREATE VIEW good AS SELECT id, name FROM t WHERE ok;
		CREATE TABLE empty (id int, note text);
		CREATE TABLE inf (id int, d date);
		INSERT INTO inf VALUES (1, 'infinity');
		CREATE TABLE big AS SELECT g AS id FROM generate_series(1, 50000) g;
		CREATE SCHEMA sales;
		CREATE TABLE sales."Orders" (id int, region text, amount numeric(10, 2));
		INSERT INTO sales."Orders" VALUES (1, 'east', 10.5), (2, 'west', 4), (3, 'east', 1.25);`)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	db := strings.TrimPrefix(u.Path, "/")
	// A second database, for a second alias.
	db2 := db + "_two"
	pgExec(t, dsn, "CREATE DATABASE "+pgx.Identifier{db2}.Sanitize())
	t.Cleanup(func() { pgExec(t, dsn, "DROP DATABASE IF EXISTS "+pgx.Identifier{db2}.Sanitize()+" WITH (FORCE)") })
	u2 := *u
	u2.Path = "/" + db2
	dsn2 := u2.String()
	pgExec(t, dsn2, "CREATE TABLE managers (region text, manager text); INSERT INTO managers VALUES ('east', 'Ada'), ('west', 'Grace')")

	resolve := func(_ context.Context, name string) (string, map[string]any, error) {
		switch name {
		case "pg_local":
			return "postgres", map[string]any{"connection_string": dsn}, nil
		case "pg_parts":
			return "postgres", pgParts(t, dsn2), nil
		}
		return "", nil, errors.New(`credential "` + name + `" not found`)
	}
	d := &DuckDB{Resolve: resolve}
	run := func(t *testing.T, cfg map[string]any) map[string]any {
		t.Helper()
		if cfg["auth"] == nil {
			cfg["auth"] = "pg_local"
			cfg["attach_as"] = "pg"
		}
		return mustDuck(t, d, asWritten(cfg))
	}
	rows := func(res map[string]any) []any { return res["rows"].([]any) }

	t.Run("types", func(t *testing.T) {
		res := run(t, map[string]any{"command": "SELECT * FROM pg.public.t ORDER BY id"})
		require.Equal(t, int64(3), res["row_count"])
		r := rows(res)[0].(map[string]any)
		want := map[string]any{
			"id": int64(1), "small": int64(2), "big": int64(9000000000), "r": 1.5, "d": 2.25, "n": 1234.5,
			"wide": "12345678901234567890.1234", "nu": 3.14159, "ok": true, "name": "one", "code": "ab", "ch": "x  ",
			"day": "2024-01-02", "at": "2024-01-02T03:04:05.5Z", "atz": "2024-01-02T01:04:05Z", "tm": "13:14:15.25",
			"u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "raw": "AQI=",
			"tags": []any{"x", nil}, "nums": []any{int64(1), int64(2), int64(3)},
			"iv": "1 day 02:00:00", "addr": "10.0.0.1",
			"doc": map[string]any{"k": []any{float64(1), "two"}}, "j": []any{float64(1), float64(2)},
		}
		for k, v := range want {
			require.Equal(t, v, r[k], "column %s", k)
		}
		for k, v := range rows(res)[1].(map[string]any) {
			if k != "id" {
				require.Nil(t, v, "column %s of the NULL row", k)
			}
		}
		r3 := rows(res)[2].(map[string]any)
		require.Equal(t, -0.05, r3["n"])
		require.Equal(t, []any{}, r3["tags"])

		res = run(t, map[string]any{"command": "SELECT column_name, data_type FROM information_schema.columns WHERE table_catalog = 'pg' AND table_name = 't' AND column_name IN ('n', 'wide', 'nu', 'doc', 'tags', 'atz', 'iv') ORDER BY 1"})
		require.Equal(t, []any{
			map[string]any{"column_name": "atz", "data_type": "TIMESTAMP WITH TIME ZONE"},
			map[string]any{"column_name": "doc", "data_type": "JSON"},
			map[string]any{"column_name": "iv", "data_type": "VARCHAR"},
			map[string]any{"column_name": "n", "data_type": "DECIMAL(12,2)"},
			map[string]any{"column_name": "nu", "data_type": "DOUBLE"},
			map[string]any{"column_name": "tags", "data_type": "VARCHAR[]"},
			map[string]any{"column_name": "wide", "data_type": "DECIMAL(30,4)"},
		}, rows(res))
	})

	t.Run("join filter and aggregate", func(t *testing.T) {
		res := run(t, map[string]any{"command": `
			CREATE TABLE local (id int, label text);
			INSERT INTO local VALUES (1, 'first'), (3, 'third'), (4, 'fourth');
			SELECT l.label, t.name, t.big FROM local l JOIN pg.public.t t ON t.id = l.id WHERE t.big > 5 ORDER BY l.id`})
		require.Equal(t, []any{
			map[string]any{"label": "first", "name": "one", "big": int64(9000000000)},
			map[string]any{"label": "third", "name": "three", "big": int64(7)},
		}, rows(res))
		res = run(t, map[string]any{"command": `SELECT region, sum(amount) AS total, count(*) AS n FROM pg.sales."Orders" GROUP BY region ORDER BY region`})
		require.Equal(t, []any{
			map[string]any{"region": "east", "total": 11.75, "n": int64(2)},
			map[string]any{"region": "west", "total": 4.0, "n": int64(1)},
		}, rows(res))
		res = run(t, map[string]any{"command": "SELECT count(*) AS n FROM pg.public.big"})
		require.Equal(t, []any{map[string]any{"n": int64(50000)}}, rows(res), "a scan of no column counts rows")
	})

	t.Run("view, empty table and the catalog", func(t *testing.T) {
		res := run(t, map[string]any{"command": "SELECT * FROM pg.public.good"})
		require.Equal(t, []any{map[string]any{"id": int64(1), "name": "one"}}, rows(res))
		res = run(t, map[string]any{"command": "SELECT * FROM pg.public.empty"})
		require.Equal(t, []any{}, rows(res))
		require.Equal(t, []any{"id", "note"}, res["columns"])
		res = run(t, map[string]any{"command": "SELECT schema_name || '.' || view_name AS rel FROM duckdb_views() WHERE database_name = 'pg' ORDER BY 1"})
		require.Equal(t, []any{
			map[string]any{"rel": "public.big"}, map[string]any{"rel": "public.empty"}, map[string]any{"rel": "public.good"},
			map[string]any{"rel": "public.inf"}, map[string]any{"rel": "public.t"}, map[string]any{"rel": "sales.Orders"},
		}, rows(res), "every table and view, none of pg_catalog or information_schema")
	})

	t.Run("postgres_query and postgres_scan", func(t *testing.T) {
		res := run(t, map[string]any{"command": "SELECT * FROM postgres_query('pg', 'SELECT a.id, b.id, a.name FROM t a JOIN t b ON b.id = a.id WHERE a.id < 3 ORDER BY a.id')"})
		require.Equal(t, []any{"id", "id_1", "name"}, res["columns"])
		require.Equal(t, []any{
			map[string]any{"id": int64(1), "id_1": int64(1), "name": "one"},
			map[string]any{"id": int64(2), "id_1": int64(2), "name": nil},
		}, rows(res))
		_, err := runDuck(t, d, map[string]any{"auth": "pg_local", "attach_as": "pg", "command": "SELECT * FROM postgres_query('pg', 'SELECT ''{{1,2},{3,4}}''::int4[] AS grid')"})
		require.ErrorContains(t, err, `postgres_query(pg): column "grid": a 2-dimensional array does not fit a list column`)
		res = run(t, map[string]any{"command": "SELECT * FROM postgres_query('pg', 'SELECT array_to_json(''{{1,2},{3,4}}''::int4[]) AS grid')"})
		require.Equal(t, []any{map[string]any{"grid": []any{[]any{float64(1), float64(2)}, []any{float64(3), float64(4)}}}}, rows(res))
		res = run(t, map[string]any{"command": "SELECT id FROM postgres_scan('pg', 'public', 't') WHERE ok ORDER BY id"})
		require.Equal(t, []any{map[string]any{"id": int64(1)}}, rows(res))
		// A table created after the attach is described when the script names it.
		pgExec(t, dsn, "CREATE TABLE later (x int); INSERT INTO later VALUES (5)")
		t.Cleanup(func() { pgExec(t, dsn, "DROP TABLE later") })
		res = run(t, map[string]any{"command": "SELECT x FROM pg.public.later"})
		require.Equal(t, []any{map[string]any{"x": int64(5)}}, rows(res))
	})

	t.Run("aliases", func(t *testing.T) {
		res := run(t, map[string]any{"auth": map[string]any{
			"src":  map[string]any{"source": "credential", "key": "pg_local"},
			"hr":   map[string]any{"source": "credential", "key": "pg_parts"},
			"copy": map[string]any{"source": "credential", "key": "pg_local"},
		}, "command": `SELECT o.region, m.manager, sum(o.amount) AS total, (SELECT count(*) FROM copy.public.t) AS t_rows
			FROM src.sales."Orders" o JOIN hr.public.managers m USING (region) GROUP BY ALL ORDER BY region`})
		require.Equal(t, []any{
			map[string]any{"region": "east", "manager": "Ada", "total": 11.75, "t_rows": int64(3)},
			map[string]any{"region": "west", "manager": "Grace", "total": 4.0, "t_rows": int64(3)},
		}, rows(res))
	})

	t.Run("projection pushdown", func(t *testing.T) {
		// Only the columns a query uses are read: the infinite date is never decoded
		// unless the query asks for it.
		res := run(t, map[string]any{"command": "SELECT id FROM pg.public.inf"})
		require.Equal(t, []any{map[string]any{"id": int64(1)}}, rows(res))
		_, err := runDuck(t, d, map[string]any{"auth": "pg_local", "attach_as": "pg", "command": "SELECT d FROM pg.public.inf"})
		require.ErrorContains(t, err, `postgres_scan(pg.public.inf): column "d": infinity does not fit the DuckDB column`)
	})

	t.Run("limit and no connection left", func(t *testing.T) {
		res := run(t, map[string]any{"command": `
			SELECT id FROM pg.public.big LIMIT 3;
			SELECT id FROM pg.public.big ORDER BY id LIMIT 2`})
		require.Equal(t, []any{map[string]any{"id": int64(1)}, map[string]any{"id": int64(2)}}, rows(res))
		testkit.WaitFor(t, 10*time.Second, func() error {
			if n := workerBackends(t, dsn, db, ""); n != 0 {
				return fmt.Errorf("%d worker connections left", n)
			}
			return nil
		})
	})

	t.Run("reads only", func(t *testing.T) {
		_, err := runDuck(t, d, map[string]any{"auth": "pg_local", "attach_as": "pg", "command": "SELECT * FROM postgres_query('pg', 'DELETE FROM t WHERE id = 3 RETURNING id')"})
		require.ErrorContains(t, err, "read-only transaction")
		_, err = runDuck(t, d, map[string]any{"auth": "pg_local", "attach_as": "pg", "command": "SELECT * FROM postgres_query('pg', 'SET x.y = 1')"})
		require.ErrorContains(t, err, "postgres_query(pg): the statement returns no columns")
		_, err = runDuck(t, d, map[string]any{"auth": "pg_local", "attach_as": "pg", "command": "INSERT INTO pg.public.empty VALUES (1, 'x')"})
		require.Error(t, err)
		res := run(t, map[string]any{"command": "SELECT count(*) AS n FROM pg.public.t"})
		require.Equal(t, []any{map[string]any{"n": int64(3)}}, rows(res))
	})

	t.Run("bad names", func(t *testing.T) {
		_, err := runDuck(t, d, map[string]any{"auth": "pg_local", "attach_as": "pg", "command": "SELECT * FROM postgres_scan('other', 'public', 't')"})
		require.ErrorContains(t, err, `postgres_scan: no attached Postgres database named "other"`)
		_, err = runDuck(t, d, map[string]any{"auth": "pg_local", "attach_as": "pg", "command": "SELECT * FROM postgres_scan('pg', 'public', 'missing')"})
		require.ErrorContains(t, err, `postgres_scan(pg.public.missing): relation "public.missing" does not exist`)
		_, err = runDuck(t, &DuckDB{}, map[string]any{"command": "SELECT * FROM postgres_query('pg', 'SELECT 1')"})
		require.ErrorContains(t, err, `Install it first using "INSTALL postgres_scanner"`, "no auth: no built-in function, only DuckDB's own hint")
	})

	t.Run("a database file two commands share", func(t *testing.T) {
		// Two commands on one database file share a DuckDB instance (duckdb-go's
		// instance cache): the second, which attaches nothing, sees the first's
		// functions and views but can never read through its credential.
		file := t.TempDir() + "/shared.duckdb"
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		first := make(chan error, 1)
		go func() {
			_, err := d.Run(ctx, &Call{Kind: "duckdb", CommandID: "a", Step: "s", Config: map[string]any{
				"auth": "pg_local", "attach_as": "pg", "database": file, "statement_timeout_ms": 0,
				"command": "SELECT * FROM postgres_query('pg', 'SELECT pg_sleep(60), 1 AS x')"}})
			first <- err
		}()
		// Its query runs once it attached (views made): a backend alone may still be the
		// attach's catalog read.
		testkit.WaitFor(t, 30*time.Second, func() error {
			if n := workerBackends(t, dsn, db, "%pg_sleep(60)%"); n == 0 {
				return errors.New("the first command's query is not running yet")
			}
			return nil
		})
		for _, sql := range []string{
			"SELECT * FROM postgres_query('pg', 'SELECT current_user')",
			"SELECT count(*) FROM pg.public.t",
		} {
			_, err := runDuck(t, &DuckDB{}, map[string]any{"database": file, "command": sql})
			require.ErrorContains(t, err, "no Postgres database is attached in this command", sql)
		}
		cancel(ErrExecutionCancelled)
		require.Error(t, <-first)
	})

	t.Run("timeout and cancel", func(t *testing.T) {
		slow := "SELECT * FROM postgres_query('pg', 'SELECT pg_sleep(60), 1 AS x')"
		_, err := runDuck(t, d, map[string]any{"auth": "pg_local", "attach_as": "pg", "command": slow, "statement_timeout_ms": 300})
		var te *Error
		require.ErrorAs(t, err, &te)
		require.Contains(t, te.Msg, "statement timeout (tool.statement_timeout_ms)")
		require.False(t, te.Retryable)

		ctx, cancel := context.WithTimeoutCause(context.Background(), 300*time.Millisecond, ErrExecutionCancelled)
		defer cancel()
		_, err = runDuckCtx(ctx, t, d, map[string]any{"auth": "pg_local", "attach_as": "pg", "command": slow, "statement_timeout_ms": 0})
		require.ErrorAs(t, err, &te)
		require.True(t, te.Retryable, "%v", te)
		// The sleeping statement was cancelled in Postgres, and its connection closed.
		testkit.WaitFor(t, 10*time.Second, func() error {
			if n := workerBackends(t, dsn, db, ""); n != 0 {
				return fmt.Errorf("%d worker connections left", n)
			}
			return nil
		})
	})
}

// A credential whose password the server refuses fails the step naming the alias and
// the server's refusal, with no password in the message (even where the server echoes it).
func TestDuckDBAttachWrongPassword(t *testing.T) {
	if postgresExtensionLoadable(t) {
		t.Skip("DuckDB's postgres extension is installed here")
	}
	t.Parallel()
	const password = "wr0ng-pass-word"
	addr := fakePostgres(t)
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	resolve := func(context.Context, string) (string, map[string]any, error) {
		return "postgres", map[string]any{"host": host, "port": port, "user": "u", "password": password, "database": "d", "sslmode": "disable"}, nil
	}
	_, err = runDuck(t, &DuckDB{Resolve: resolve}, map[string]any{"auth": "pg_local", "command": "SELECT 1"})
	var te *Error
	require.ErrorAs(t, err, &te)
	require.Contains(t, te.Msg, `duckdb: auth "pg_local": attach as "pg_local": connect:`)
	require.Contains(t, te.Msg, "password authentication failed")
	require.NotContains(t, te.Msg, password)
}

// fakePostgres is a server that asks for a cleartext password and refuses it, echoing it
// in its error message.
func fakePostgres(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				be := pgproto3.NewBackend(c, c)
				msg, err := be.ReceiveStartupMessage()
				if err != nil {
					return
				}
				if _, ok := msg.(*pgproto3.SSLRequest); ok {
					if _, err := c.Write([]byte("N")); err != nil {
						return
					}
					if _, err := be.ReceiveStartupMessage(); err != nil {
						return
					}
				}
				be.Send(&pgproto3.AuthenticationCleartextPassword{})
				if be.Flush() != nil {
					return
				}
				be.SetAuthType(pgproto3.AuthTypeCleartextPassword)
				m, err := be.Receive()
				if err != nil {
					return
				}
				pw, _ := m.(*pgproto3.PasswordMessage)
				got := ""
				if pw != nil {
					got = pw.Password
				}
				be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "28P01",
					Message: fmt.Sprintf("password authentication failed for user \"u\" (password %s)", got)})
				_ = be.Flush()
			}()
		}
	}()
	return ln.Addr().String()
}
