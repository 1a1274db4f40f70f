package playbook

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The keys this engine reads, by place; every other key registers with a warning saying
// it is ignored, so a playbook written for NoETL never loses a setting silently.
var (
	rootKeys     = []string{"apiVersion", "kind", "metadata", "workload", "keychain", "workbook", "workflow", "executor", "spec"}
	metadataKeys = []string{"name", "path", "version", "description"}
	stepKeys     = []string{"step", "desc", "tool", "input", "args", "loop", "set", "next", "when", "spec", "output"}
)

// ignoredKeys warns about each key of the document this engine does not act on: unknown
// keys at the root, of metadata and of steps; vars; executor settings other than
// executor.spec.policy.limits; spec settings other than timeout (root and step) and the
// tool's spec.policy; output hints other than a step's output.output_select; and the keys
// of each tool (a step's, a pipeline item's, a workbook task's) its kind does not read
// (ToolKeys; the keychain's entries are checked in keychain.go).
func (b *builder) ignoredKeys(root *yaml.Node) {
	warn := func(n *yaml.Node, step, format string, args ...any) {
		b.warnings = append(b.warnings, Warning{Line: n.Line, Step: step, Msg: fmt.Sprintf(format, args...)})
	}
	unknown := func(m *yaml.Node, step, where string, known []string) {
		if m == nil || m.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			k := m.Content[i]
			if !slices.Contains(known, k.Value) {
				warn(k, step, "%q is not read by this engine; it is ignored", where+k.Value)
			}
		}
	}
	unknown(root, "", "", rootKeys)
	unknown(value(root, "metadata"), "", "metadata.", metadataKeys)
	exec := value(root, "executor")
	unknown(exec, "", "executor.", []string{"spec"})
	unknown(value(exec, "spec"), "", "executor.spec.", []string{"policy"})
	unknown(value(value(exec, "spec"), "policy"), "", "executor.spec.policy.", []string{"limits"})
	unknown(value(root, "spec"), "", "spec.", []string{"timeout"})
	taskKinds := map[string]string{}
	for _, task := range workbookTools(value(root, "workbook")) {
		if k := value(task.tool, "kind"); k != nil {
			taskKinds[task.name] = k.Value
		}
	}
	// toolKeys warns about the keys of tool mapping t that its kind does not read; a
	// step's tools have warnings of their own for output (and a single tool's set).
	toolKeys := func(t *yaml.Node, step, where string, skipOutput bool) {
		kind := value(t, "kind")
		if kind == nil || kind.Kind != yaml.ScalarNode || !KnownToolKind(kind.Value) {
			return // Parse refuses it
		}
		known := ToolKeys(kind.Value)
		if kind.Value == "workbook" {
			// The call's keys override the named task's configuration: they are read
			// when the task's kind reads them.
			task := value(t, "name") // a pipeline item's name is its label
			if task == nil || isPipelineItem(where) {
				task = value(t, "task")
			}
			if task == nil || taskKinds[task.Value] == "" {
				return // no such task (Parse or the orchestrator says so), or a template
			}
			known = slices.Concat(known, ToolKeys(taskKinds[task.Value]))
		}
		for i := 0; i+1 < len(t.Content); i += 2 {
			k := t.Content[i]
			if (skipOutput && k.Value == "output") || slices.Contains(known, k.Value) {
				continue
			}
			warn(k, step, "%s %q key %q is not read by this engine; it is ignored", where, kind.Value, k.Value)
		}
	}
	for _, task := range workbookTools(value(root, "workbook")) {
		toolKeys(task.tool, "", fmt.Sprintf("workbook task %q: tool", task.name), false)
	}

	wf := value(root, "workflow")
	if wf == nil || wf.Kind != yaml.SequenceNode {
		return
	}
	for _, st := range wf.Content {
		if st.Kind != yaml.MappingNode {
			continue
		}
		name := ""
		if v := value(st, "step"); v != nil {
			name = v.Value
		}
		unknown(st, name, "", stepKeys)
		unknown(value(st, "spec"), name, "spec.", []string{"timeout"})
		unknown(value(st, "output"), name, "output.", []string{"output_select"})
		tools := []*yaml.Node{value(st, "tool")}
		if t := tools[0]; t != nil && t.Kind == yaml.SequenceNode {
			tools = t.Content
		}
		for i, t := range tools {
			if t == nil || t.Kind != yaml.MappingNode {
				continue
			}
			where := "tool."
			if len(tools) > 1 || value(st, "tool").Kind == yaml.SequenceNode {
				where = fmt.Sprintf("tool[%d].", i)
			}
			toolKeys(t, name, strings.TrimSuffix(where, "."), true)
			unknown(value(t, "spec"), name, where+"spec.", []string{"policy"})
			if k, v := lookup(t, "output"); !isNull(v) {
				warn(k, name, "%soutput: storage hints of a tool are ignored (a step's output.output_select is read)", where)
			}
			if k, v := lookup(t, "set"); !isNull(v) && !strings.HasPrefix(where, "tool[") {
				warn(k, name, "tool.set: only the items of a pipeline carry set; use the step's set")
			}
		}
	}
}

// workbookTask is a workbook task's name and tool mapping.
type workbookTask struct {
	name string
	tool *yaml.Node
}

// workbookTools returns the tool mappings of the workbook's tasks: each task's tool, or
// the task itself when it has no tool key (the legacy form, a task that is its tool).
func workbookTools(n *yaml.Node) []workbookTask {
	var out []workbookTask
	add := func(name string, task *yaml.Node) {
		if task.Kind != yaml.MappingNode {
			return
		}
		t := value(task, "tool")
		if t == nil {
			t = task
		}
		if t.Kind == yaml.MappingNode {
			out = append(out, workbookTask{name, t})
		}
	}
	switch {
	case n == nil:
	case n.Kind == yaml.SequenceNode:
		for _, task := range n.Content {
			name := ""
			if v := value(task, "name"); v != nil {
				name = v.Value
			}
			add(name, task)
		}
	case n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			add(n.Content[i].Value, n.Content[i+1])
		}
	}
	return out
}

// isPipelineItem reports whether where (tool, tool[i], workbook task ...) names a pipeline
// item, whose name is its label.
func isPipelineItem(where string) bool { return strings.HasPrefix(where, "tool[") }
