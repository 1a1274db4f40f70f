package playbook

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const header = `apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: t
  path: tests/t
`

// doc builds a playbook: the header, then body (workload, workflow, ...).
func doc(body string) []byte { return []byte(header + body) }

func mustParse(t *testing.T, src []byte) *Playbook {
	t.Helper()
	pb, err := Parse(src)
	require.NoError(t, err)
	require.NotNil(t, pb)
	return pb
}

func firstError(t *testing.T, err error) *Error {
	t.Helper()
	require.Error(t, err)
	var e *Error
	require.True(t, errors.As(err, &e), "error %v is not an *Error", err)
	return e
}

func TestParseConformance(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../conformance/playbooks/*.yaml")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 20)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			pb := mustParse(t, src)
			require.Equal(t, "Playbook", pb.Kind)
			require.NotEmpty(t, pb.Metadata.Name)
			require.NotNil(t, pb.Step("start"))
			for _, s := range pb.Steps {
				require.Same(t, s, pb.Step(s.Name))
				require.Positive(t, s.Line)
			}
		})
	}
}

func TestParseV10Canonical(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../../conformance/playbooks/v10_canonical_example.yaml")
	require.NoError(t, err)
	pb := mustParse(t, src)
	require.Equal(t, "noetl.io/v2", pb.APIVersion)
	require.Equal(t, "10.0", pb.Metadata.Version)
	require.Equal(t, "Demonstrates all canonical v10 DSL patterns", pb.Metadata.Description)
	require.Equal(t, int64(100), pb.Workload["max_items"])
	require.Equal(t, true, pb.Workload["enabled"])

	fetch := pb.Step("fetch_data")
	require.Len(t, fetch.Tool, 1)
	require.False(t, fetch.Pipeline)
	tool := fetch.Tool[0]
	require.Equal(t, "http", tool.Kind)
	require.Equal(t, "", tool.Label)
	require.Equal(t, "{{ api_url }}/data", tool.Config["url"])
	require.Contains(t, tool.Config, "spec")
	require.NotContains(t, tool.Config, "kind")
	require.NotNil(t, tool.Policy)
	require.Len(t, tool.Policy.Rules, 3)
	require.Equal(t, Action{Do: DoRetry, Attempts: 3, Backoff: "exponential", Delay: 1.0}, tool.Policy.Rules[0].Then)
	require.Contains(t, tool.Policy.Rules[0].When, "output.http.status in [429, 500, 502, 503]")
	require.Equal(t, DoFail, tool.Policy.Rules[1].Then.Do)
	require.True(t, tool.Policy.Rules[2].Else)
	require.Equal(t, DoContinue, tool.Policy.Rules[2].Then.Do)
	require.Equal(t, map[string]any{"ctx.fetch_completed": true}, tool.Policy.Rules[2].Then.Set)
	require.Equal(t, "{{ event.name == 'call.done' }}", fetch.Next.Arcs[0].When)

	proc := pb.Step("process_data")
	require.True(t, proc.Pipeline)
	require.Len(t, proc.Tool, 2)
	require.Equal(t, "validate", proc.Tool[0].Label)
	require.Equal(t, "transform", proc.Tool[1].Label)
	require.NotContains(t, proc.Tool[0].Config, "name")
	require.Equal(t, map[string]any{"validate_result": "{{ output }}"}, proc.Tool[0].Config["set"])
	// `- else:` followed by a sibling `then:` is an else rule too.
	rules := proc.Tool[1].Policy.Rules
	require.Len(t, rules, 1)
	require.True(t, rules[0].Else)
	require.Equal(t, map[string]any{"ctx.transform_done": true}, rules[0].Then.Set)
	require.Equal(t, []string{"fetch_data"}, proc.Refs)

	store := pb.Step("store_results")
	require.Equal(t, &Loop{
		In:          "{{ process_data.results.transform.items or [1, 2, 3] }}",
		InValue:     "{{ process_data.results.transform.items or [1, 2, 3] }}",
		Iterator:    "item",
		Mode:        LoopParallel,
		MaxInFlight: 5,
	}, store.Loop)
	require.Equal(t, []string{"process_data"}, store.Refs)
	// Its warnings: a value spliced into SQL text unquoted (sql.go), and each key this
	// engine does not read (ignored.go).
	require.Equal(t, "store_results", pb.Warnings[0].Step)
	require.Contains(t, pb.Warnings[0].Msg, "template {{ iter.item }} is spliced into SQL text (tool.command)")
	var ignored []string
	for _, w := range pb.Warnings[1:] {
		ignored = append(ignored, fmt.Sprintf("%d %s %s", w.Line, w.Step, w.Msg))
	}
	require.Equal(t, []string{
		`23  "metadata.labels" is not read by this engine; it is ignored`,
		`28  "executor.profile" is not read by this engine; it is ignored`,
		`29  "executor.version" is not read by this engine; it is ignored`,
		`30  "executor.requires" is not read by this engine; it is ignored`,
		`34  "executor.spec.entry_step" is not read by this engine; it is ignored`,
		`35  "executor.spec.no_next_is_error" is not read by this engine; it is ignored`,
		`37  "executor.spec.policy.defaults" is not read by this engine; it is ignored`,
		`39  "executor.spec.policy.results" is not read by this engine; it is ignored`,
		`54 start "spec.policy" is not read by this engine; it is ignored`,
	}, ignored)
}

func TestParseWorkbookAndPipelines(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../../conformance/playbooks/control_flow_workbook.control_flow_workbook.yaml")
	require.NoError(t, err)
	pb := mustParse(t, src)
	wb := pb.Workbook["compute_flag"]
	require.NotNil(t, wb)
	require.Equal(t, "python", wb.Kind)
	require.Equal(t, "compute_flag", wb.Label)
	require.Equal(t, map[string]any{"temperature_c": nil}, wb.Config["input"])

	eval := pb.Step("eval_flag")
	require.Equal(t, "workbook", eval.Tool[0].Kind)
	require.Equal(t, "compute_flag", eval.Tool[0].Config["name"])
	require.True(t, eval.RefsSelf)
	require.Empty(t, eval.Refs)
	require.Equal(t, ModeInclusive, pb.Step("hot_path").Next.Mode)

	src, err = os.ReadFile("../../conformance/playbooks/postgres_test.yaml")
	require.NoError(t, err)
	pb = mustParse(t, src)
	start := pb.Step("start")
	require.True(t, start.Pipeline)
	require.Equal(t, "query_catalog", start.Tool[0].Label)
	require.Equal(t, "pg_noetl_k8s", start.Tool[0].Config["auth"])
}

func TestParseStepExtra(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../../conformance/playbooks/test_output_select.yaml")
	require.NoError(t, err)
	pb := mustParse(t, src)
	require.Equal(t, map[string]any{"output": map[string]any{
		"store":         map[string]any{"kind": "auto"},
		"output_select": []any{"status", "count", "total_size"},
	}}, pb.Step("start").Extra)
	require.Equal(t, "artifact", pb.Step("lazy_load_full_data").Tool[0].Kind)
	require.Equal(t, []string{"start"}, pb.Step("lazy_load_full_data").Refs)
}

func TestParseUnnamedPipelineItems(t *testing.T) {
	t.Parallel()
	pb := mustParse(t, doc(`workflow:
  - step: start
    tool:
      - kind: python
        code: a
      - name: b
        kind: noop
      - kind: noop
`))
	s := pb.Step("start")
	require.Equal(t, []string{"task_0", "b", "task_2"}, []string{s.Tool[0].Label, s.Tool[1].Label, s.Tool[2].Label})
}

func TestParseImplicitEndWarning(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../../conformance/playbooks/root_scripts.test_implicit_end_routing.yaml")
	require.NoError(t, err)
	pb := mustParse(t, src)
	require.Len(t, pb.Warnings, 1)
	require.Equal(t, "end", pb.Warnings[0].Step)
	require.Equal(t, pb.Step("end").Line, pb.Warnings[0].Line)
	require.Contains(t, pb.Warnings[0].Msg, "not reachable")
	require.Nil(t, pb.Step("step1").Next)
}

func TestParseStepFields(t *testing.T) {
	t.Parallel()
	pb := mustParse(t, doc(`workload:
  items: [1, 2]
  nested: {a: 1.5, b: null, c: "x"}
workflow:
  - step: start
    desc: first
    when: "{{ workload.enabled }}"
    args: {a: 1, b: 2}
    input: {b: 3, c: "{{ x }}"}
    set: {ctx.count: 0}
    loop:
      in: [1, 2, 3]
      iterator: it
      mode: parallel
      max_in_flight: "{{ workload.n }}"
    tool: {kind: noop}
`))
	s := pb.Step("start")
	require.Equal(t, "first", s.Desc)
	require.Equal(t, "{{ workload.enabled }}", s.When)
	require.Equal(t, map[string]any{"a": int64(1), "b": int64(3), "c": "{{ x }}"}, s.Input)
	require.Equal(t, map[string]any{"ctx.count": int64(0)}, s.Set)
	require.Equal(t, &Loop{InValue: []any{int64(1), int64(2), int64(3)}, Iterator: "it", Mode: LoopParallel, MaxInFlightExpr: "{{ workload.n }}"}, s.Loop)
	require.Nil(t, s.Next)
	require.Equal(t, map[string]any{"a": 1.5, "b": nil, "c": "x"}, pb.Workload["nested"])
	require.Equal(t, []any{int64(1), int64(2)}, pb.Workload["items"])
	require.Equal(t, 10, s.Line)
	require.Nil(t, pb.Step("missing"))
	var nilPB *Playbook
	require.Nil(t, nilPB.Step("start"))
}

func TestParseNextShapes(t *testing.T) {
	t.Parallel()
	tail := `  - step: a
    tool: {kind: noop}
  - step: b
    tool: {kind: noop}
`
	cases := []struct {
		name string
		next string
		want *Next
	}{
		{"string", `next: a`, &Next{Mode: ModeExclusive, Arcs: []Arc{{Step: "a", Line: 9}}}},
		{"list of names", `next: [a, b]`, &Next{Mode: ModeInclusive, Arcs: []Arc{{Step: "a", Line: 9}, {Step: "b", Line: 9}}}},
		{"list of targets", "next:\n      - step: a\n        when: \"{{ x }}\"\n        args: {k: 1}\n      - {step: b}",
			&Next{Mode: ModeInclusive, Arcs: []Arc{{Step: "a", When: "{{ x }}", Args: map[string]any{"k": int64(1)}, Line: 10}, {Step: "b", Line: 13}}}},
		{"router default mode", "next:\n      arcs:\n        - step: a\n          when: \"{{ x }}\"\n          set: {ctx.k: v}\n        - step: b",
			&Next{Mode: ModeExclusive, Arcs: []Arc{{Step: "a", When: "{{ x }}", Set: map[string]any{"ctx.k": "v"}, Line: 11}, {Step: "b", Line: 14}}}},
		{"router inclusive", "next:\n      spec: {mode: inclusive}\n      arcs: [{step: a}, {step: b}]",
			&Next{Mode: ModeInclusive, Arcs: []Arc{{Step: "a", Line: 11}, {Step: "b", Line: 11}}}},
		{"single arc mapping", "next: {step: b, when: \"{{ y }}\"}", &Next{Mode: ModeExclusive, Arcs: []Arc{{Step: "b", When: "{{ y }}", Line: 9}}}},
		{"router without arcs", "next:\n      spec: {mode: exclusive}", &Next{Mode: ModeExclusive}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := doc("workflow:\n  - step: start\n    tool: {kind: noop}\n    " + tc.next + "\n" + tail)
			pb := mustParse(t, src)
			require.Equal(t, tc.want, pb.Step("start").Next)
		})
	}
}

func TestParseRefs(t *testing.T) {
	t.Parallel()
	pb := mustParse(t, doc(`workload:
  fetch: shadowed-by-step
workflow:
  - step: start
    tool:
      kind: python
      code: "{{ fetch.data }} {% for fetch2 in items %}{{ fetch2 }}{% endfor %}"
    next: fetch
  - step: fetch
    tool: {kind: http, url: "{{ workload.api }}/{{ start.id }}"}
    input: {x: "{{ range(3) | map('string') | join }}"}
    next:
      arcs:
        - step: fetch2
          when: "{{ fetch.more and iter.page < 3 }}"
          set: {ctx.page: "{{ ctx.page + 1 }}"}
  - step: fetch2
    loop: {in: "{{ start.items }}", iterator: it}
    set: {ctx.x: "{{ steps.fetch.result }}"}
    tool:
      - name: p
        kind: python
        input: {a: "{{ fetch.a }}", b: "{{ p.x }}", c: "{{ it }}"}
  - step: broken
    tool: {kind: noop, msg: "{{ start | }}"}
`))
	require.Equal(t, []string{"fetch"}, pb.Step("start").Refs)
	require.False(t, pb.Step("start").RefsAll)
	f := pb.Step("fetch")
	require.Equal(t, []string{"start"}, f.Refs) // fetch2 is only an arc target
	require.True(t, f.RefsSelf)
	f2 := pb.Step("fetch2")
	require.Equal(t, []string{"fetch", "start"}, f2.Refs)
	require.True(t, f2.RefsAll)
	require.True(t, pb.Step("broken").RefsAll)
	var msgs []string
	for _, w := range pb.Warnings {
		msgs = append(msgs, w.Step+": "+w.Msg)
	}
	require.Contains(t, strings.Join(msgs, "\n"), "broken: a template of this step does not compile")
	require.Contains(t, strings.Join(msgs, "\n"), `broken: step "broken" is not reachable from start`)
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	deep := "workload:\n  x: " + strings.Repeat("[", MaxDepth+2) + strings.Repeat("]", MaxDepth+2) + "\nworkflow: [{step: start, tool: {kind: noop}}]\n"
	bomb := `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: t}
workload:
  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
  d: [*c,*c,*c,*c,*c,*c,*c,*c,*c]
workflow: [{step: start, tool: {kind: noop}}]
`
	start := "  - step: start\n    tool: {kind: noop}\n"
	cases := []struct {
		name               string
		src                []byte
		line               int
		step, field, inMsg string
	}{
		{name: "invalid yaml", src: []byte("apiVersion: noetl.io/v2\nkind: Playbook\nworkflow:\n  - step: a\n   bad: [\n"), line: 3, inMsg: "invalid YAML"},
		{name: "tab indentation", src: []byte("apiVersion: x\n\tkind: y\n"), line: 2, inMsg: "invalid YAML"},
		{name: "alias bomb", src: []byte(bomb), line: 5, inMsg: "anchor &a is not allowed"},
		{name: "python tag", src: doc("workload:\n  x: !!python/object/apply:os.system [\"id\"]\nworkflow: [{step: start, tool: {kind: noop}}]\n"), line: 7, inMsg: "YAML tag !!python/object/apply:os.system is not allowed"},
		{name: "local tag", src: doc("workload:\n  x: !custom 1\nworkflow: [{step: start, tool: {kind: noop}}]\n"), line: 7, inMsg: "YAML tag !custom is not allowed"},
		{name: "binary tag", src: doc("workflow:\n  - step: start\n    tool: {kind: noop, x: !!binary aGk=}\n"), line: 8, inMsg: "YAML tag !!binary is not allowed"},
		{name: "too big", src: doc("workload:\n  x: \"" + strings.Repeat("a", MaxBytes) + "\"\n"), inMsg: "over the limit"},
		{name: "too deep", src: doc(deep), line: 7, inMsg: "deeper than 64"},
		{name: "empty", src: []byte("  \n# only a comment\n"), line: 1, inMsg: "empty"},
		{name: "not a mapping", src: []byte("- a\n- b\n"), line: 1, inMsg: "must be a YAML mapping"},
		{name: "two documents", src: doc("workflow: [{step: start, tool: {kind: noop}}]\n---\nfoo: 1\n"), line: 7, inMsg: "single YAML document"},
		{name: "duplicate key", src: doc("workload: {a: 1}\nworkload: {b: 2}\n"), line: 7, inMsg: `duplicate key "workload" (first at line 6)`},
		{name: "missing apiVersion", src: []byte("kind: Playbook\nmetadata: {name: t}\nworkflow: [{step: start, tool: {kind: noop}}]\n"), line: 1, field: "apiVersion", inMsg: "apiVersion is required"},
		{name: "bad apiVersion", src: []byte("apiVersion: noetl.io/v1\nkind: Playbook\nmetadata: {name: t}\nworkflow: [{step: start, tool: {kind: noop}}]\n"), line: 1, field: "apiVersion", inMsg: `unsupported apiVersion "noetl.io/v1"`},
		{name: "bad kind", src: []byte("apiVersion: noetl.io/v2\nkind: Credential\nmetadata: {name: t}\nworkflow: [{step: start, tool: {kind: noop}}]\n"), line: 2, field: "kind", inMsg: `unsupported kind "Credential"`},
		{name: "missing name", src: []byte("apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {path: x}\nworkflow: [{step: start, tool: {kind: noop}}]\n"), line: 3, field: "metadata.name", inMsg: "required"},
		{name: "no workflow", src: doc("workload: {}\n"), line: 1, field: "workflow", inMsg: "at least one step"},
		{name: "empty workflow", src: doc("workflow: []\n"), line: 6, field: "workflow", inMsg: "at least one step"},
		{name: "duplicate step", src: doc("workflow:\n" + start + "  - step: a\n    tool: {kind: noop}\n  - step: a\n    tool: {kind: noop}\n"), line: 11, step: "a", field: "step", inMsg: `duplicate step name "a" (first defined at line 9)`},
		{name: "missing start", src: doc("workflow:\n  - step: begin\n    tool: {kind: noop}\n"), line: 6, field: "workflow", inMsg: `no step named "start"`},
		{name: "unknown tool kind", src: doc("workflow:\n" + start + "  - step: fetch\n    tool:\n      kind: htp\n"), line: 11, step: "fetch", field: "tool.kind", inMsg: `unknown tool kind "htp"`},
		{name: "unknown kind in pipeline", src: doc("workflow:\n  - step: start\n    tool:\n      - {name: a, kind: noop}\n      - {name: b, kind: bogus}\n"), line: 10, step: "start", field: "tool[1].kind", inMsg: `unknown tool kind "bogus"`},
		{name: "tool without kind", src: doc("workflow:\n  - step: start\n    tool: {code: x}\n"), line: 8, step: "start", field: "tool.kind", inMsg: "tool kind is required"},
		{name: "duplicate pipeline label", src: doc("workflow:\n  - step: start\n    tool:\n      - {name: a, kind: noop}\n      - {name: a, kind: noop}\n"), line: 10, step: "start", field: "tool[1].name", inMsg: "duplicate pipeline label"},
		{name: "bad arc target", src: doc("workflow:\n  - step: start\n    tool: {kind: noop}\n    next:\n      arcs:\n        - step: nowhere\n"), line: 11, step: "start", field: "next.arcs[0].step", inMsg: `arc target "nowhere" is not a step`},
		{name: "end must exist", src: doc("workflow:\n  - step: start\n    tool: {kind: noop}\n    next: end\n"), line: 9, step: "start", inMsg: `arc target "end"`},
		{name: "no tool no next", src: doc("workflow:\n  - step: start\n    desc: nothing\n"), line: 7, step: "start", inMsg: "must have a tool or a next"},
		{name: "step without name", src: doc("workflow:\n  - desc: x\n    tool: {kind: noop}\n"), line: 7, field: "workflow[0].step", inMsg: "step name is required"},
		{name: "bad next mode", src: doc("workflow:\n  - step: start\n    tool: {kind: noop}\n    next: {spec: {mode: random}, arcs: []}\n"), line: 9, step: "start", field: "next.spec.mode", inMsg: `unknown next mode "random"`},
		{name: "bad next type", src: doc("workflow:\n  - step: start\n    tool: {kind: noop}\n    next: {foo: bar}\n"), line: 9, step: "start", field: "next.foo", inMsg: "unknown next field"},
		{name: "loop without in", src: doc("workflow:\n  - step: start\n    tool: {kind: noop}\n    loop: {iterator: x}\n"), line: 9, step: "start", field: "loop.in", inMsg: "needs an in"},
		{name: "loop without iterator", src: doc("workflow:\n  - step: start\n    tool: {kind: noop}\n    loop: {in: [1]}\n"), line: 9, step: "start", field: "loop.iterator", inMsg: "needs an iterator"},
		{name: "loop bad mode", src: doc("workflow:\n  - step: start\n    tool: {kind: noop}\n    loop: {in: [1], iterator: x, spec: {mode: random}}\n"), line: 9, step: "start", field: "loop.spec.mode", inMsg: `unknown loop mode "random"`},
		{name: "loop negative max_in_flight", src: doc("workflow:\n  - step: start\n    tool: {kind: noop}\n    loop: {in: [1], iterator: x, spec: {max_in_flight: -1}}\n"), line: 9, step: "start", field: "loop.spec.max_in_flight", inMsg: "non-negative integer"},
		{name: "bad policy action", src: doc("workflow:\n  - step: start\n    tool:\n      kind: noop\n      spec:\n        policy:\n          rules:\n            - when: \"{{ x }}\"\n              then: {do: explode}\n"), line: 14, step: "start", field: "tool.spec.policy.rules[0].then.do", inMsg: `unknown action "explode"`},
		{name: "jump to unknown label", src: doc("workflow:\n  - step: start\n    tool:\n      - name: a\n        kind: noop\n        spec: {policy: {rules: [{else: {then: {do: jump, to: zz}}}]}}\n"), line: 9, step: "start", field: "tool[0].spec.policy.rules[0].then.to", inMsg: `jump target "zz"`},
		{name: "rule without when", src: doc("workflow:\n  - step: start\n    tool:\n      kind: noop\n      spec: {policy: {rules: [{then: {do: fail}}]}}\n"), line: 10, step: "start", field: "tool.spec.policy.rules[0]", inMsg: "needs a when or an else"},
		{name: "input not a mapping", src: doc("workflow:\n  - step: start\n    tool: {kind: noop}\n    input: [1, 2]\n"), line: 9, step: "start", field: "input", inMsg: "must be a mapping"},
		{name: "missing workbook task", src: doc("workflow:\n  - step: start\n    tool: {kind: workbook, name: nope}\n"), line: 7, step: "start", field: "tool.name", inMsg: `workbook task "nope" is not defined`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pb, err := Parse(tc.src)
			require.Nil(t, pb)
			e := firstError(t, err)
			require.Equal(t, tc.line, e.Line, "error: %v", err)
			require.Equal(t, tc.step, e.Step, "error: %v", err)
			if tc.field != "" {
				require.Equal(t, tc.field, e.Field, "error: %v", err)
			}
			require.Contains(t, e.Msg, tc.inMsg)
			if tc.line > 0 {
				require.Contains(t, err.Error(), "line ")
			}
			if tc.step != "" {
				require.Contains(t, err.Error(), `step "`+tc.step+`"`)
			}
		})
	}
}

func TestParseCollectsAllErrors(t *testing.T) {
	t.Parallel()
	_, err := Parse(doc(`workflow:
  - step: start
    tool: {kind: htp}
    next: [nowhere]
  - step: other
`))
	var list ErrorList
	require.True(t, errors.As(err, &list))
	require.Len(t, list, 3)
	require.Equal(t, "tool.kind", list[0].Field)
	require.Equal(t, "next.arcs[0].step", list[1].Field)
	require.Equal(t, "other", list[2].Step)
	require.Contains(t, err.Error(), "(and 2 more errors)")
	e := firstError(t, err)
	require.Same(t, list[0], e)
}

func TestErrorFormat(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  Error
		want string
	}{
		{Error{Line: 12, Column: 5, Step: "fetch", Field: "tool.kind", Msg: `unknown tool kind "htp"`}, `line 12, column 5: step "fetch": field "tool.kind": unknown tool kind "htp"`},
		{Error{Line: 3, Msg: "bad"}, "line 3: bad"},
		{Error{Step: "s", Msg: "bad"}, `step "s": bad`},
		{Error{Field: "f", Msg: "bad"}, `field "f": bad`},
		{Error{Msg: "bad"}, "bad"},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			require.Equal(t, tc.want, tc.err.Error())
		})
	}
	require.Equal(t, "no errors", ErrorList{}.Error())
}

func TestParseLeniency(t *testing.T) {
	t.Parallel()
	pb := mustParse(t, doc(`executor: {profile: auto}
vars: {a: 1}
keychain:
  - {name: k, kind: credential}
workbook:
  - name: ok
    tool: {kind: python, code: x}
  - name: bad
    tool: {kind: unknown_kind}
  - tool: {kind: python}
workflow:
  - step: start
    spec: {policy: {admit: {rules: [{when: "{{ x }}", then: {allow: true}}]}}}
    tool: {kind: system_info}
    next: end
  - step: end
`))
	require.Equal(t, []any{map[string]any{"name": "k", "kind": "credential"}}, pb.Keychain)
	require.Contains(t, pb.Workbook, "ok")
	require.NotContains(t, pb.Workbook, "bad")
	require.Len(t, pb.Warnings, 5)
	require.Contains(t, pb.Warnings[0].Msg, `unknown tool kind "unknown_kind"`)
	var msgs []string
	for _, w := range pb.Warnings[2:] {
		msgs = append(msgs, w.Msg)
	}
	require.Equal(t, []string{
		`"vars" is not read by this engine; it is ignored`,
		`"executor.profile" is not read by this engine; it is ignored`,
		`"spec.policy" is not read by this engine; it is ignored`,
	}, msgs)
	require.Equal(t, "system_info", pb.Step("start").Tool[0].Kind)
	require.Equal(t, map[string]any{"executor": map[string]any{"profile": "auto"}, "vars": map[string]any{"a": int64(1)}}, pb.Extra)
	require.Contains(t, pb.Step("start").Extra, "spec")
	require.Nil(t, pb.Step("end").Extra)
	require.Empty(t, pb.Step("end").Tool)
	require.False(t, KnownToolKind("rhai"))
	require.False(t, KnownToolKind("system_"))
}

func TestTooManyStepsAreRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: big}\nworkflow:\n")
	for i := 0; i <= MaxSteps; i++ {
		name := fmt.Sprintf("s%d", i)
		if i == 0 {
			name = "start"
		}
		fmt.Fprintf(&b, "  - {step: %s, tool: {kind: noop}}\n", name)
	}
	_, err := Parse([]byte(b.String()))
	require.Error(t, err)
	require.Contains(t, err.Error(), "exceed the limit")
}

func TestCoreSchemaTagsAreAllowed(t *testing.T) {
	t.Parallel()
	pb := mustParse(t, doc("workload:\n  a: !!str 123\n  b: !!int \"7\"\n  c: !!seq [1]\nworkflow: [{step: start, tool: {kind: noop}}]\n"))
	require.Equal(t, "123", pb.Workload["a"])
	require.EqualValues(t, 7, pb.Workload["b"])
}
