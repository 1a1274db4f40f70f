package decide

import (
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/durationpb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
)

// Commands: building a step's command, its render scope and its templates.

// stepCommand is what the commands of one step share within a decision, built once: a loop
// issues many iterations of a step per decision and they differ only in their iteration.
type stepCommand struct {
	tools        [][2]string // kind, label of each tool call
	configs      [][]byte    // each tool call's config JSON
	input        []byte
	scope        *domain.ScopeEncoder
	selectFields []string
}

// stepCommand returns ps's shared command parts, encoding them on first use in the decision.
func (d *decider) stepCommand(ps *playbook.Step) (*stepCommand, error) {
	if sc := d.commands[ps.Name]; sc != nil {
		return sc, nil
	}
	sc := &stepCommand{}
	for _, t := range ps.Tool {
		t, err := d.resolveWorkbook(ps, t)
		if err != nil {
			return nil, err
		}
		cfg, err := json.Marshal(t.Config)
		if err != nil {
			return nil, &Error{Step: ps.Name, Msg: "tool config is not JSON-encodable: " + err.Error()}
		}
		sc.tools = append(sc.tools, [2]string{t.Kind, t.Label})
		sc.configs = append(sc.configs, cfg)
	}
	if len(sc.tools) == 0 {
		sc.tools, sc.configs = [][2]string{{"noop", ""}}, [][]byte{[]byte("{}")}
	}
	input, err := json.Marshal(ps.Input)
	if err != nil {
		return nil, &Error{Step: ps.Name, Msg: "input is not JSON-encodable: " + err.Error()}
	}
	sc.input = input
	if sc.scope, err = domain.NewScopeEncoder(d.scope(ps)); err != nil {
		return nil, err
	}
	if out, ok := ps.Extra["output"].(map[string]any); ok {
		if sel, ok := out["output_select"].([]any); ok {
			for _, f := range sel {
				if fs, ok := f.(string); ok {
					sc.selectFields = append(sc.selectFields, fs)
				}
			}
		}
	}
	if d.commands == nil {
		d.commands = map[string]*stepCommand{}
	}
	d.commands[ps.Name] = sc
	return sc, nil
}

// command builds the command of a step: unrendered tool configs and input, plus the render
// scope restricted to the steps its templates reference and, in a loop, the iteration.
func (d *decider) command(ps *playbook.Step, id string, iter *eventv1.Iteration, attempt int32, iterScope map[string]any) (*eventv1.Command, error) {
	sc, err := d.stepCommand(ps)
	if err != nil {
		return nil, err
	}
	iterator := ""
	if iterScope != nil {
		iterator = ps.Loop.Iterator
	}
	ctxJSON, err := sc.scope.Encode(iterScope, iterator)
	if err != nil {
		return nil, &Error{Step: ps.Name, Msg: "the iteration scope is not JSON-encodable: " + err.Error()}
	}
	return d.commandWith(ps, sc, id, iter, attempt, ctxJSON), nil
}

// commandWith builds a command of ps from its shared parts and its encoded render scope.
func (d *decider) commandWith(ps *playbook.Step, sc *stepCommand, id string, iter *eventv1.Iteration, attempt int32, ctxJSON []byte) *eventv1.Command {
	tools := make([]*eventv1.ToolCall, len(sc.tools))
	for i, t := range sc.tools {
		tools[i] = &eventv1.ToolCall{Kind: t[0], Label: t[1], ConfigJson: sc.configs[i]}
	}
	return &eventv1.Command{
		OutputSelect:      sc.selectFields,
		CommandId:         id,
		ExecutionId:       d.st.GetExecutionId(),
		Tenant:            d.st.GetTenant(),
		Pool:              domain.PoolFor(d.c.Path),
		Step:              ps.Name,
		Tools:             tools,
		InputJson:         sc.input,
		ContextJson:       ctxJSON,
		Iteration:         iter,
		Attempt:           attempt,
		PlaybookPath:      d.c.Path,
		ParentExecutionId: d.st.GetParentExecutionId(),
		Timeout:           stepTimeout(ps),
		Deadline:          d.st.GetDeadline(), // the execution's: the worker stops the tool at it
		KeychainJson:      ps.Keychain,        // declarations only: the worker resolves them
	}
}

// stepTimeout is a command's bound of one attempt: the step's spec.timeout, unset without.
func stepTimeout(ps *playbook.Step) *durationpb.Duration {
	if ps.Timeout <= 0 {
		return nil
	}
	return durationpb.New(ps.Timeout)
}

// scope is the render scope of a step: workload, ctx and the results of the steps its
// templates reference (all finished steps when the references cannot be resolved).
func (d *decider) scope(ps *playbook.Step) *domain.Scope {
	sc := &domain.Scope{ExecutionID: d.st.GetExecutionId(), Workload: d.workload, Ctx: d.ctx, Steps: map[string]domain.StepResult{}}
	if !d.varsEncoded {
		d.varsJSON, d.varsEncoded = domain.VarsJSON(d.st), true
	}
	sc.Variables = d.varsJSON // execution variables, as vars.<name>
	add := func(name string) {
		s := d.st.GetSteps()[name]
		if s == nil || s.GetStatus() != eventv1.StepStatus_STEP_STATUS_COMPLETED {
			return
		}
		sc.Steps[name] = d.result(s)
	}
	if ps == nil {
		return sc
	}
	if ps.RefsAll {
		for name := range d.st.GetSteps() {
			add(name)
		}
		return sc
	}
	for _, name := range ps.Refs {
		add(name)
	}
	if ps.RefsSelf {
		add(ps.Name)
	}
	return sc
}

// vars builds template variables for templates evaluated in the orchestrator (conditions,
// set:, loop collections) of step ps.
func (d *decider) vars(ps *playbook.Step) map[string]any {
	return d.scope(ps).Vars()
}

func (d *decider) truthy(expr string, vars map[string]any, step, where string) (bool, error) {
	if strings.TrimSpace(expr) == "" {
		return true, nil
	}
	ok, err := d.c.Renderer.Truthy(expr, vars)
	if err != nil {
		return false, &Error{Step: step, Msg: fmt.Sprintf("%s: condition %q failed to evaluate: %v", where, expr, err)}
	}
	return ok, nil
}

// renderSet renders a set: block and strips the scope prefixes (ctx., step.); iter. keys
// are kept for loops.
func (d *decider) renderSet(set map[string]any, vars map[string]any, step, where string) (map[string]any, error) {
	out := make(map[string]any, len(set))
	for k, v := range set {
		rv, err := d.c.Renderer.Render(v, vars)
		if err != nil {
			return nil, &Error{Step: step, Msg: fmt.Sprintf("%s: %s: %v", where, k, err)}
		}
		key := strings.TrimPrefix(strings.TrimPrefix(k, "ctx."), "step.")
		out[key] = rv
	}
	return out, nil
}

// resolveWorkbook replaces a workbook tool by the named task's tool: the task's
// configuration with the calling tool's input (and args) merged over the task's input.
func (d *decider) resolveWorkbook(ps *playbook.Step, t *playbook.Tool) (*playbook.Tool, error) {
	if t.Kind != "workbook" {
		return t, nil
	}
	name, _ := t.Config["name"].(string)
	if name == "" {
		name, _ = t.Config["task"].(string)
	}
	task := d.c.Playbook.Workbook[name]
	if task == nil {
		return nil, &Error{Step: ps.Name, Msg: fmt.Sprintf("workbook task %q not found", name)}
	}
	if task.Kind == "workbook" {
		return nil, &Error{Step: ps.Name, Msg: fmt.Sprintf("workbook task %q refers to another workbook task", name)}
	}
	cfg := make(map[string]any, len(task.Config)+2)
	for k, v := range task.Config {
		cfg[k] = v
	}
	input := map[string]any{}
	for _, src := range []map[string]any{task.Config, t.Config} {
		for _, key := range []string{"input", "args"} {
			if m, ok := src[key].(map[string]any); ok {
				for k, v := range m {
					input[k] = v
				}
			}
		}
	}
	delete(cfg, "args")
	cfg["input"] = input
	for k, v := range t.Config {
		if k != "name" && k != "task" && k != "input" && k != "args" {
			cfg[k] = v
		}
	}
	return &playbook.Tool{Kind: task.Kind, Label: t.Label, Config: cfg, Policy: task.Policy}, nil
}
