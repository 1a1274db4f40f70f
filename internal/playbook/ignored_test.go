package playbook

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIgnoredKeysWarn: each key the engine does not act on registers with a warning that
// names it and its line, and the keys it reads register without one.
func TestIgnoredKeysWarn(t *testing.T) {
	pb, err := Parse([]byte(`apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: w, path: tests/w}
spec: {timeout: 60, mode: strict}
executor: {spec: {policy: {limits: {max_events: 100}}}}
workflow:
  - step: start
    spec: {timeout: 5s, retries: 3}
    output: {output_select: [a], store: kv}
    vars: {x: 1}
    tool:
      kind: noop
      output: {store: kv}
      spec: {timeout: 3, policy: {rules: [{else: {then: {do: continue}}}]}}
    next: end
  - step: end
`))
	require.NoError(t, err)
	var got []string
	for _, w := range pb.Warnings {
		got = append(got, w.Step+": "+w.Msg)
		require.NotZero(t, w.Line, w.Msg)
	}
	require.ElementsMatch(t, []string{
		`: "spec.mode" is not read by this engine; it is ignored`,
		`start: "spec.retries" is not read by this engine; it is ignored`,
		`start: "output.store" is not read by this engine; it is ignored`,
		`start: "vars" is not read by this engine; it is ignored`,
		`start: tool.output: storage hints of a tool are ignored (a step's output.output_select is read)`,
		`start: "tool.spec.timeout" is not read by this engine; it is ignored`,
	}, got)
}

// TestToolKeysWarn: a key a tool's kind does not read registers with a warning naming the
// key, the kind, the step and the line, for a single tool, each item of a pipeline and a
// workbook task (whose callers may set the keys of the task's kind); the keys a kind reads
// register without one.
func TestToolKeysWarn(t *testing.T) {
	t.Parallel()
	pb, err := Parse([]byte(`apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: w, path: tests/w}
workbook:
  - name: count
    tool: {kind: postgres, auth: pg, query: "select 1", qurey: "select 2"}
workflow:
  - step: start
    tool:
      kind: postgres
      auth: pg
      query: select 1
      qurey: select 2
      params: [1]
      as_objects: true
    next: fetch
  - step: fetch
    tool:
      - {name: get, kind: http, url: "http://example.test", methd: GET, method: GET, set: {a: "{{ output }}"}}
      - {name: py, kind: python, code: "result = 1", auth: pg, input: {x: 1}, args: {y: 2}, spec: {policy: {rules: [{else: {then: {do: continue}}}]}}}
      - {name: wb, kind: workbook, task: count, query: "select 3", colour: red}
    next: call
  - step: call
    tool: {kind: workbook, name: count, auth: other, colour: blue}
`))
	require.NoError(t, err)
	type w struct {
		line       int
		step, text string
	}
	var got []w
	for _, x := range pb.Warnings {
		got = append(got, w{x.Line, x.Step, x.Msg})
	}
	require.ElementsMatch(t, []w{
		{6, "", `workbook task "count": tool "postgres" key "qurey" is not read by this engine; it is ignored`},
		{13, "start", `tool "postgres" key "qurey" is not read by this engine; it is ignored`},
		{19, "fetch", `tool[0] "http" key "methd" is not read by this engine; it is ignored`},
		{20, "fetch", `tool[1] "python" key "auth" is not read by this engine; it is ignored`},
		{21, "fetch", `tool[2] "workbook" key "colour" is not read by this engine; it is ignored`},
		{24, "call", `tool "workbook" key "colour" is not read by this engine; it is ignored`},
	}, got)
}

// TestToolKeysLists: every kind Parse accepts has its list of keys, each holding the
// common keys and, for every kind that takes a configuration, keys of its own; a kind
// Parse refuses has none.
func TestToolKeysLists(t *testing.T) {
	t.Parallel()
	require.ElementsMatch(t, ToolKinds(), slices.Collect(maps.Keys(toolKeys)), "a list for every kind, and only for those")
	for _, kind := range ToolKinds() {
		keys := ToolKeys(kind)
		require.Subset(t, keys, CommonToolKeys, kind)
		require.True(t, slices.IsSorted(keys), kind)
		require.Equal(t, len(keys), len(slices.Compact(slices.Clone(keys))), kind)
		if kind != "system_info" { // it reports the worker and reads no configuration
			require.Greater(t, len(keys), len(CommonToolKeys), "%s reads keys of its own", kind)
		}
	}
	require.Nil(t, ToolKeys("task_sequence"))
	require.Nil(t, ToolKeys("nope"))
}

// TestToolKeysDocumented: the table of each kind's keys in docs/language.md lists exactly
// the keys of ToolKeys, so the documentation cannot drift from the warnings.
func TestToolKeysDocumented(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../../docs/language.md")
	require.NoError(t, err)
	text := string(src)
	start := strings.Index(text, "| kind | keys of its own |")
	require.NotEqual(t, -1, start, "the table of tool keys")
	row := regexp.MustCompile("^\\| `([a-z_]+)` \\| (.*) \\|$")
	code := regexp.MustCompile("`([a-z_0-9]+)`")
	documented := map[string][]string{}
	for _, line := range strings.Split(text[start:], "\n")[2:] {
		m := row.FindStringSubmatch(line)
		if m == nil {
			break
		}
		keys := []string{}
		for _, c := range code.FindAllStringSubmatch(m[2], -1) {
			if !slices.Contains(CommonToolKeys, c[1]) {
				keys = append(keys, c[1])
			}
		}
		documented[m[1]] = keys
	}
	require.ElementsMatch(t, ToolKinds(), slices.Collect(maps.Keys(documented)), "a row for every kind")
	for kind, keys := range documented {
		own := slices.DeleteFunc(slices.Clone(toolKeys[kind]), func(k string) bool { return slices.Contains(CommonToolKeys, k) })
		require.ElementsMatch(t, own, keys, "docs/language.md, the keys of %s", kind)
	}
}
