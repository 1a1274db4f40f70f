package execute

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// iterationContext is the context of iteration 7 of a loop over i with ctx.flag set.
const iterationContext = `{"execution_id":"x1","workload":{"n":2000,"greeting":"hi"},"ctx":{"flag":true},"iter":{"_index":7,"_total":2000,"i":7},"iterator":"i"}`

func iterationCommand(config, input string) *eventv1.Command {
	return &eventv1.Command{CommandId: "c1", ExecutionId: "x1", Tenant: "t", Step: "s", PlaybookPath: "p", Attempt: 1,
		Iteration:   &eventv1.Iteration{Index: 7},
		Tools:       []*eventv1.ToolCall{{Kind: "noop", ConfigJson: []byte(config)}},
		InputJson:   []byte(input),
		ContextJson: []byte(iterationContext)}
}

func completed(t *testing.T, evs []*eventv1.Event) *eventv1.Event {
	t.Helper()
	require.Len(t, evs, 1)
	require.Nil(t, evs[0].GetError(), "%v", evs[0].GetError())
	return evs[0]
}

// TestTemplatesSeeTheScope: whatever part of the command reads the scope (the tool's
// configuration, the step's input, a policy condition, a set), it sees the workload, ctx
// and the iteration.
func TestTemplatesSeeTheScope(t *testing.T) {
	ex := testExecutor()
	ex.Tools["noop"] = tools.Noop{}
	ex.Tools["input"] = inputTool{}
	cases := []struct {
		name, kind, config, input, want, payload string
	}{
		{"config", "noop", `{"result": {"i": "{{ i }}", "index": "{{ _index }}", "n": "{{ workload.n }}", "flag": "{{ flag }}"}}`, `null`, `{"i": 7, "index": 7, "n": 2000, "flag": true}`, ``},
		{"input", "input", `{}`, `{"who": "{{ greeting }} {{ iter.i }}"}`, `{"who": "hi 7"}`, ``},
		{"policy", "noop", `{"result": 1, "spec": {"policy": {"rules": [{"when": "{{ ctx.flag and i == 7 }}", "then": {"do": "continue", "set": {"ctx.seen": "constant"}}}]}}}`, `null`, `1`, `{"set": {"ctx": {"seen": "constant"}}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := iterationCommand(c.config, c.input)
			cmd.Tools[0].Kind = c.kind
			done := completed(t, ex.Execute(context.Background(), cmd))
			require.JSONEq(t, c.want, string(done.GetResultJson()))
			if c.payload != "" {
				require.JSONEq(t, c.payload, string(done.GetPayloadJson()))
			}
		})
	}
}

// inputTool returns the input it was given.
type inputTool struct{}

func (inputTool) Run(_ context.Context, c *tools.Call) (any, error) { return c.Input, nil }

// TestTemplateFreeCommandSkipsTheContext: a command none of whose values is a template
// runs without reading its context, so a context that does not even decode is no error
// (the orchestrator never sends one); the same command with a template reads it and
// fails on it.
func TestTemplateFreeCommandSkipsTheContext(t *testing.T) {
	ex := testExecutor()
	ex.Tools["noop"] = tools.Noop{}
	cmd := iterationCommand(`{"kind": "noop", "result": {"fixed": [1, "two"]}}`, `{"k": "v"}`)
	cmd.ContextJson = []byte(`not json`)
	done := completed(t, ex.Execute(context.Background(), cmd))
	require.JSONEq(t, `{"fixed": [1, "two"]}`, string(done.GetResultJson()))

	cmd = iterationCommand(`{"kind": "noop", "result": "{{ i }}"}`, `null`)
	cmd.ContextJson = []byte(`not json`)
	evs := ex.Execute(context.Background(), cmd)
	require.Len(t, evs, 1)
	require.Contains(t, evs[0].GetError().GetMessage(), "command context")

	cmd = iterationCommand(`{"kind": "noop", "result": 1}`, `{"k": "{{ i }}"}`) // a template in the input
	cmd.ContextJson = []byte(`not json`)
	evs = ex.Execute(context.Background(), cmd)
	require.Len(t, evs, 1)
	require.Contains(t, evs[0].GetError().GetMessage(), "command context")
}

// mutating changes everything its configuration holds, as a careless tool could.
type mutating struct{}

func (mutating) Run(_ context.Context, c *tools.Call) (any, error) {
	before := fmt.Sprint(c.Config["args"], c.Config["code"], c.Config["spec"])
	for _, k := range []string{"args", "code", "spec"} {
		if m, ok := c.Config[k].(map[string]any); ok {
			m["changed"] = true
		}
	}
	return before, nil
}

// TestPlansAreNotShared: a tool changing its configuration changes nothing the next call
// of the same configuration sees.
func TestPlansAreNotShared(t *testing.T) {
	ex := testExecutor()
	ex.Tools["mutating"] = mutating{}
	cmd := iterationCommand(`{"args": {"a": 1}, "code": {"src": "x"}, "spec": {"timeout": 5}}`, `null`)
	cmd.Tools[0].Kind = "mutating"
	var results []string
	for range 2 {
		results = append(results, string(completed(t, ex.Execute(context.Background(), cmd)).GetResultJson()))
	}
	require.Equal(t, `"map[a:1] map[src:x] map[timeout:5]"`, results[0])
	require.Equal(t, results[0], results[1])
	require.Equal(t, 1, ex.plans.len())
}

// TestPlanCacheFollowsTheConfiguration: a command of a new playbook version (another
// configuration for the same step) runs its own configuration, not a cached one, and the
// old and new configurations are cached apart.
func TestPlanCacheFollowsTheConfiguration(t *testing.T) {
	ex := testExecutor()
	ex.Tools["noop"] = tools.Noop{}
	for _, version := range []string{"v1", "v2", "v1"} {
		cmd := iterationCommand(`{"result": {"version": "`+version+`", "spec": "{{ i }}"}, "spec": {"policy": {"rules": [{"when": "{{ true }}", "then": {"do": "continue", "set": {"ctx.version": "`+version+`"}}}]}}}`, `null`)
		done := completed(t, ex.Execute(context.Background(), cmd))
		require.JSONEq(t, `{"version": "`+version+`", "spec": 7}`, string(done.GetResultJson()))
		require.JSONEq(t, `{"set": {"ctx": {"version": "`+version+`"}}}`, string(done.GetPayloadJson()))
	}
	require.Equal(t, 2, ex.plans.len())
}

// TestPlanCacheIsBounded: the cache keeps at most planEntries configurations, and at
// most planBytes of them; a configuration over maxPlanConfig is read per call, not kept,
// and still runs.
func TestPlanCacheIsBounded(t *testing.T) {
	var c planCache
	for i := range planEntries + 50 {
		p := c.plan(&eventv1.ToolCall{ConfigJson: fmt.Appendf(nil, `{"result": %d}`, i)})
		require.Equal(t, float64(i), p.cfg["result"])
	}
	require.Equal(t, planEntries, c.len())
	// The most recent ones are kept: the first one is read again.
	first := c.plan(&eventv1.ToolCall{ConfigJson: []byte(`{"result": 0}`)})
	require.Equal(t, float64(0), first.cfg["result"])

	var big planCache
	pad := strings.Repeat("x", maxPlanConfig/2)
	over := planBytes/len(pad) + 10
	for i := range over {
		big.plan(&eventv1.ToolCall{ConfigJson: fmt.Appendf(nil, `{"result": %d, "pad": %q}`, i, pad)})
	}
	big.mu.Lock()
	require.LessOrEqual(t, big.bytes, planBytes)
	require.Len(t, big.byJSON, big.lru.Len())
	big.mu.Unlock()
	require.Less(t, big.len(), over)

	var huge planCache
	p := huge.plan(&eventv1.ToolCall{ConfigJson: fmt.Appendf(nil, `{"pad": %q}`, strings.Repeat("y", maxPlanConfig))})
	require.Len(t, p.cfg["pad"], maxPlanConfig)
	require.Equal(t, 0, huge.len())
}

// TestBadToolConfigFailsItsCall: a configuration that does not decode fails its own
// call, after the tools before it ran, as before plans were cached.
func TestBadToolConfigFailsItsCall(t *testing.T) {
	ex := testExecutor()
	ex.Tools["noop"] = tools.Noop{}
	cmd := &eventv1.Command{CommandId: "c1", ExecutionId: "x1", Tenant: "t", Step: "s", PlaybookPath: "p", Tools: []*eventv1.ToolCall{
		{Kind: "noop", Label: "a", ConfigJson: []byte(`{"result": 1}`)},
		{Kind: "noop", Label: "b", ConfigJson: []byte(`{"result": `)},
	}}
	for range 2 { // the second run reads the cached plan
		evs := ex.Execute(context.Background(), cmd)
		require.Len(t, evs, 1)
		require.Equal(t, "step s: tool b (noop): tool config: unexpected end of JSON input", evs[0].GetError().GetMessage())
	}
}

// TestPartialScopeBindsWhatFullDoes: for the names a command's templates read, the
// variables of a scope decoded in part are those of the whole scope, whether the partial
// decoding applies or falls back to the whole.
func TestPartialScopeBindsWhatFullDoes(t *testing.T) {
	ex := testExecutor()
	loop := `{"execution_id":"x1","workload":{"n":2000,"greeting":"hi","i":"shadowed","workload":"shadowed"},"ctx":{"flag":true,"_index":"shadowed"},` +
		`"steps":{"a":{"status":"completed","result":{"k":1}}},"iter":{"_index":7,"_total":2000,"i":{"id":7}},"iterator":"i","vars":{"x":1.5}}`
	ctxIterator := `{"execution_id":"x1","workload":{"n":1},"ctx":{"flag":true},"iter":{"_index":0,"ctx":"item"},"iterator":"ctx"}`
	plain := `{"execution_id":"x1","workload":{"n":1,"_index":"flat"},"ctx":{"flag":true},"steps":{"a":{"status":"completed","result":2}}}`
	cases := []struct {
		context string
		names   []string
	}{
		{loop, []string{"i"}},
		{loop, []string{"_index", "loop_index", "iter"}},
		{loop, []string{"workload"}},
		{loop, []string{"ctx", "vars", "execution_id", "command_id"}},
		{loop, []string{"i", "workload", "ctx", "vars", "iter", "_attempt", "_task"}},
		{loop, []string{"greeting"}},        // a flat key: the whole scope
		{loop, []string{"i", "greeting"}},   // two unbound names: the whole scope
		{loop, []string{"a", "steps"}},      // step results: the whole scope
		{ctxIterator, []string{"ctx"}},      // the iterator variable shadows ctx
		{ctxIterator, []string{"workload"}}, // one part only
		{plain, []string{"workload", "ctx"}},
		{plain, []string{"_index"}}, // outside a loop _index is a flat key
		{plain, []string{"i"}},      // no iterator: a flat key (undefined)
		{`{"execution_id":"x1","workload":null,"ctx":null}`, []string{"workload", "ctx", "vars", "iter"}},
	}
	for _, c := range cases {
		cmd := iterationCommand(`{}`, `null`)
		cmd.ContextJson = []byte(c.context)
		full, err := ex.commandScope(context.Background(), cmd, c.names, true)
		require.NoError(t, err)
		part, err := ex.commandScope(context.Background(), cmd, c.names, false)
		require.NoError(t, err)
		for _, n := range c.names {
			fv, fok := full[n]
			pv, pok := part[n]
			require.Equal(t, fok, pok, "%s in %s", n, c.context)
			require.Equal(t, fv, pv, "%s in %s", n, c.context)
		}
	}
}

// TestPartialScopeDecodesOnlyWhatIsRead: a loop iteration reading only its item does not
// decode the workload or ctx (a part that does not decode is no error); reading the
// workload decodes it.
func TestPartialScopeDecodesOnlyWhatIsRead(t *testing.T) {
	ex := testExecutor()
	ex.Tools["noop"] = tools.Noop{}
	odd := `{"execution_id":"x1","workload":"not an object","ctx":["nor this"],"iter":{"_index":7,"i":7},"iterator":"i"}`
	cmd := iterationCommand(`{"result": {"item": "{{ i }}", "index": "{{ loop_index }}"}}`, `null`)
	cmd.ContextJson = []byte(odd)
	done := completed(t, ex.Execute(context.Background(), cmd))
	require.JSONEq(t, `{"item": 7, "index": 7}`, string(done.GetResultJson()))

	cmd = iterationCommand(`{"result": "{{ workload }}"}`, `null`)
	cmd.ContextJson = []byte(odd)
	evs := ex.Execute(context.Background(), cmd)
	require.Len(t, evs, 1)
	require.Contains(t, evs[0].GetError().GetMessage(), "command context: workload")
}
