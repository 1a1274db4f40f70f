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
// tool's spec.policy; and output hints other than a step's output.output_select (the
// keychain's entries are checked in keychain.go).
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
