//go:build cgo

package tools

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/tabular"
)

func runDuck(t *testing.T, d *DuckDB, cfg map[string]any) (map[string]any, error) {
	t.Helper()
	return runDuckCtx(context.Background(), t, d, cfg)
}

func runDuckCtx(ctx context.Context, t *testing.T, d *DuckDB, cfg map[string]any) (map[string]any, error) {
	t.Helper()
	out, err := d.Run(ctx, &Call{Kind: "duckdb", Config: cfg, CommandID: "c", Step: "s"})
	if err != nil {
		return nil, err
	}
	m, ok := out.(map[string]any)
	require.True(t, ok, "result is %T", out)
	_, err = json.Marshal(m)
	require.NoError(t, err, "the result is JSON-encodable")
	return m, nil
}

func mustDuck(t *testing.T, d *DuckDB, cfg map[string]any) map[string]any {
	t.Helper()
	m, err := runDuck(t, d, cfg)
	require.NoError(t, err)
	return m
}

// A script's statements run in order on one connection and the result is the last
// statement's rows, in the postgres tool's table shape.
func TestDuckDBScript(t *testing.T) {
	t.Parallel()
	res := mustDuck(t, &DuckDB{}, asWritten(map[string]any{"command": `
		-- a comment; with a semicolon
		CREATE TABLE sales (region text, amount decimal(10,2), day date);
		INSERT INTO sales VALUES ('east', 10.50, DATE '2024-01-02'), ('west', 4, DATE '2024-01-03'),
		  ('east', 1.25, NULL), ('so;uth', 3, NULL);
		/* a block comment; too */
		SELECT region, sum(amount) AS total, count(*) AS n, max(day) AS last
		FROM sales GROUP BY region ORDER BY region;`}))
	require.Equal(t, 3, res["statements"])
	require.Equal(t, "SELECT", res["command"])
	require.Equal(t, int64(3), res["row_count"])
	require.Equal(t, []any{"region", "total", "n", "last"}, res["columns"])
	require.Equal(t, []any{
		map[string]any{"region": "east", "total": 11.75, "n": int64(2), "last": "2024-01-02"},
		map[string]any{"region": "so;uth", "total": 3.0, "n": int64(1), "last": nil},
		map[string]any{"region": "west", "total": 4.0, "n": int64(1), "last": "2024-01-03"},
	}, res["rows"])
	tab, ok := tabular.Detect(res)
	require.True(t, ok, "the result is a table the resultstore keeps as Arrow")
	require.Equal(t, tabular.ShapeObjects, tab.Shape)
}

// as_objects: false gives rows as lists in column order; params bind to the last
// statement, whole JSON numbers as integers.
func TestDuckDBParamsAndLists(t *testing.T) {
	t.Parallel()
	res := mustDuck(t, &DuckDB{}, map[string]any{
		"query":           "CREATE TABLE t AS SELECT range AS i FROM range(10); SELECT i, i * ? AS scaled, ? AS label FROM t WHERE i >= $1 ORDER BY i",
		"params":          []any{float64(7), "x"},
		"as_objects":      false,
		"multi_statement": true,
	})
	require.Equal(t, []any{"i", "scaled", "label"}, res["columns"])
	require.Equal(t, []any{
		[]any{int64(7), int64(49), "x"}, []any{int64(8), int64(56), "x"}, []any{int64(9), int64(63), "x"},
	}, res["rows"])
	tab, ok := tabular.Detect(res)
	require.True(t, ok)
	require.Equal(t, tabular.ShapeLists, tab.Shape)
}

// DuckDB's types come back JSON-friendly.
func TestDuckDBValues(t *testing.T) {
	t.Parallel()
	res := mustDuck(t, &DuckDB{}, map[string]any{"command": `SELECT
		1::hugeint AS h, 170141183460469231731687303715884105727::hugeint AS hmax,
		18446744073709551615::ubigint AS ub, 3::utinyint AS ut,
		1.5::decimal(10,2) AS d, 12345678901234567890.123::decimal(38,3) AS dbig,
		'nan'::double AS nan, 2.5::float AS f,
		'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid AS u, '\x01\x02'::blob AS b,
		INTERVAL 1 DAY + INTERVAL 2 MONTH AS iv, [1, 2] AS l, {'a': 1, 'b': 'x'} AS s,
		MAP {'k': 1} AS m, '{"a": [1, "two"]}'::json AS j,
		DATE '2024-01-02' AS dt, TIME '01:02:03.5' AS tm,
		TIMESTAMP '2024-01-02 03:04:05' AS ts, TIMESTAMPTZ '2024-01-02 03:04:05+02' AS tz,
		NULL AS z, true AS ok, 'text' AS txt`})
	row := res["rows"].([]any)[0].(map[string]any)
	want := map[string]any{
		"h": int64(1), "hmax": "170141183460469231731687303715884105727",
		"ub": "18446744073709551615", "ut": int64(3),
		"d": 1.5, "dbig": "12345678901234567890.123", "nan": "NaN", "f": 2.5,
		"u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "b": "AQI=",
		"iv": map[string]any{"months": int64(2), "days": int64(1), "micros": int64(0)},
		"l":  []any{int64(1), int64(2)}, "s": map[string]any{"a": int64(1), "b": "x"},
		"m": map[string]any{"k": int64(1)}, "dt": "2024-01-02", "tm": "01:02:03.5",
		"ts": "2024-01-02T03:04:05Z", "tz": "2024-01-02T01:04:05Z", "z": nil, "ok": true, "txt": "text",
	}
	for k, v := range want {
		require.Equal(t, v, row[k], "column %s", k)
	}
	j, err := json.Marshal(row["j"])
	require.NoError(t, err)
	require.JSONEq(t, `{"a":[1,"two"]}`, string(j))
}

// A result over max_rows fails the step naming the cap.
func TestDuckDBRowCap(t *testing.T) {
	t.Parallel()
	d := &DuckDB{}
	res := mustDuck(t, d, map[string]any{"command": "SELECT * FROM range(5)", "max_rows": 5})
	require.Equal(t, int64(5), res["row_count"])
	_, err := runDuck(t, d, map[string]any{"command": "SELECT * FROM range(6)", "max_rows": float64(5)})
	var te *Error
	require.ErrorAs(t, err, &te)
	require.Contains(t, te.Msg, "more than 5 rows (the max_rows cap)")
	require.Contains(t, te.Msg, "statement 1 of 1")
	require.False(t, te.Retryable)
}

// A statement past statement_timeout_ms is interrupted and fails, not retryable; a
// cancelled context interrupts the statement too, and that failure is retryable (the
// worker stopping: the command runs again elsewhere).
func TestDuckDBTimeoutAndCancel(t *testing.T) {
	t.Parallel()
	// About 10^12 row pairs: far longer than any test runs unless interrupted.
	const long = "SELECT count(*) FROM range(1000000) a, range(1000000) b WHERE a.range + b.range < 0"
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		_, err := runDuck(t, &DuckDB{}, asWritten(map[string]any{"command": "SELECT 1; " + long, "statement_timeout_ms": 200}))
		var te *Error
		require.ErrorAs(t, err, &te)
		require.Contains(t, te.Msg, "statement 2 of 2 (SELECT count(*) FROM range(1000000) a")
		require.Contains(t, te.Msg, "statement timeout (tool.statement_timeout_ms)")
		require.False(t, te.Retryable)
	})
	t.Run("timeout before the last statement", func(t *testing.T) {
		t.Parallel()
		_, err := runDuck(t, &DuckDB{}, asWritten(map[string]any{"command": "CREATE TABLE n AS " + long + "; SELECT 1", "statement_timeout_ms": 200}))
		var te *Error
		require.ErrorAs(t, err, &te)
		require.Contains(t, te.Msg, "statement 1 of 2 (CREATE TABLE n AS SELECT count(*)")
		require.Contains(t, te.Msg, "statement timeout (tool.statement_timeout_ms)")
	})
	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		// The command's context ends while the statement runs (it has no timeout of its
		// own): the statement is interrupted, and the failure is retryable.
		ctx, cancel := context.WithTimeoutCause(context.Background(), 300*time.Millisecond, ErrExecutionCancelled)
		defer cancel()
		_, err := runDuckCtx(ctx, t, &DuckDB{}, map[string]any{"command": long, "statement_timeout_ms": 0})
		var te *Error
		require.ErrorAs(t, err, &te)
		require.True(t, te.Retryable, "%v", te)
	})
}

// A failing statement is named by its position and text; nothing after it runs.
func TestDuckDBBadSQL(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "kept.duckdb")
	_, err := runDuck(t, &DuckDB{}, asWritten(map[string]any{"db_path": dbPath, "command": `CREATE TABLE a (x int);
		-- the table is not there
		SELECT * FROM missing_table;
		CREATE TABLE b (x int)`}))
	var te *Error
	require.ErrorAs(t, err, &te)
	require.Contains(t, te.Msg, "duckdb: statement 2 of 3 (SELECT * FROM missing_table)")
	require.Contains(t, te.Msg, "missing_table does not exist")
	require.NotContains(t, te.Msg, "\n")
	// The file database keeps what ran before the failure, and only that.
	res := mustDuck(t, &DuckDB{}, map[string]any{"database": dbPath, "command": "SELECT table_name FROM information_schema.tables ORDER BY 1"})
	require.Equal(t, []any{map[string]any{"table_name": "a"}}, res["rows"])

	_, err = runDuck(t, &DuckDB{}, map[string]any{"command": "SELEC 1"})
	require.ErrorAs(t, err, &te)
	require.Contains(t, te.Msg, "statement 1 of 1 (SELEC 1): Parser Error")
}

// SQL text that is not the playbook's literal text (it held a template) runs as exactly
// one statement: DuckDB's parser counts, and a second statement spliced in by a value
// fails the step with nothing run.
func TestDuckDBTemplatedSQLIsOneStatement(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "victim.duckdb")
	mustDuck(t, &DuckDB{}, map[string]any{"database": dbPath, "command": "CREATE TABLE victim AS SELECT 1 AS x"})
	for _, sql := range []string{
		"SELECT 'a'; DROP TABLE victim",
		"SELECT 'a'; DROP TABLE victim; -- x",
		"SELECT $$a$$; DROP TABLE victim",
	} {
		_, err := runDuck(t, &DuckDB{}, map[string]any{"database": dbPath, "command": sql})
		require.ErrorContains(t, err, "duckdb: the SQL text holds several statements", sql)
	}
	res := mustDuck(t, &DuckDB{}, map[string]any{"database": dbPath, "command": "SELECT x FROM victim; -- a trailing comment"})
	require.Equal(t, []any{map[string]any{"x": int64(1)}}, res["rows"], "nothing ran; one statement with a trailing ; and comment runs")
	_, err := runDuck(t, &DuckDB{}, map[string]any{"command": "SELECT 1", "multi_statement": "yes"})
	require.ErrorContains(t, err, "tool.multi_statement must be true or false")
}

// An absolute database path is kept after the command; a relative one lives in the
// command's scratch directory, gone afterwards; :memory: (and no database) is in memory.
func TestDuckDBDatabases(t *testing.T) {
	t.Parallel()
	d := &DuckDB{}
	abs := filepath.Join(t.TempDir(), "analytics.duckdb")
	mustDuck(t, d, map[string]any{"database": abs, "command": "CREATE TABLE kept AS SELECT 42 AS answer"})
	res := mustDuck(t, d, map[string]any{"db_path": abs, "command": "SELECT answer FROM kept"})
	require.Equal(t, []any{map[string]any{"answer": int64(42)}}, res["rows"])

	res = mustDuck(t, d, asWritten(map[string]any{"database": "scratch.duckdb", "command": "CREATE TABLE s AS SELECT 1 AS x; SELECT current_setting('temp_directory') AS dir, x FROM s"}))
	dir := res["rows"].([]any)[0].(map[string]any)["dir"].(string)
	require.Contains(t, dir, "noetl-duckdb-")
	_, err := os.Stat(dir)
	require.True(t, errors.Is(err, os.ErrNotExist), "the scratch directory %s is removed: %v", dir, err)
	_, err = runDuck(t, d, map[string]any{"database": "scratch.duckdb", "command": "SELECT x FROM s"})
	require.ErrorContains(t, err, "s does not exist", "a relative database does not outlive its command")

	for _, db := range []any{nil, "", ":memory:"} {
		res = mustDuck(t, d, map[string]any{"database": db, "command": "SELECT current_database() AS db"})
		require.Equal(t, "memory", res["rows"].([]any)[0].(map[string]any)["db"], "database %v", db)
	}
}

// memory_limit and threads set DuckDB's settings for the command; a bad one is named.
func TestDuckDBSettings(t *testing.T) {
	t.Parallel()
	res := mustDuck(t, &DuckDB{}, map[string]any{"command": "SELECT current_setting('threads') AS threads, current_setting('memory_limit') AS mem",
		"threads": float64(1), "memory_limit": "256MB"})
	row := res["rows"].([]any)[0].(map[string]any)
	require.Equal(t, int64(1), row["threads"])
	require.Contains(t, row["mem"], "MiB", "%v", row)
	_, err := runDuck(t, &DuckDB{}, map[string]any{"command": "SELECT 1", "memory_limit": "lots"})
	require.ErrorContains(t, err, "duckdb: memory_limit: ")
	_, err = runDuck(t, &DuckDB{}, map[string]any{"command": "SELECT 1", "threads": 1.5})
	require.ErrorContains(t, err, "tool.threads must be a positive integer")
}

// Bad config is named before anything runs.
func TestDuckDBConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  map[string]any
		want string
	}{
		{map[string]any{}, "tool.command (or tool.query) is required"},
		{map[string]any{"command": " ; -- nothing\n;"}, "holds no SQL statement"},
		{map[string]any{"command": "SELECT 1", "params": map[string]any{"a": 1}}, "tool.params must be a positional list"},
		{map[string]any{"command": "SELECT 1", "max_rows": 0}, "tool.max_rows must be a positive integer"},
		{map[string]any{"command": "SELECT 1", "statement_timeout_ms": "soon"}, "tool.statement_timeout_ms must be a non-negative number"},
		{map[string]any{"command": "SELECT 1", "as_objects": "maybe"}, "tool.as_objects"},
		{map[string]any{"command": "SELECT 1", "database": "../escape.duckdb"}, "leaves the command's scratch directory"},
		{map[string]any{"command": "SELECT 1", "attach_as": "pg"}, "tool.attach_as is set but tool.auth names no credential"},
		{map[string]any{"command": "SELECT 1", "auth": "pg"}, `auth "pg" is set but this worker has no credential resolver`},
	} {
		_, err := runDuck(t, &DuckDB{}, tc.cfg)
		require.ErrorContains(t, err, tc.want, "config %v", tc.cfg)
	}
}

// auth attaches a postgres credential: the credential is resolved at run time, a
// credential of another type is refused, and a server that refuses the connection
// fails the step naming the alias, with no credential value in the message (through
// DuckDB's postgres extension where it loads, else the worker's own scanner).
func TestDuckDBAttach(t *testing.T) {
	t.Parallel()
	const password = "s3cret-pass-word"
	var asked []string
	resolve := func(_ context.Context, name string) (string, map[string]any, error) {
		asked = append(asked, name)
		switch name {
		case "pg_local":
			return "postgres", map[string]any{"host": "127.0.0.1", "port": 1, "user": "u", "password": password, "database": "d"}, nil
		case "api":
			return "bearer", map[string]any{"token": password}, nil
		case "empty":
			return "postgres", map[string]any{}, nil
		}
		return "", nil, errors.New(`credential "` + name + `" not found`)
	}
	d := &DuckDB{Resolve: resolve}
	_, err := runDuck(t, d, map[string]any{"command": "SELECT 1", "auth": "api"})
	require.ErrorContains(t, err, `duckdb: auth "api" is a "bearer" credential; only postgres credentials can be attached`)
	_, err = runDuck(t, d, map[string]any{"command": "SELECT 1", "auth": "nope"})
	require.ErrorContains(t, err, `credential "nope" not found`)
	_, err = runDuck(t, d, map[string]any{"command": "SELECT 1", "auth": "empty"})
	require.ErrorContains(t, err, `duckdb: auth "empty" holds no connection`)

	_, err = runDuck(t, d, map[string]any{"command": "SELECT count(*) FROM pg.public.t",
		"auth": map[string]any{"pg": map[string]any{"source": "credential", "key": "pg_local"}}})
	require.Error(t, err)
	require.NotContains(t, err.Error(), password)
	require.ErrorContains(t, err, `duckdb: auth "pg_local": attach as "pg"`, "port 1 refuses the connection")
	require.Equal(t, []string{"api", "nope", "empty", "pg_local"}, asked)
}

// postgresExtensionLoadable reports whether DuckDB's postgres extension can be loaded here.
func postgresExtensionLoadable(t *testing.T) bool {
	_, err := runDuck(t, &DuckDB{}, map[string]any{"command": "LOAD postgres_scanner"})
	return err == nil
}

func TestDuckAttachSQL(t *testing.T) {
	t.Parallel()
	require.Equal(t, `ATTACH 'host=''h'' password=''it''''s''' AS "my ""pg""" (TYPE postgres)`,
		duckAttachSQL(`host='h' password='it''s'`, `my "pg"`))
	got, err := duckAttachments(map[string]any{"auth": "pg_local", "attach_as": "src"})
	require.NoError(t, err)
	require.Equal(t, []duckAttach{{alias: "src", auth: "pg_local"}}, got)
	got, err = duckAttachments(map[string]any{"auth": map[string]any{
		"b": map[string]any{"source": "credential", "key": "two"}, "a": map[string]any{"key": "one"}}})
	require.NoError(t, err)
	require.Equal(t, []duckAttach{{alias: "a", auth: "one"}, {alias: "b", auth: "two"}}, got)
}

func TestSplitStatements(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sql  string
		want []string
	}{
		{"SELECT 1", []string{"SELECT 1"}},
		{" SELECT 1 ; ;SELECT 2;\n", []string{"SELECT 1", "SELECT 2"}},
		{"SELECT 'a;b', \"c;d\" FROM t; SELECT 'it''s; fine'", []string{`SELECT 'a;b', "c;d" FROM t`, "SELECT 'it''s; fine'"}},
		{"SELECT E'\\';' AS x; SELECT 2", []string{`SELECT E'\';' AS x`, "SELECT 2"}},
		{"SELECT $$a;b$$, $tag$ $$;$$ $tag$; SELECT $1", []string{"SELECT $$a;b$$, $tag$ $$;$$ $tag$", "SELECT $1"}},
		{"-- only; a comment\nSELECT 1; /* x; /* nested; */ y; */ SELECT 2 -- end;", []string{"-- only; a comment\nSELECT 1", "/* x; /* nested; */ y; */ SELECT 2 -- end;"}},
		{"-- nothing; here\n ; /* nor; here */", nil},
		{"SELECT 'unterminated; x", []string{"SELECT 'unterminated; x"}},
	} {
		require.Equal(t, tc.want, splitStatements(tc.sql), "%q", tc.sql)
	}
}

// The splitter never loses or reorders text: its statements, in order, are the script's
// non-blank parts.
func FuzzSplitStatements(f *testing.F) {
	for _, s := range []string{"SELECT 1; SELECT 2", "SELECT 'a;b'; $$;$$", "/* ; */ -- ;\n;", `E'\';'`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		rest := sql
		for _, s := range splitStatements(sql) {
			require.NotEmpty(t, s)
			i := strings.Index(rest, s)
			require.GreaterOrEqual(t, i, 0, "statement %q in order in %q", s, sql)
			rest = rest[i+len(s):]
		}
	})
}
