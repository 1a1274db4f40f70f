package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func runPG(t *testing.T, p *Postgres, cfg map[string]any) (map[string]any, error) {
	t.Helper()
	out, err := p.Run(context.Background(), &Call{Kind: "postgres", Config: cfg, CommandID: "c", Step: "s"})
	if err != nil {
		return nil, err
	}
	m, ok := out.(map[string]any)
	if !ok {
		t.Fatalf("result is %T", out)
	}
	if _, err := json.Marshal(m); err != nil {
		t.Fatalf("result not JSON-encodable: %v", err)
	}
	return m, nil
}

func mustPG(t *testing.T, p *Postgres, cfg map[string]any) map[string]any {
	t.Helper()
	m, err := runPG(t, p, cfg)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return m
}

func TestPostgres(t *testing.T) {
	dsn := testkit.StartPostgres(t)
	p := &Postgres{}
	t.Cleanup(p.Close)
	// with completes a config as Parse leaves a tool whose SQL is the playbook's own text.
	with := func(cfg map[string]any) map[string]any {
		cfg["connection_string"] = dsn
		return asWritten(cfg)
	}

	t.Run("diagnostics", func(t *testing.T) {
		l := NewLog(1 << 10)
		_, err := p.Run(context.Background(), &Call{Kind: "postgres", Log: l, CommandID: "c", Step: "s",
			Config: with(map[string]any{"command": "SELECT 1 AS a; SELECT g FROM generate_series(1, 4) g"})})
		require.NoError(t, err)
		_, err = p.Run(context.Background(), &Call{Kind: "postgres", Log: l, CommandID: "c", Step: "s",
			Config: with(map[string]any{"command": "SELECT * FROM no_such_table"})})
		require.Error(t, err)
		got := l.Streams()
		require.Len(t, got, 1)
		require.Equal(t, StreamDiagnostic, got[0].Name)
		lines := strings.Split(strings.TrimSuffix(string(got[0].Tail), "\n"), "\n")
		require.Len(t, lines, 2)
		require.Regexp(t, `^postgres: 2 statement\(s\) in \S+; last: SELECT 4; rows: 4$`, lines[0])
		require.Regexp(t, `^postgres: failed after \S+: .*no_such_table`, lines[1])
		require.NotContains(t, string(got[0].Tail), dsn, "no connection string")
	})

	t.Run("multi statement", func(t *testing.T) {
		res := mustPG(t, p, with(map[string]any{"command": `
			CREATE TABLE items (id int PRIMARY KEY, name text, price numeric, big numeric, at timestamptz,
			  day date, u uuid, raw bytea, doc jsonb, tags text[], ok bool, f float8);
			INSERT INTO items VALUES
			  (1, 'a;b', 1.50, 123456789012345678901234567890, '2024-01-02 03:04:05+00', '2024-01-02',
			   'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\x0102', '{"k": [1, "two"]}', '{x,y}', true, 'NaN'),
			  (2, 'c', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, false, 2.5),
			  (3, 'd', 3, 0, NULL, NULL, NULL, NULL, 'null', '{}', NULL, NULL);
			SELECT * FROM items ORDER BY id;`}))
		if res["statements"] != 3 || res["row_count"] != int64(3) || res["command"] != "SELECT 3" {
			t.Fatalf("result = %v", res)
		}
		rows := res["rows"].([]any)
		r := rows[0].(map[string]any)
		want := map[string]any{
			"id": int64(1), "name": "a;b", "price": 1.5, "big": "123456789012345678901234567890",
			"at": "2024-01-02T03:04:05Z", "day": "2024-01-02", "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
			"raw": "AQI=", "ok": true, "f": "NaN",
		}
		for k, v := range want {
			if r[k] != v {
				t.Errorf("%s = %#v (%T), want %#v", k, r[k], r[k], v)
			}
		}
		if doc, _ := json.Marshal(r["doc"]); string(doc) != `{"k":[1,"two"]}` {
			t.Errorf("doc = %s", doc)
		}
		if tags, _ := json.Marshal(r["tags"]); string(tags) != `["x","y"]` {
			t.Errorf("tags = %s", tags)
		}
		if r2 := rows[1].(map[string]any); r2["price"] != nil || r2["f"] != 2.5 {
			t.Errorf("row 2 = %v", r2)
		}
		cols := res["columns"].([]any)
		if len(cols) != 12 || cols[0] != "id" {
			t.Errorf("columns = %v", cols)
		}

		// The last statement returns no rows: rows come from the SELECT before it, the
		// command tag from the last statement.
		res = mustPG(t, p, with(map[string]any{"query": "SELECT count(*) AS n FROM items; UPDATE items SET ok = true WHERE id > 1"}))
		if res["command"] != "UPDATE 2" || res["statements"] != 2 || res["rows"].([]any)[0].(map[string]any)["n"] != int64(3) {
			t.Fatalf("result = %v", res)
		}
		// Only DML: row_count is the rows affected.
		res = mustPG(t, p, with(map[string]any{"command": "DELETE FROM items WHERE id = 3"}))
		if res["command"] != "DELETE 1" || res["row_count"] != int64(1) || len(res["rows"].([]any)) != 0 {
			t.Fatalf("result = %v", res)
		}
	})

	t.Run("params", func(t *testing.T) {
		mustPG(t, p, with(map[string]any{"command": "CREATE TABLE kv (k text PRIMARY KEY, v int, d jsonb)"}))
		res := mustPG(t, p, with(map[string]any{
			"command": "INSERT INTO kv VALUES ($1, $2, $3), ($4, $5, NULL) RETURNING k, v",
			"params":  []any{"x'); DROP TABLE kv; --", float64(7), map[string]any{"a": float64(1)}, "y", "8"},
		}))
		if res["command"] != "INSERT 0 2" || res["row_count"] != int64(2) {
			t.Fatalf("result = %v", res)
		}
		res = mustPG(t, p, with(map[string]any{"command": "SELECT v, d FROM kv WHERE k = $1", "params": []any{"x'); DROP TABLE kv; --"}}))
		row := res["rows"].([]any)[0].(map[string]any)
		if row["v"] != int64(7) || row["d"].(map[string]any)["a"] != float64(1) {
			t.Fatalf("row = %v", row)
		}
		_, err := runPG(t, p, with(map[string]any{"command": "SELECT 1; SELECT $1", "params": []any{1.0}}))
		if err == nil || !strings.Contains(err.Error(), "single statement") {
			t.Fatalf("params with two statements: err = %v", err)
		}
	})

	t.Run("as_objects false and schema", func(t *testing.T) {
		res := mustPG(t, p, with(map[string]any{"command": "CREATE SCHEMA s1; CREATE TABLE s1.t (a int, b text); INSERT INTO s1.t VALUES (1, 'one')"}))
		if res["statements"] != 3 {
			t.Fatalf("result = %v", res)
		}
		res = mustPG(t, p, with(map[string]any{"command": "SELECT a, b FROM t", "schema": "s1", "as_objects": false}))
		rows := res["rows"].([]any)
		r, ok := rows[0].([]any)
		if !ok || len(r) != 2 || r[0] != int64(1) || r[1] != "one" {
			t.Fatalf("rows = %#v", rows)
		}
		// search_path was local to that transaction.
		if _, err := runPG(t, p, with(map[string]any{"command": "SELECT a FROM t"})); err == nil {
			t.Fatal("schema leaked into the next call")
		}
	})

	t.Run("syntax error", func(t *testing.T) {
		_, err := runPG(t, p, with(map[string]any{"command": "SELEC 1"}))
		var te *Error
		if !errors.As(err, &te) || te.Retryable || !strings.HasPrefix(te.Msg, `postgres: syntax error at or near "SELEC" (SQLSTATE 42601)`) {
			t.Fatalf("err = %#v", err)
		}
		// broken_sql.yaml: a trailing comma before FROM.
		_, err = runPG(t, p, with(map[string]any{"command": "SELECT\n  COUNT(*) as row_count,\nFROM patient_info;\n"}))
		if err == nil || !strings.Contains(err.Error(), `syntax error at or near "FROM" (SQLSTATE 42601)`) {
			t.Fatalf("err = %v", err)
		}
		// A failing statement rolls back the whole command.
		_, err = runPG(t, p, with(map[string]any{"command": "CREATE TABLE rb (a int); INSERT INTO rb VALUES (1/0)"}))
		if err == nil || !strings.Contains(err.Error(), "SQLSTATE 22012") {
			t.Fatalf("err = %v", err)
		}
		if _, err := runPG(t, p, with(map[string]any{"command": "SELECT * FROM rb"})); err == nil || !strings.Contains(err.Error(), "42P01") {
			t.Fatalf("table rb survived a failed command: %v", err)
		}
	})

	t.Run("max_rows", func(t *testing.T) {
		_, err := runPG(t, p, with(map[string]any{"command": "CREATE TABLE mr (a int); INSERT INTO mr VALUES (1); SELECT generate_series(1, 20)", "max_rows": 10}))
		if err == nil || !strings.Contains(err.Error(), "more than 10 rows") {
			t.Fatalf("err = %v", err)
		}
		if _, err := runPG(t, p, with(map[string]any{"command": "SELECT * FROM mr"})); err == nil {
			t.Fatal("over-cap command was not rolled back")
		}
		_, err = runPG(t, p, with(map[string]any{"command": "SELECT generate_series(1, $1::int)", "params": []any{11.0}, "max_rows": 10}))
		if err == nil || !strings.Contains(err.Error(), "more than 10 rows") {
			t.Fatalf("err = %v", err)
		}
		res := mustPG(t, p, with(map[string]any{"command": "SELECT generate_series(1, 10)", "max_rows": 10}))
		if res["row_count"] != int64(10) {
			t.Fatalf("result = %v", res)
		}
	})

	// A runaway result is cancelled at the cap, not read to its end (10^10 rows) nor to a
	// statement_timeout (none here), by each protocol: without the cancel the command would
	// outlive its context's deadline and fail with that instead. The pooled connection
	// serves the next command.
	t.Run("max_rows stops a runaway result", func(t *testing.T) {
		for _, tc := range []struct {
			cfg     map[string]any
			literal bool // the playbook's own text (simple protocol), else one statement
		}{
			{map[string]any{"command": "SELECT generate_series(1, 10000000000)"}, true},
			{map[string]any{"command": "SELECT generate_series(1, 10000000000); SELECT 1"}, true},
			{map[string]any{"command": "SELECT generate_series(1, 10000000000)"}, false},
			{map[string]any{"command": "SELECT generate_series(1, $1::bigint)", "params": []any{1e10}}, true},
		} {
			cfg := tc.cfg
			cfg["max_rows"], cfg["statement_timeout_ms"] = 10, 0
			if tc.literal {
				cfg = with(cfg)
			} else {
				cfg["connection_string"] = dsn
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_, err := p.Run(ctx, &Call{Kind: "postgres", Config: cfg, CommandID: "c", Step: "s"})
			cancel()
			if err == nil || !strings.Contains(err.Error(), "more than 10 rows") {
				t.Fatalf("%v: err = %v", cfg["command"], err)
			}
			res := mustPG(t, p, with(map[string]any{"command": "SELECT 1 AS one"}))
			if res["row_count"] != int64(1) {
				t.Fatalf("after %v: %v", cfg["command"], res)
			}
		}
	})

	t.Run("outside a transaction block", func(t *testing.T) {
		res := mustPG(t, p, with(map[string]any{"command": "CREATE TABLE vac (a int)"}))
		if res["command"] != "CREATE TABLE" {
			t.Fatalf("result = %v", res)
		}
		res = mustPG(t, p, with(map[string]any{"command": "VACUUM vac"}))
		if res["command"] != "VACUUM" {
			t.Fatalf("result = %v", res)
		}
	})

	t.Run("pool cache", func(t *testing.T) {
		cp := &Postgres{MaxPools: 1, MaxConns: 2}
		var wg sync.WaitGroup
		errs := make(chan error, 12)
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := fmt.Sprintf("%s&application_name=app%d", dsn, i%3)
				_, err := runPG(t, cp, map[string]any{"connection_string": d, "command": "SELECT pg_sleep(0.01)"})
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if len(cp.pools) != 1 {
			t.Fatalf("pools = %d, want 1", len(cp.pools))
		}
		cp.Close()
		if _, err := runPG(t, cp, with(map[string]any{"command": "SELECT 1"})); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Fatalf("after Close: err = %v", err)
		}
	})

	t.Run("statement timeout", func(t *testing.T) {
		_, err := runPG(t, p, with(map[string]any{"command": "SELECT pg_sleep(5)", "statement_timeout_ms": 50}))
		if err == nil || !strings.Contains(err.Error(), "57014") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("credential", func(t *testing.T) {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		pw, _ := u.User.Password()
		parts := map[string]any{
			"host": u.Hostname(), "port": u.Port(), "username": u.User.Username(), "password": pw,
			"dbname": strings.TrimPrefix(u.Path, "/"), "sslmode": u.Query().Get("sslmode"),
		}
		resolve := func(_ context.Context, name string) (string, map[string]any, error) {
			switch name {
			case "pg_parts":
				return "postgres", parts, nil
			case "pg_dsn":
				return "postgres", map[string]any{"connection_string": dsn}, nil
			case "pg_bad":
				bad := map[string]any{}
				for k, v := range parts {
					bad[k] = v
				}
				bad["password"] = "wrong-password-xyz"
				bad["user"] = "nobody_here"
				delete(bad, "username")
				return "postgres", bad, nil
			}
			return "", nil, errors.New("no such credential")
		}
		cp := &Postgres{Resolve: resolve, MaxPools: 2}
		t.Cleanup(cp.Close)
		for _, name := range []string{"pg_parts", "pg_dsn"} {
			res := mustPG(t, cp, map[string]any{"auth": name, "command": "SELECT current_database() AS db"})
			if res["rows"].([]any)[0].(map[string]any)["db"] != parts["dbname"] {
				t.Fatalf("%s: result = %v", name, res)
			}
		}
		_, err = runPG(t, cp, map[string]any{"auth": "pg_bad", "command": "SELECT 1"})
		if err == nil || strings.Contains(err.Error(), "wrong-password-xyz") {
			t.Fatalf("bad credential: err = %v", err)
		}
		if len(cp.pools) != 2 {
			t.Fatalf("pools = %d, want the cap 2", len(cp.pools))
		}
		if _, err := runPG(t, cp, map[string]any{"auth": "nope", "command": "SELECT 1"}); err == nil || !strings.Contains(err.Error(), "no such credential") {
			t.Fatalf("unknown credential: err = %v", err)
		}
		if _, err := runPG(t, &Postgres{}, map[string]any{"auth": "pg_dsn", "command": "SELECT 1"}); err == nil {
			t.Fatal("auth without resolver: want error")
		}
	})
}

func TestPostgresConfigErrors(t *testing.T) {
	p := &Postgres{}
	defer p.Close()
	for _, cfg := range []map[string]any{
		{"connection_string": "postgres://x/y"},
		{"command": "SELECT 1"},
		{"command": "SELECT 1", "connection_string": "postgres://x/y", "params": map[string]any{"a": 1}},
		{"command": "SELECT 1", "connection_string": "postgres://x/y", "max_rows": 0},
		{"command": "SELECT 1", "connection_string": "host=x port=notaport password='p4ssw0rd!'"},
	} {
		_, err := p.Run(context.Background(), &Call{Config: cfg})
		var te *Error
		if !errors.As(err, &te) || te.Retryable {
			t.Errorf("config %v: err = %#v, want a non-retryable *Error", cfg, err)
		} else if strings.Contains(te.Msg, "p4ssw0rd") {
			t.Errorf("password in error: %s", te.Msg)
		}
	}
}

func TestPostgresDSN(t *testing.T) {
	p := &Postgres{}
	got, err := p.dsn(context.Background(), map[string]any{"host": "h", "port": float64(5433), "database": "d", "user": "u", "password": `a'b\c`})
	if err != nil {
		t.Fatal(err)
	}
	if want := `host='h' port='5433' user='u' password='a\'b\\c' dbname='d'`; got != want {
		t.Fatalf("dsn = %s, want %s", got, want)
	}
	if pw := passwordOf(got); pw != `a'b\c` {
		t.Fatalf("passwordOf = %q", pw)
	}
	// No password given: an empty one, never the environment's.
	t.Setenv("PGPASSWORD", "from-env")
	got, _ = p.dsn(context.Background(), map[string]any{"host": "h"})
	cfg, err := p.pgConfig(got)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ConnConfig.Password != "" {
		t.Fatalf("password = %q, want empty", cfg.ConnConfig.Password)
	}
	cfg, err = p.pgConfig("postgres://u@h/d")
	if err != nil || cfg.ConnConfig.Password != "" {
		t.Fatalf("url without password: %v %q", err, cfg.ConnConfig.Password)
	}
	cfg, err = p.pgConfig("postgres://u:pw@h/d")
	if err != nil || cfg.ConnConfig.Password != "pw" {
		t.Fatalf("url with password: %v %q", err, cfg.ConnConfig.Password)
	}
}

func TestNumericValue(t *testing.T) {
	for in, want := range map[string]any{
		"1.50": 1.5, "-42": float64(-42), "0": float64(0), "1000000000000000000000": 1e21,
		"123456789012345.6": "123456789012345.6", "NaN": "NaN", "Infinity": "Infinity",
	} {
		if got := numericValue(in); got != want {
			t.Errorf("numericValue(%s) = %#v, want %#v", in, got, want)
		}
	}
}
