package playbook

import (
	"fmt"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Limits are a playbook's own bounds on one execution, read from
// executor.spec.policy.limits. A zero field is not set: the operator's limit applies.
// A playbook may only lower the operator's limits, never raise them (see
// docs/language.md, "Limits of an execution").
type Limits struct {
	// MaxStepEntries bounds how many times one step may be entered in one execution
	// (executor.spec.policy.limits.max_step_entries). Loop iterations and retries are not
	// entries; re-entering a step through a back-edge is.
	MaxStepEntries int64
	// MaxEvents bounds the events of one execution
	// (executor.spec.policy.limits.max_events).
	MaxEvents int64
}

// Names of the fields of executor.spec.policy.limits.
const (
	LimitMaxStepEntries = "max_step_entries"
	LimitMaxEvents      = "max_events"
)

// LimitsField is the dotted path of the playbook's limits.
const LimitsField = "executor.spec.policy.limits"

// checkCycles reads executor.spec.policy.limits into pb.Limits (errors name the field)
// and warns about every cycle of steps an execution can enter and never leave.
func (b *builder) checkCycles(root *yaml.Node, pb *Playbook) {
	if pb == nil {
		return
	}
	b.limits(root, pb)
	for _, c := range closedCycles(pb) {
		names := make([]string, len(c))
		for i, s := range c {
			names[i] = fmt.Sprintf("%q", s.Name)
		}
		b.warnings = append(b.warnings, Warning{Line: c[0].Line, Step: c[0].Name, Msg: fmt.Sprintf(
			"cycle with no exit condition: steps %s route only to each other and no arc between them has a when, so an execution that enters them runs until one of them reaches its limit of entries (%s)",
			strings.Join(names, ", "), LimitMaxStepEntries)})
	}
}

// limits parses executor.spec.policy.limits. The keys above it are NoETL's executor
// model, kept and otherwise ignored; only limits is read, and only when every key on the
// way to it is a mapping.
func (b *builder) limits(root *yaml.Node, pb *Playbook) {
	policy := value(value(value(root, "executor"), "spec"), "policy")
	k, n := lookup(policy, "limits")
	if k == nil || isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		b.errorf(n, "", LimitsField, "must be a mapping, not %s", kindName(n))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, v := n.Content[i], n.Content[i+1]
		field := LimitsField + "." + key.Value
		var dst *int64
		switch key.Value {
		case LimitMaxStepEntries:
			dst = &pb.Limits.MaxStepEntries
		case LimitMaxEvents:
			dst = &pb.Limits.MaxEvents
		default:
			b.warnings = append(b.warnings, Warning{Line: key.Line, Msg: fmt.Sprintf("field %q: unknown limit %q is ignored (known: %s, %s)", field, key.Value, LimitMaxStepEntries, LimitMaxEvents)})
			continue
		}
		if x, ok := positiveInt(v); ok {
			*dst = x
		} else {
			b.errorf(v, "", field, "must be a positive integer, not %s", describeScalar(v))
		}
	}
}

// positiveInt reads a YAML integer of at least 1.
func positiveInt(n *yaml.Node) (int64, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, false
	}
	x, ok := scalarValue(n).(int64)
	return x, ok && x >= 1
}

// describeScalar names a value in an error: a scalar as written, anything else by kind.
func describeScalar(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode && !isNull(n) {
		return fmt.Sprintf("%q", n.Value)
	}
	return kindName(n)
}

// closedCycles returns the cycles of steps reachable from start that an execution which
// enters them cannot leave, each as its steps in document order, the cycles ordered by
// their first step. A cycle is a strongly connected set of steps (two or more, or one step
// with an arc to itself); it is closed when no arc of its steps leads out of it, no such
// arc has a when, and none of its steps has a when guard. An arc of an exclusive next
// after an arc without a when can never fire and does not count.
func closedCycles(pb *Playbook) [][]*Step {
	order := map[string]int{}
	for i, s := range pb.Steps {
		order[s.Name] = i
	}
	// arcs are the arcs that can fire, by step.
	arcs := make(map[string][]Arc, len(pb.Steps))
	for _, s := range pb.Steps {
		if s.Next == nil {
			continue
		}
		for _, a := range s.Next.Arcs {
			if pb.index[a.Step] == nil {
				continue
			}
			arcs[s.Name] = append(arcs[s.Name], a)
			if a.When == "" && s.Next.Mode == ModeExclusive {
				break // the arcs after this one never fire
			}
		}
	}
	reach := map[string]bool{}
	if start := pb.index["start"]; start != nil {
		stack := []string{start.Name}
		reach[start.Name] = true
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, a := range arcs[n] {
				if !reach[a.Step] {
					reach[a.Step] = true
					stack = append(stack, a.Step)
				}
			}
		}
	}
	var out [][]*Step
	for _, comp := range components(pb.Steps, arcs) {
		in := map[string]bool{}
		for _, s := range comp {
			in[s.Name] = true
		}
		cycle, closed := len(comp) > 1, reach[comp[0].Name]
		for _, s := range comp {
			closed = closed && s.When == ""
			for _, a := range arcs[s.Name] {
				closed = closed && in[a.Step] && a.When == ""
				cycle = cycle || a.Step == s.Name
			}
		}
		if !cycle || !closed {
			continue
		}
		sort.Slice(comp, func(i, j int) bool { return order[comp[i].Name] < order[comp[j].Name] })
		out = append(out, comp)
	}
	sort.Slice(out, func(i, j int) bool { return order[out[i][0].Name] < order[out[j][0].Name] })
	return out
}

// components returns the strongly connected components of the step graph (Tarjan's
// algorithm, iterative so a long chain of steps cannot exhaust the stack).
func components(steps []*Step, arcs map[string][]Arc) [][]*Step {
	byName := make(map[string]*Step, len(steps))
	for _, s := range steps {
		byName[s.Name] = s
	}
	index := map[string]int{}
	low := map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var out [][]*Step
	next := 0
	type frame struct {
		name string
		arc  int
	}
	for _, root := range steps {
		if _, seen := index[root.Name]; seen {
			continue
		}
		call := []frame{{name: root.Name}}
		index[root.Name], low[root.Name] = next, next
		next++
		stack = append(stack, root.Name)
		onStack[root.Name] = true
		for len(call) > 0 {
			f := &call[len(call)-1]
			if f.arc < len(arcs[f.name]) {
				w := arcs[f.name][f.arc].Step
				f.arc++
				if _, seen := index[w]; !seen {
					index[w], low[w] = next, next
					next++
					stack = append(stack, w)
					onStack[w] = true
					call = append(call, frame{name: w})
				} else if onStack[w] {
					low[f.name] = min(low[f.name], index[w])
				}
				continue
			}
			v := f.name
			call = call[:len(call)-1]
			if len(call) > 0 {
				p := call[len(call)-1].name
				low[p] = min(low[p], low[v])
			}
			if low[v] != index[v] {
				continue
			}
			var comp []*Step
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp = append(comp, byName[w])
				if w == v {
					break
				}
			}
			out = append(out, comp)
		}
	}
	return out
}
