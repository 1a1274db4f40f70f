package tools

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/internal/playbook/template"
	"github.com/noetl/noetl/internal/testkit"
)

// asWritten records the SQL fields of cfg as the playbook's own literal text, as Parse does
// for SQL without a template.
func asWritten(cfg map[string]any) map[string]any {
	var digests []any
	for _, k := range []string{"command", "query"} {
		if s, ok := cfg[k].(string); ok {
			digests = append(digests, playbook.SQLTextDigest(s))
		}
	}
	cfg[playbook.SQLLiteralDigestsKey] = digests
	return cfg
}

// fromPlaybook parses a playbook whose start step runs tool, then renders the tool's
// configuration with the workload as the worker does, and points it at dsn.
func fromPlaybook(t *testing.T, dsn string, tool map[string]any, workload map[string]any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(tool)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := playbook.Parse([]byte("apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t}\nworkflow:\n  - step: start\n    tool: " + string(raw) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := template.NewRenderer().Render(pb.Step("start").Tool[0].Config, map[string]any{"workload": workload})
	if err != nil {
		t.Fatal(err)
	}
	cfg := out.(map[string]any)
	cfg["connection_string"] = dsn
	return cfg
}

// The exact input of issue 12.
const injected = `users"; drop table victim; --`

func TestPostgresTemplatedSQL(t *testing.T) {
	dsn := testkit.StartPostgres(t)
	p := &Postgres{}
	t.Cleanup(p.Close)
	pg := func(tool map[string]any, workload map[string]any) (map[string]any, error) {
		t.Helper()
		return runPG(t, p, fromPlaybook(t, dsn, tool, workload))
	}
	one := func(res map[string]any) any {
		t.Helper()
		rows, _ := res["rows"].([]any)
		if len(rows) != 1 {
			t.Fatalf("want one row: %v", res)
		}
		for _, v := range rows[0].(map[string]any) {
			return v
		}
		t.Fatalf("want one column: %v", res)
		return nil
	}
	victimIntact := func() {
		t.Helper()
		res, err := pg(map[string]any{"kind": "postgres", "query": "SELECT count(*) FROM victim"}, nil)
		if err != nil || one(res) != int64(1) {
			t.Fatalf("victim: %v %v", res, err)
		}
	}

	// A literal script of several statements runs as before.
	res, err := pg(map[string]any{"kind": "postgres", "command": `
		CREATE TABLE users (id int); INSERT INTO users VALUES (1), (2), (3);
		CREATE TABLE victim (id int); INSERT INTO victim VALUES (42);
		CREATE TABLE "users""; drop table victim; --" (id int); INSERT INTO "users""; drop table victim; --" VALUES (1), (2);
	`}, nil)
	if err != nil || res["statements"] != 6 {
		t.Fatalf("literal script: %v %v", res, err)
	}

	t.Run("the injection of issue 12 fails and runs nothing", func(t *testing.T) {
		_, err := pg(map[string]any{"kind": "postgres", "query": `select count(*) from "{{ workload.t }}"`}, map[string]any{"t": injected})
		var te *Error
		if !errors.As(err, &te) || te.Retryable {
			t.Fatalf("err = %#v", err)
		}
		for _, want := range []string{"cannot insert multiple commands into a prepared statement (SQLSTATE 42601)", "holds a template", "sql_ident", "multi_statement: true"} {
			if !strings.Contains(te.Msg, want) {
				t.Errorf("message %q lacks %q", te.Msg, want)
			}
		}
		victimIntact()
	})

	t.Run("sql_ident counts the table named", func(t *testing.T) {
		q := map[string]any{"kind": "postgres", "query": `select count(*) from {{ workload.t | sql_ident }}`}
		for name, want := range map[string]int64{"users": 3, injected: 2} {
			res, err := pg(q, map[string]any{"t": name})
			if err != nil || one(res) != want {
				t.Fatalf("%s: %v %v", name, res, err)
			}
		}
		_, err := pg(q, map[string]any{"t": "nope"})
		if err == nil || !strings.Contains(err.Error(), `relation "nope" does not exist`) {
			t.Fatalf("err = %v", err)
		}
		victimIntact()
	})

	t.Run("templated SQL is one statement unless multi_statement", func(t *testing.T) {
		tool := map[string]any{"kind": "postgres", "command": "INSERT INTO victim VALUES (7); SELECT {{ workload.n | sql_literal }} AS n"}
		if _, err := pg(tool, map[string]any{"n": 2}); err == nil || !strings.Contains(err.Error(), "multiple commands") {
			t.Fatalf("err = %v", err)
		}
		victimIntact()
		// A trailing semicolon and comments are still one statement.
		res, err := pg(map[string]any{"kind": "postgres", "command": "SELECT {{ workload.n | sql_literal }} AS n; -- done\n"}, map[string]any{"n": 2})
		if err != nil || one(res) != int64(2) || res["statements"] != 1 {
			t.Fatalf("%v %v", res, err)
		}
		tool["multi_statement"] = true
		res, err = pg(tool, map[string]any{"n": 2})
		if err != nil || one(res) != int64(2) || res["statements"] != 2 {
			t.Fatalf("multi_statement: %v %v", res, err)
		}
		res, err = pg(map[string]any{"kind": "postgres", "command": "DELETE FROM victim WHERE id = 7"}, nil)
		if err != nil || res["row_count"] != int64(1) {
			t.Fatalf("%v %v", res, err)
		}
		// A config that did not come from a playbook has no literal digest.
		_, err = runPG(t, p, map[string]any{"connection_string": dsn, "command": "SELECT 1; SELECT 2"})
		if err == nil || !strings.Contains(err.Error(), "multiple commands") {
			t.Fatalf("err = %v", err)
		}
		_, err = runPG(t, p, map[string]any{"connection_string": dsn, "command": "SELECT 1", "multi_statement": "maybe"})
		if err == nil || !strings.Contains(err.Error(), "tool.multi_statement") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("a templated statement that cannot run in a transaction", func(t *testing.T) {
		res, err := pg(map[string]any{"kind": "postgres", "command": "VACUUM {{ workload.t | sql_ident }}"}, map[string]any{"t": "users"})
		if err != nil || res["command"] != "VACUUM" {
			t.Fatalf("%v %v", res, err)
		}
	})

	t.Run("sql_literal values read back unchanged", func(t *testing.T) {
		q := map[string]any{"kind": "postgres", "query": "SELECT {{ workload.v | sql_literal }} AS v"}
		for _, v := range []any{
			"it's", `back\slash \'`, "new\nline", "-- comment", "/* c */", "$$ dollar $$", "Ünïcödé ✓", "", injected,
			int64(-3), int64(7), int64(9007199254740993), 2.5, -0.25, 1e21, true, false, nil,
		} {
			res, err := pg(q, map[string]any{"v": v})
			if err != nil {
				t.Fatalf("%#v: %v", v, err)
			}
			got := one(res)
			if f, ok := v.(float64); ok && got != f {
				t.Errorf("%#v read back as %#v", v, got)
			} else if !ok && got != v {
				t.Errorf("%#v read back as %#v", v, got)
			}
		}
		for v, want := range map[float64]string{math.NaN(): "NaN", math.Inf(1): "Infinity", math.Inf(-1): "-Infinity"} {
			res, err := pg(q, map[string]any{"v": v})
			if err != nil || one(res) != want {
				t.Errorf("%v: %v %v", v, res, err)
			}
		}
		doc := map[string]any{"k": []any{1.0, "it's", map[string]any{"x": nil}}}
		res, err := pg(map[string]any{"kind": "postgres", "query": "SELECT {{ workload.v | sql_literal }}::jsonb AS v"}, map[string]any{"v": doc})
		if err != nil {
			t.Fatal(err)
		}
		if a, b := mustJSON(t, one(res)), mustJSON(t, doc); a != b {
			t.Errorf("jsonb %s, want %s", a, b)
		}
		// A negative number after "-" does not start a comment.
		res, err = pg(map[string]any{"kind": "postgres", "query": "SELECT 10 -{{ workload.v | sql_literal }} AS v"}, map[string]any{"v": -3})
		if err != nil || one(res) != int64(13) {
			t.Errorf("%v %v", res, err)
		}
		// A list, quoted item by item.
		res, err = pg(map[string]any{"kind": "postgres", "query": "SELECT count(*) FROM users WHERE id IN ({{ workload.v | map('sql_literal') | join(', ') }})"}, map[string]any{"v": []any{1, 3, 99}})
		if err != nil || one(res) != int64(2) {
			t.Errorf("%v %v", res, err)
		}
	})

	t.Run("sql_ident names read back unchanged", func(t *testing.T) {
		for _, name := range []string{`a"b`, "with space", "Ünï", "semi;colon--", `x"; DROP TABLE victim; --`, "UPPER"} {
			if _, err := pg(map[string]any{"kind": "postgres", "command": "CREATE TABLE {{ workload.n | sql_ident }} (x int)"}, map[string]any{"n": name}); err != nil {
				t.Fatalf("%q: %v", name, err)
			}
			res, err := runPG(t, p, asWritten(map[string]any{"connection_string": dsn, "query": "SELECT count(*) FROM pg_class WHERE relname = $1", "params": []any{name}}))
			if err != nil || one(res) != int64(1) {
				t.Fatalf("%q: %v %v", name, res, err)
			}
		}
		if _, err := pg(map[string]any{"kind": "postgres", "command": "CREATE SCHEMA s2"}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := pg(map[string]any{"kind": "postgres", "command": "CREATE TABLE {{ workload.q | sql_ident(dotted=true) }} (x int)"}, map[string]any{"q": "s2.t"}); err != nil {
			t.Fatal(err)
		}
		res, err := pg(map[string]any{"kind": "postgres", "query": "SELECT to_regclass('s2.t')::text AS r"}, nil)
		if err != nil || one(res) != "s2.t" {
			t.Fatalf("%v %v", res, err)
		}
		victimIntact()
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
