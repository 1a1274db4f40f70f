package playbook

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func sqlPlaybook(tool string) []byte {
	return doc("workflow:\n  - step: start\n    next: [load]\n  - step: load\n    tool:\n" + tool)
}

func warningsOf(pb *Playbook) []string {
	var out []string
	for _, w := range pb.Warnings {
		out = append(out, w.Msg)
	}
	return out
}

func TestSQLTemplateWarnings(t *testing.T) {
	t.Parallel()
	// The query of issue 12: warned, naming the step, the field and the template.
	pb := mustParse(t, sqlPlaybook(`      kind: postgres
      auth: pg
      query: 'select count(*) from "{{ workload.t }}"'
`))
	require.Len(t, pb.Warnings, 1)
	w := pb.Warnings[0]
	require.Equal(t, "load", w.Step)
	require.Equal(t, 13, w.Line)
	require.Equal(t, `template {{ workload.t }} is spliced into SQL text (tool.query); pass it through sql_literal or sql_ident, or bind it with params`, w.Msg)
	require.NotContains(t, pb.Step("load").Tool[0].Config, SQLLiteralDigestsKey, "templated SQL has no literal digest")

	// Quoted or bound: no warning.
	for _, tool := range []string{
		"      kind: postgres\n      query: 'select count(*) from {{ workload.t | sql_ident }}'\n",
		"      kind: postgres\n      query: 'select count(*) from {{ workload.t | sql_ident(true) }} where a = {{ workload.a | default(1) | sql_literal }}'\n",
		"      kind: postgres\n      query: 'select $1::text'\n      params: ['{{ workload.t }}']\n",
		"      kind: postgres\n      query: \"select * from t limit {{ workload.n | int }} offset {{ workload.o | int(0) }}\"\n",
		"      kind: postgres\n      query: \"select * from t where id in ({{ workload.ids | map('sql_literal') | join(', ') }})\"\n",
		"      kind: postgres\n      query: \"select {{ 'a' ~ (workload.x | sql_literal) }}, {{ 1 }}{% if workload.f %} where f{% endif %}\"\n",
		"      kind: postgres\n      query: \"select {{ workload.a | sql_literal if workload.c else 'NULL' }}\"\n",
	} {
		pb := mustParse(t, sqlPlaybook(tool))
		require.Empty(t, pb.Warnings, tool)
	}
	// A python tool's command is no SQL: the only warning is that python ignores it.
	pb = mustParse(t, sqlPlaybook("      kind: python\n      code: 'print(1)'\n      command: 'select {{ workload.t }}'\n"))
	require.Equal(t, []string{`tool "python" key "command" is not read by this engine; it is ignored`}, warningsOf(pb))

	// Unquoted in every other way: warned.
	for tool, template := range map[string]string{
		"      kind: postgres\n      command: \"select {{ workload.t | upper }}\"\n":                                     "{{ workload.t | upper }}",
		"      kind: postgres\n      command: \"select {{ workload.n | int(workload.d) }}\"\n":                           "{{ workload.n | int(workload.d) }}",
		"      kind: postgres\n      command: \"select {{ workload.a | sql_literal if workload.c else workload.b }}\"\n": "{{ workload.a | sql_literal if workload.c else workload.b }}",
		"      kind: postgres\n      command: \"select 1{% if workload.f %} where {{ workload.f }}{% endif %}\"\n":       "{{ workload.f }}",
		"      kind: postgres\n      command: \"select {% for c in workload.cols %}{{ c }},{% endfor %} 1\"\n":           "{{ c }}",
		"      kind: postgres\n      command: \"select {{ workload.xs | map('upper') | join(', ') }}\"\n":                "{{ workload.xs | map('upper') | join(', ') }}",
		"      kind: postgres\n      command: \"select {{ workload.xs | map('sql_literal') | join(workload.sep) }}\"\n":  "{{ workload.xs | map('sql_literal') | join(workload.sep) }}",
		"      kind: postgres\n      command: \"select {{-   workload.t   -}}\"\n":                                       "{{- workload.t -}}",
	} {
		pb := mustParse(t, sqlPlaybook(tool))
		require.Len(t, pb.Warnings, 1, tool)
		require.Contains(t, pb.Warnings[0].Msg, "template "+template+" is spliced into SQL text (tool.command)", tool)
	}

	// NoETL's quoted-literal splicing still parses, with one warning per field listing the
	// templates once each; the line is the template's own inside a block scalar.
	pb = mustParse(t, sqlPlaybook(`      kind: postgres
      command: |
        INSERT INTO results (id, execution_id, user_name, score, category)
        VALUES (
          '{{ execution_id }}:{{ user.name }}',
          '{{ execution_id }}',
          '{{ user.name }}',
          {{ save.score | default(0.0) }},
          '{{ save.category | default("unknown") }}'
        );
`))
	require.Len(t, pb.Warnings, 1)
	require.Equal(t, 15, pb.Warnings[0].Line)
	require.Equal(t, `templates {{ execution_id }}, {{ user.name }}, {{ save.score | default(0.0) }} and 1 more are spliced into SQL text (tool.command); pass them through sql_literal or sql_ident, or bind them with params`, pb.Warnings[0].Msg)

	// Pipelines and workbook tasks name their field.
	pb = mustParse(t, doc(`workbook:
  - name: count
    tool: {kind: postgres, query: "select count(*) from {{ t }}"}
workflow:
  - step: start
    tool:
      - {name: first, kind: postgres, query: "select 1"}
      - {name: second, kind: postgres, command: "select {{ first.rows }}"}
  - step: other
    tool: {kind: workbook, name: count, query: "select {{ workload.x }}"}
`))
	require.ElementsMatch(t, []string{
		`template {{ t }} is spliced into SQL text (workbook.count.tool.query); pass it through sql_literal or sql_ident, or bind it with params`,
		`template {{ first.rows }} is spliced into SQL text (tool[1].command); pass it through sql_literal or sql_ident, or bind it with params`,
		`template {{ workload.x }} is spliced into SQL text (tool.query); pass it through sql_literal or sql_ident, or bind it with params`,
		`step "other" is not reachable from start`,
	}, warningsOf(pb))
}

func TestSQLLiteralDigests(t *testing.T) {
	t.Parallel()
	script := "CREATE TABLE a (x int);\nINSERT INTO a VALUES (1);\n"
	pb := mustParse(t, doc(`workbook:
  - name: task
    tool: {kind: postgres, command: "select 2; select 3"}
workflow:
  - step: start
    tool:
      kind: postgres
      command: |
        CREATE TABLE a (x int);
        INSERT INTO a VALUES (1);
      query: "select {{ workload.x | sql_literal }}"
      `+SQLLiteralDigestsKey+`: [forged]
    next: [other, py]
  - step: other
    tool: {kind: workbook, name: task, `+SQLLiteralDigestsKey+`: [forged]}
  - step: py
    tool: {kind: python, code: "x", `+SQLLiteralDigestsKey+`: [forged]}
`))
	// The author's digests are ignored, and registration says so.
	require.Equal(t, []string{
		`tool "postgres" key "` + SQLLiteralDigestsKey + `" is not read by this engine; it is ignored`,
		`tool "workbook" key "` + SQLLiteralDigestsKey + `" is not read by this engine; it is ignored`,
		`tool "python" key "` + SQLLiteralDigestsKey + `" is not read by this engine; it is ignored`,
	}, warningsOf(pb))
	require.Equal(t, []any{SQLTextDigest(script)}, pb.Step("start").Tool[0].Config[SQLLiteralDigestsKey],
		"only the literal field is recorded; the author's value is replaced")
	require.Equal(t, []any{SQLTextDigest("select 2; select 3")}, pb.Workbook["task"].Config[SQLLiteralDigestsKey])
	require.NotContains(t, pb.Step("other").Tool[0].Config, SQLLiteralDigestsKey, "a workbook call without SQL keeps its task's digests")
	require.NotContains(t, pb.Step("py").Tool[0].Config, SQLLiteralDigestsKey)
	require.Len(t, SQLTextDigest(""), 64)
}

func TestSQLMultiStatementMustBeLiteral(t *testing.T) {
	t.Parallel()
	mustParse(t, sqlPlaybook("      kind: postgres\n      command: 'select 1; select 2'\n      multi_statement: true\n"))
	mustParse(t, sqlPlaybook("      kind: postgres\n      command: 'select 1'\n      multi_statement: false\n"))
	for v, msg := range map[string]string{
		`"{{ workload.multi }}"`: "not a template",
		`"true"`:                 `not the string "true"`,
		`1`:                      "not a number",
	} {
		_, err := Parse(sqlPlaybook("      kind: postgres\n      command: 'select 1'\n      multi_statement: " + v + "\n"))
		e := firstError(t, err)
		require.Equal(t, "load", e.Step, v)
		require.Equal(t, "tool.multi_statement", e.Field, v)
		require.Equal(t, 13, e.Line, v)
		require.True(t, strings.HasPrefix(e.Msg, "must be a literal true or false, "+msg), "%s: %s", v, e.Msg)
	}
	// A workbook task is kept despite the error, without the value.
	pb := mustParse(t, doc(`workbook:
  - name: task
    tool: {kind: postgres, command: "select {{ x | sql_literal }}; select 2", multi_statement: "{{ workload.multi }}"}
workflow:
  - step: start
    tool: {kind: workbook, name: task}
`))
	require.Equal(t, []string{`field "workbook.task.tool.multi_statement": must be a literal true or false, not a template`}, warningsOf(pb))
	require.NotContains(t, pb.Workbook["task"].Config, "multi_statement")
}
