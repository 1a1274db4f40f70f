package playbook

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/noetl/noetl/internal/playbook/template"
	"go.yaml.in/yaml/v3"
)

// maxErrors bounds the number of errors collected for one document.
const maxErrors = 100

// Accepted apiVersion values.
var apiVersions = []string{"noetl.io/v2", "noetl.io/v10"}

var policyActions = []string{DoContinue, DoRetry, DoFail, DoJump, DoBreak}

// Parse parses and validates a playbook document. Its input is bounded
// (MaxBytes, MaxDepth, no YAML anchors or aliases). On failure it returns an
// ErrorList holding every error found in document order; errors.As yields
// the first *Error.
func Parse(src []byte) (*Playbook, error) {
	root, yerr := decodeYAML(src)
	if yerr != nil {
		return nil, ErrorList{yerr}
	}
	b := &builder{}
	pb := b.playbook(root)
	if len(b.errs) > 0 {
		sort.SliceStable(b.errs, func(i, j int) bool { return b.errs[i].Line < b.errs[j].Line })
		return nil, b.errs
	}
	return pb, nil
}

// builder turns a checked YAML tree into a Playbook, collecting errors.
type builder struct {
	errs     ErrorList
	warnings []Warning
	lenient  bool // record errors as warnings (workbook tasks)
	// kc holds the keychain entries by name and kcOrder their names in document order
	// (keychain.go).
	kc      map[string]map[string]any
	kcOrder []string
}

func (b *builder) errorf(n *yaml.Node, step, field, format string, args ...any) {
	e := &Error{Step: step, Field: field, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	if b.lenient {
		msg := e.Msg
		if field != "" {
			msg = fmt.Sprintf("field %q: %s", field, msg)
		}
		b.warnings = append(b.warnings, Warning{Line: e.Line, Step: step, Msg: msg})
		return
	}
	if len(b.errs) < maxErrors {
		b.errs = append(b.errs, e)
	}
}

// str returns the text of a scalar node; ok is false (and an error is
// recorded) for a mapping or a list. A null yields "".
func (b *builder) str(n *yaml.Node, step, field string) (string, bool) {
	if isNull(n) {
		return "", true
	}
	if n.Kind != yaml.ScalarNode {
		b.errorf(n, step, field, "must be a string, not %s", kindName(n))
		return "", false
	}
	return n.Value, true
}

// mapping converts an optional mapping node; null yields nil.
func (b *builder) mapping(n *yaml.Node, step, field string) map[string]any {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		b.errorf(n, step, field, "must be a mapping, not %s", kindName(n))
		return nil
	}
	return toValue(n).(map[string]any)
}

func (b *builder) playbook(root *yaml.Node) *Playbook {
	if root.Kind != yaml.MappingNode {
		b.errorf(root, "", "", "playbook must be a YAML mapping, not %s", kindName(root))
		return nil
	}
	pb := &Playbook{Workbook: map[string]*Tool{}, index: map[string]*Step{}}

	if _, v := lookup(root, "apiVersion"); isNull(v) {
		b.errorf(root, "", "apiVersion", "apiVersion is required (one of %s)", strings.Join(apiVersions, ", "))
	} else if s, ok := b.str(v, "", "apiVersion"); ok {
		pb.APIVersion = s
		if !slices.Contains(apiVersions, s) {
			b.errorf(v, "", "apiVersion", "unsupported apiVersion %q (want one of %s)", s, strings.Join(apiVersions, ", "))
		}
	}
	if v := value(root, "kind"); isNull(v) {
		b.errorf(root, "", "kind", "kind is required (Playbook)")
	} else if s, ok := b.str(v, "", "kind"); ok {
		pb.Kind = s
		if s != "Playbook" {
			b.errorf(v, "", "kind", "unsupported kind %q (want Playbook)", s)
		}
	}
	b.metadata(root, pb)
	pb.Workload = b.mapping(value(root, "workload"), "", "workload")
	b.keychain(value(root, "keychain"), pb) // keychain.go
	b.workbook(value(root, "workbook"), pb)
	b.workflow(root, pb)
	b.stepKeychains(pb) // keychain.go
	b.ignoredKeys(root) // ignored.go
	pb.Extra = extra(root, "apiVersion", "kind", "metadata", "workload", "keychain", "workbook", "workflow")
	b.validate(pb)
	b.checkCycles(root, pb)     // cycles.go: executor.spec.policy.limits, cycles with no exit
	b.playbookTimeout(root, pb) // timeout.go: spec.timeout of the whole execution
	if len(b.errs) > 0 {
		return nil
	}
	pb.Warnings = b.warnings
	return pb
}

func (b *builder) metadata(root *yaml.Node, pb *Playbook) {
	k, md := lookup(root, "metadata")
	if isNull(md) {
		n := root
		if k != nil {
			n = k
		}
		b.errorf(n, "", "metadata", "metadata with a name is required")
		return
	}
	if md.Kind != yaml.MappingNode {
		b.errorf(md, "", "metadata", "must be a mapping, not %s", kindName(md))
		return
	}
	fields := []struct {
		key string
		dst *string
	}{
		{"name", &pb.Metadata.Name},
		{"path", &pb.Metadata.Path},
		{"version", &pb.Metadata.Version},
		{"description", &pb.Metadata.Description},
	}
	for _, f := range fields {
		if s, ok := b.str(value(md, f.key), "", "metadata."+f.key); ok {
			*f.dst = s
		}
	}
	if pb.Metadata.Name == "" {
		b.errorf(md, "", "metadata.name", "metadata.name is required")
	}
}

// workbook parses the reusable tasks leniently: a malformed task is a
// warning, not an error.
func (b *builder) workbook(n *yaml.Node, pb *Playbook) {
	if isNull(n) {
		return
	}
	wb := &builder{lenient: true}
	add := func(name string, at, toolNode *yaml.Node) {
		if name == "" {
			wb.errorf(at, "", "workbook", "workbook task without a name is ignored")
			return
		}
		if _, dup := pb.Workbook[name]; dup {
			wb.errorf(at, "", "workbook", "duplicate workbook task %q is ignored", name)
			return
		}
		field := "workbook." + name + ".tool"
		if isNull(toolNode) || toolNode.Kind != yaml.MappingNode {
			wb.errorf(at, "", field, "workbook task %q has no tool mapping", name)
			return
		}
		if t := wb.tool(toolNode, "", field, name, true); t != nil {
			pb.Workbook[name] = t
		}
	}
	switch n.Kind {
	case yaml.SequenceNode:
		for _, item := range n.Content {
			if item.Kind != yaml.MappingNode {
				wb.errorf(item, "", "workbook", "workbook task must be a mapping")
				continue
			}
			name := ""
			if v := value(item, "name"); v != nil && v.Kind == yaml.ScalarNode {
				name = v.Value
			}
			t := value(item, "tool")
			if t == nil && value(item, "kind") != nil {
				t = item // legacy: the task mapping is the tool itself
			}
			add(name, item, t)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			item := n.Content[i+1]
			t := value(item, "tool")
			if t == nil {
				t = item
			}
			add(n.Content[i].Value, n.Content[i], t)
		}
	default:
		wb.errorf(n, "", "workbook", "workbook must be a list, not %s", kindName(n))
	}
	b.warnings = append(b.warnings, wb.warnings...)
}

func (b *builder) workflow(root *yaml.Node, pb *Playbook) {
	k, wf := lookup(root, "workflow")
	if isNull(wf) {
		n := root
		if k != nil {
			n = k
		}
		b.errorf(n, "", "workflow", "workflow with at least one step is required")
		return
	}
	if wf.Kind != yaml.SequenceNode {
		b.errorf(wf, "", "workflow", "must be a list of steps, not %s", kindName(wf))
		return
	}
	if len(wf.Content) == 0 {
		b.errorf(wf, "", "workflow", "workflow with at least one step is required")
		return
	}
	if len(wf.Content) > MaxSteps {
		b.errorf(wf, "", "workflow", "%d steps exceed the limit of %d", len(wf.Content), MaxSteps)
		return
	}
	unnamed := false
	for i, item := range wf.Content {
		s := b.step(item, i)
		if s == nil {
			unnamed = true
			continue
		}
		if first, dup := pb.index[s.Name]; dup {
			b.errorf(item, s.Name, "step", "duplicate step name %q (first defined at line %d)", s.Name, first.Line)
			continue
		}
		pb.index[s.Name] = s
		pb.Steps = append(pb.Steps, s)
	}
	if pb.index["start"] == nil && !unnamed {
		n := wf
		if k != nil {
			n = k
		}
		b.errorf(n, "", "workflow", "no step named \"start\" (the entry step)")
	}
}

func (b *builder) step(n *yaml.Node, i int) *Step {
	if n.Kind != yaml.MappingNode {
		b.errorf(n, "", fmt.Sprintf("workflow[%d]", i), "step must be a mapping, not %s", kindName(n))
		return nil
	}
	nameNode := value(n, "step")
	name, ok := b.str(nameNode, "", fmt.Sprintf("workflow[%d].step", i))
	if !ok {
		return nil
	}
	if name == "" {
		b.errorf(n, "", fmt.Sprintf("workflow[%d].step", i), "step name is required")
		return nil
	}
	s := &Step{Name: name, Line: n.Line}
	s.Desc, _ = b.str(value(n, "desc"), name, "desc")

	if t := value(n, "tool"); !isNull(t) {
		b.stepTool(t, s)
	}
	args := b.mapping(value(n, "args"), name, "args")
	input := b.mapping(value(n, "input"), name, "input")
	if args != nil || input != nil {
		s.Input = make(map[string]any, len(args)+len(input))
		for k, v := range args {
			s.Input[k] = v
		}
		for k, v := range input {
			s.Input[k] = v
		}
	}
	if l := value(n, "loop"); !isNull(l) {
		s.Loop = b.loop(l, name)
	}
	s.Set = b.mapping(value(n, "set"), name, "set")
	if nx := value(n, "next"); !isNull(nx) {
		s.Next = b.next(nx, name)
	}
	s.When, _ = b.str(value(n, "when"), name, "when")
	b.stepTimeout(n, s)
	if isNull(value(n, "tool")) && isNull(value(n, "next")) && name != "end" {
		b.errorf(n, name, "", "step must have a tool or a next")
	}
	b.refs(n, s)
	s.Extra = extra(n, "step", "desc", "tool", "input", "args", "loop", "set", "next", "when")
	return s
}

// extra returns the entries of mapping m whose keys are not listed.
func extra(m *yaml.Node, known ...string) map[string]any {
	var out map[string]any
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i].Value
		if slices.Contains(known, k) {
			continue
		}
		if out == nil {
			out = map[string]any{}
		}
		out[k] = toValue(m.Content[i+1])
	}
	return out
}

func (b *builder) stepTool(t *yaml.Node, s *Step) {
	switch t.Kind {
	case yaml.MappingNode:
		if tool := b.tool(t, s.Name, "tool", "", false); tool != nil {
			s.Tool = []*Tool{tool}
		}
	case yaml.SequenceNode:
		s.Pipeline = true
		if len(t.Content) == 0 {
			b.errorf(t, s.Name, "tool", "tool pipeline must have at least one item")
			return
		}
		labels := map[string]int{}
		for i, item := range t.Content {
			field := fmt.Sprintf("tool[%d]", i)
			if item.Kind != yaml.MappingNode {
				b.errorf(item, s.Name, field, "pipeline item must be a mapping, not %s", kindName(item))
				continue
			}
			label, ok := b.str(value(item, "name"), s.Name, field+".name")
			if !ok {
				continue
			}
			if label == "" {
				label = "task_" + strconv.Itoa(i)
			}
			if first, dup := labels[label]; dup {
				b.errorf(item, s.Name, field+".name", "duplicate pipeline label %q (first at line %d)", label, first)
				continue
			}
			labels[label] = item.Line
			if tool := b.tool(item, s.Name, field, label, true); tool != nil {
				s.Tool = append(s.Tool, tool)
			}
		}
		for i, tool := range s.Tool {
			if tool.Policy == nil {
				continue
			}
			for j, r := range tool.Policy.Rules {
				if r.Then.Do == DoJump && r.Then.To != "" {
					if _, ok := labels[r.Then.To]; !ok {
						b.errorf(t.Content[i], s.Name, fmt.Sprintf("tool[%d].spec.policy.rules[%d].then.to", i, j), "jump target %q is not a label of this pipeline", r.Then.To)
					}
				}
			}
		}
	default:
		b.errorf(t, s.Name, "tool", "must be a mapping or a list of tools, not %s", kindName(t))
	}
}

// tool parses one tool mapping. dropName removes the name key from Config
// (it is the label of a pipeline item or a workbook task).
func (b *builder) tool(n *yaml.Node, step, field, label string, dropName bool) *Tool {
	kn := value(n, "kind")
	if isNull(kn) {
		b.errorf(n, step, field+".kind", "tool kind is required")
		return nil
	}
	kind, ok := b.str(kn, step, field+".kind")
	if !ok {
		return nil
	}
	if !KnownToolKind(kind) {
		b.errorf(kn, step, field+".kind", "%s", unknownKindMsg(kind))
		return nil
	}
	t := &Tool{Kind: kind, Label: label, Config: map[string]any{}}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i].Value
		if key == "kind" || (dropName && key == "name") {
			continue
		}
		t.Config[key] = toValue(n.Content[i+1])
	}
	t.Policy = b.policy(value(value(value(n, "spec"), "policy"), "rules"), step, field+".spec.policy.rules")
	b.sqlTool(n, t, step, field)     // sql.go: SQL text with templates, literal-SQL digests
	b.natsTool(n, kind, step, field) // nats.go: the operation
	return t
}

func (b *builder) policy(n *yaml.Node, step, field string) *Policy {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		b.errorf(n, step, field, "must be a list of rules, not %s", kindName(n))
		return nil
	}
	p := &Policy{}
	for i, rn := range n.Content {
		rf := fmt.Sprintf("%s[%d]", field, i)
		if rn.Kind != yaml.MappingNode {
			b.errorf(rn, step, rf, "rule must be a mapping, not %s", kindName(rn))
			continue
		}
		var r Rule
		then := value(rn, "then")
		if ek, ev := lookup(rn, "else"); ek != nil {
			r.Else = true
			switch {
			case isNull(ev):
			case ev.Kind == yaml.MappingNode && value(ev, "then") != nil:
				then = value(ev, "then")
			case ev.Kind == yaml.MappingNode:
				then = ev // else: {do: ...}
			default:
				b.errorf(ev, step, rf+".else", "must be a mapping, not %s", kindName(ev))
				continue
			}
		}
		if w := value(rn, "when"); !isNull(w) {
			if r.Else {
				b.errorf(w, step, rf, "rule has both when and else")
				continue
			}
			r.When, _ = b.str(w, step, rf+".when")
		} else if !r.Else {
			b.errorf(rn, step, rf, "rule needs a when or an else")
			continue
		}
		if isNull(then) {
			b.errorf(rn, step, rf+".then", "rule needs a then")
			continue
		}
		a, ok := b.action(then, step, rf+".then")
		if !ok {
			continue
		}
		r.Then = a
		p.Rules = append(p.Rules, r)
	}
	return p
}

func (b *builder) action(n *yaml.Node, step, field string) (Action, bool) {
	var a Action
	if n.Kind != yaml.MappingNode {
		b.errorf(n, step, field, "must be a mapping, not %s", kindName(n))
		return a, false
	}
	ok := true
	a.Do = DoContinue
	if v := value(n, "do"); !isNull(v) {
		s, good := b.str(v, step, field+".do")
		if !good {
			return a, false
		}
		if !slices.Contains(policyActions, s) {
			b.errorf(v, step, field+".do", "unknown action %q (want one of %s)", s, strings.Join(policyActions, ", "))
			ok = false
		}
		a.Do = s
	}
	if v := value(n, "attempts"); !isNull(v) {
		i, good := b.nonNegInt(v, step, field+".attempts")
		ok = ok && good
		a.Attempts = i
	}
	if v := value(n, "backoff"); !isNull(v) {
		s, good := b.str(v, step, field+".backoff")
		ok = ok && good
		switch s {
		case "", "none", "linear", "exponential", "fixed", "constant":
		default:
			b.errorf(v, step, field+".backoff", "unknown backoff %q (want none, linear or exponential)", s)
			ok = false
		}
		a.Backoff = s
	}
	if v := value(n, "delay"); !isNull(v) {
		f, good := b.nonNegFloat(v, step, field+".delay")
		ok = ok && good
		a.Delay = f
	}
	if v := value(n, "to"); !isNull(v) {
		s, good := b.str(v, step, field+".to")
		ok = ok && good
		a.To = s
	}
	if a.Do == DoJump && a.To == "" && ok {
		b.errorf(n, step, field+".to", "a jump needs a to: label")
		ok = false
	}
	a.Set = b.mapping(value(n, "set"), step, field+".set")
	return a, ok
}

func (b *builder) nonNegInt(n *yaml.Node, step, field string) (int, bool) {
	if n.Kind == yaml.ScalarNode {
		if v, ok := scalarValue(n).(int64); ok && v >= 0 && v <= math.MaxInt32 {
			return int(v), true
		}
	}
	b.errorf(n, step, field, "must be a non-negative integer")
	return 0, false
}

func (b *builder) nonNegFloat(n *yaml.Node, step, field string) (float64, bool) {
	if n.Kind == yaml.ScalarNode {
		switch v := scalarValue(n).(type) {
		case int64:
			if v >= 0 {
				return float64(v), true
			}
		case float64:
			if v >= 0 {
				return v, true
			}
		}
	}
	b.errorf(n, step, field, "must be a non-negative number")
	return 0, false
}

func (b *builder) loop(n *yaml.Node, step string) *Loop {
	if n.Kind != yaml.MappingNode {
		b.errorf(n, step, "loop", "must be a mapping, not %s", kindName(n))
		return nil
	}
	l := &Loop{Mode: LoopSequential}
	spec := value(n, "spec")
	if !isNull(spec) && spec.Kind != yaml.MappingNode {
		b.errorf(spec, step, "loop.spec", "must be a mapping, not %s", kindName(spec))
		spec = nil
	}
	cursorNode := value(n, "cursor")
	k, in := lookup(n, "in")
	switch {
	case !isNull(cursorNode):
		if !isNull(in) {
			b.errorf(k, step, "loop.in", "in and cursor are mutually exclusive: a loop runs over a collection (in) or drains a cursor (cursor), not both")
		}
		l.Cursor = b.cursor(cursorNode, spec, step)
		l.Mode = LoopCursor
	case isNull(in):
		at := n
		if k != nil {
			at = k
		}
		b.errorf(at, step, "loop.in", "loop needs an in: collection")
	default:
		l.InValue = toValue(in)
		if s, ok := l.InValue.(string); ok {
			l.In = s
		}
	}
	if f := value(spec, "frame"); l.Cursor == nil && isNull(cursorNode) && !isNull(f) {
		b.warnings = append(b.warnings, Warning{Line: f.Line, Step: step, Msg: `field "loop.spec.frame" applies to cursor loops only and is ignored`})
	}
	if it := value(n, "iterator"); isNull(it) {
		b.errorf(n, step, "loop.iterator", "loop needs an iterator: name")
	} else if s, ok := b.str(it, step, "loop.iterator"); ok {
		if !isIdent(s) {
			b.errorf(it, step, "loop.iterator", "iterator %q is not a valid name", s)
		}
		l.Iterator = s
	}
	modeNode, modeField := value(spec, "mode"), "loop.spec.mode"
	if isNull(modeNode) {
		modeNode, modeField = value(n, "mode"), "loop.mode"
	}
	if !isNull(modeNode) {
		if s, ok := b.str(modeNode, step, modeField); ok {
			switch {
			case l.Cursor != nil && s != LoopCursor:
				b.errorf(modeNode, step, modeField, "a loop with cursor: runs in mode cursor, not %q", s)
			case s == LoopSequential, s == LoopParallel:
				l.Mode = s
			case s == LoopCursor:
				if l.Cursor == nil && !isNull(cursorNode) {
					break // the cursor itself is in error
				}
				if l.Cursor == nil {
					b.errorf(modeNode, step, modeField, "mode cursor needs a loop.cursor: {kind: postgres, auth, claim}")
				}
			default:
				b.errorf(modeNode, step, modeField, "unknown loop mode %q (want sequential, parallel or cursor)", s)
			}
		}
	}
	mifNode, mifField := value(spec, "max_in_flight"), "loop.spec.max_in_flight"
	if isNull(mifNode) {
		mifNode, mifField = value(n, "max_in_flight"), "loop.max_in_flight"
	}
	if !isNull(mifNode) {
		if mifNode.Kind == yaml.ScalarNode && mifNode.ShortTag() == "!!str" && strings.Contains(mifNode.Value, "{{") {
			l.MaxInFlightExpr = mifNode.Value
		} else if i, ok := b.nonNegInt(mifNode, step, mifField); ok {
			l.MaxInFlight = i
			b.checkCursorSlots(mifNode, l, step, mifField)
		}
	}
	return l
}

func (b *builder) next(n *yaml.Node, step string) *Next {
	switch n.Kind {
	case yaml.ScalarNode:
		return &Next{Mode: ModeExclusive, Arcs: []Arc{{Step: n.Value, Line: n.Line}}}
	case yaml.SequenceNode:
		nx := &Next{Mode: ModeInclusive}
		for i, item := range n.Content {
			if a, ok := b.arc(item, step, fmt.Sprintf("next[%d]", i)); ok {
				nx.Arcs = append(nx.Arcs, a)
			}
		}
		return nx
	case yaml.MappingNode:
		if value(n, "arcs") == nil && value(n, "step") != nil {
			// A single arc written as a mapping.
			a, ok := b.arc(n, step, "next")
			if !ok {
				return nil
			}
			return &Next{Mode: ModeExclusive, Arcs: []Arc{a}}
		}
		nx := &Next{Mode: ModeExclusive}
		for i := 0; i+1 < len(n.Content); i += 2 {
			switch k := n.Content[i]; k.Value {
			case "spec", "mode", "arcs":
			default:
				b.errorf(k, step, "next."+k.Value, "unknown next field %q (want spec and arcs)", k.Value)
			}
		}
		spec := value(n, "spec")
		if !isNull(spec) && spec.Kind != yaml.MappingNode {
			b.errorf(spec, step, "next.spec", "must be a mapping, not %s", kindName(spec))
			spec = nil
		}
		modeNode, modeField := value(spec, "mode"), "next.spec.mode"
		if isNull(modeNode) {
			modeNode, modeField = value(n, "mode"), "next.mode"
		}
		if !isNull(modeNode) {
			if s, ok := b.str(modeNode, step, modeField); ok {
				if s != ModeExclusive && s != ModeInclusive {
					b.errorf(modeNode, step, modeField, "unknown next mode %q (want exclusive or inclusive)", s)
				} else {
					nx.Mode = s
				}
			}
		}
		arcs := value(n, "arcs")
		switch {
		case isNull(arcs):
		case arcs.Kind == yaml.SequenceNode:
			for i, item := range arcs.Content {
				if a, ok := b.arc(item, step, fmt.Sprintf("next.arcs[%d]", i)); ok {
					nx.Arcs = append(nx.Arcs, a)
				}
			}
		default:
			b.errorf(arcs, step, "next.arcs", "must be a list of arcs, not %s", kindName(arcs))
		}
		return nx
	}
	b.errorf(n, step, "next", "must be a step name, a list or a mapping with arcs, not %s", kindName(n))
	return nil
}

func (b *builder) arc(n *yaml.Node, step, field string) (Arc, bool) {
	switch n.Kind {
	case yaml.ScalarNode:
		if isNull(n) || n.Value == "" {
			b.errorf(n, step, field, "arc needs a target step")
			return Arc{}, false
		}
		return Arc{Step: n.Value, Line: n.Line}, true
	case yaml.MappingNode:
		a := Arc{Line: n.Line}
		target := value(n, "step")
		s, ok := b.str(target, step, field+".step")
		if !ok {
			return a, false
		}
		if s == "" {
			b.errorf(n, step, field+".step", "arc needs a target step")
			return a, false
		}
		a.Step = s
		a.When, _ = b.str(value(n, "when"), step, field+".when")
		a.Set = b.mapping(value(n, "set"), step, field+".set")
		a.Args = b.mapping(value(n, "args"), step, field+".args")
		return a, true
	}
	b.errorf(n, step, field, "arc must be a step name or a mapping, not %s", kindName(n))
	return Arc{}, false
}

// refs computes the step-name references of the step's templates; names
// are intersected with the step names later, in validate.
func (b *builder) refs(n *yaml.Node, s *Step) {
	var names []string
	dynamic := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch n.Content[i].Value {
		case "step", "desc":
			continue
		}
		ns, dyn := template.NameRefs(toValue(n.Content[i+1]))
		names = append(names, ns...)
		dynamic = dynamic || dyn
	}
	s.Refs = names // provisional: every referenced name
	s.RefsAll = dynamic
	if dynamic {
		msg := "a template of this step does not compile; rendering it will fail"
		if err := template.FirstCompileError(toValue(n)); err != nil {
			msg += ": " + err.Error()
		}
		b.warnings = append(b.warnings, Warning{Line: s.Line, Step: s.Name, Msg: msg})
	}
}

func (b *builder) validate(pb *Playbook) {
	for _, s := range pb.Steps {
		// Refs: keep only names of steps.
		var refs []string
		for _, name := range s.Refs {
			switch {
			case name == "steps" || name == "_results":
				s.RefsAll = true
			case name == s.Name:
				s.RefsSelf = true
			case pb.index[name] != nil:
				refs = append(refs, name)
			}
		}
		sort.Strings(refs)
		s.Refs = slices.Compact(refs)

		if s.Next != nil {
			for i, a := range s.Next.Arcs {
				if pb.index[a.Step] == nil {
					b.errorf(&yaml.Node{Line: a.Line}, s.Name, fmt.Sprintf("next.arcs[%d].step", i), "arc target %q is not a step of this playbook", a.Step)
				}
			}
		}
		for i, t := range s.Tool {
			if t.Kind != "workbook" {
				continue
			}
			name, _ := t.Config["name"].(string)
			if name == "" {
				name, _ = t.Config["task"].(string)
			}
			field := "tool.name"
			if s.Pipeline {
				field = fmt.Sprintf("tool[%d].task", i)
			}
			switch {
			case name == "" && !s.Pipeline:
				b.errorf(&yaml.Node{Line: s.Line}, s.Name, field, "workbook tool needs the name of a workbook task")
			case name != "" && !strings.Contains(name, "{{") && pb.Workbook[name] == nil:
				b.errorf(&yaml.Node{Line: s.Line}, s.Name, field, "workbook task %q is not defined", name)
			}
		}
	}
	// Reachability from start.
	start := pb.index["start"]
	if start == nil {
		return
	}
	seen := map[string]bool{start.Name: true}
	queue := []*Step{start}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		if s.Next == nil {
			continue
		}
		for _, a := range s.Next.Arcs {
			if t := pb.index[a.Step]; t != nil && !seen[t.Name] {
				seen[t.Name] = true
				queue = append(queue, t)
			}
		}
	}
	for _, s := range pb.Steps {
		if !seen[s.Name] {
			b.warnings = append(b.warnings, Warning{Line: s.Line, Step: s.Name, Msg: fmt.Sprintf("step %q is not reachable from start", s.Name)})
		}
	}
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'):
		case i > 0 && r >= '0' && r <= '9':
		default:
			return false
		}
	}
	return true
}
