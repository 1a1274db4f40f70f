package playbook

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Input limits applied by Parse before any semantic work.
const (
	// MaxBytes is the largest playbook document Parse accepts.
	MaxBytes = 1 << 20
	// MaxDepth is the deepest YAML nesting Parse accepts.
	MaxDepth = 64
	// MaxSteps is the largest number of steps a playbook may have.
	MaxSteps = 5000
)

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

// decodeYAML decodes exactly one YAML document into a node tree and checks
// the structural limits: no anchors or aliases, nesting at most MaxDepth,
// scalar mapping keys, no duplicate keys, no tags outside the core schema.
func decodeYAML(src []byte) (root *yaml.Node, err *Error) {
	defer func() {
		if r := recover(); r != nil {
			root, err = nil, &Error{Msg: fmt.Sprintf("invalid YAML: %v", r)}
		}
	}()
	if len(src) > MaxBytes {
		return nil, &Error{Msg: fmt.Sprintf("playbook is %d bytes, over the limit of %d bytes", len(src), MaxBytes)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var doc yaml.Node
	if e := dec.Decode(&doc); e != nil {
		if errors.Is(e, io.EOF) {
			return nil, &Error{Line: 1, Msg: "playbook is empty"}
		}
		return nil, yamlError(e)
	}
	var extra yaml.Node
	switch e := dec.Decode(&extra); {
	case e == nil:
		return nil, &Error{Line: extra.Line, Column: extra.Column, Msg: "playbook must be a single YAML document"}
	case !errors.Is(e, io.EOF):
		return nil, yamlError(e)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, &Error{Line: 1, Msg: "playbook is empty"}
	}
	root = doc.Content[0]
	if e := checkNode(root, 1); e != nil {
		return nil, e
	}
	return root, nil
}

func yamlError(e error) *Error {
	msg := e.Error()
	out := &Error{Msg: "invalid YAML: " + msg}
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		out.Line, _ = strconv.Atoi(m[1])
	}
	return out
}

// coreTags are the tags of the YAML core schema. Any other tag (!!python/..., !!binary,
// a local !custom) would be dropped silently by the decoder, so a playbook that needs one
// is refused instead of misread. !!merge keys are refused separately, with their own
// message.
var coreTags = map[string]bool{"!!str": true, "!!int": true, "!!float": true, "!!bool": true, "!!null": true, "!!seq": true, "!!map": true, "!!merge": true}

// shortTag writes a tag of the yaml.org namespace in its !! form.
func shortTag(tag string) string {
	if rest, ok := strings.CutPrefix(tag, "tag:yaml.org,2002:"); ok {
		return "!!" + rest
	}
	return tag
}

// checkNode enforces the structural limits on n and its children.
func checkNode(n *yaml.Node, depth int) *Error {
	if n.Kind == yaml.AliasNode {
		return &Error{Line: n.Line, Column: n.Column, Msg: fmt.Sprintf("YAML alias *%s is not allowed", n.Value)}
	}
	if n.Anchor != "" {
		return &Error{Line: n.Line, Column: n.Column, Msg: fmt.Sprintf("YAML anchor &%s is not allowed", n.Anchor)}
	}
	if depth > MaxDepth {
		return &Error{Line: n.Line, Column: n.Column, Msg: fmt.Sprintf("YAML nesting is deeper than %d levels", MaxDepth)}
	}
	if tag := shortTag(n.Tag); tag != "" && !coreTags[tag] {
		return &Error{Line: n.Line, Column: n.Column, Msg: fmt.Sprintf("YAML tag %s is not allowed: a playbook uses only the core schema (!!str, !!int, !!float, !!bool, !!null, !!seq, !!map)", tag)}
	}
	switch n.Kind {
	case yaml.MappingNode:
		seen := make(map[string]int, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind == yaml.AliasNode || k.Anchor != "" {
				if e := checkNode(k, depth+1); e != nil {
					return e
				}
			}
			if k.Kind != yaml.ScalarNode {
				return &Error{Line: k.Line, Column: k.Column, Msg: "mapping keys must be scalars"}
			}
			if k.Tag == "!!merge" {
				return &Error{Line: k.Line, Column: k.Column, Msg: "YAML merge keys (<<) are not allowed"}
			}
			if first, dup := seen[k.Value]; dup {
				return &Error{Line: k.Line, Column: k.Column, Msg: fmt.Sprintf("duplicate key %q (first at line %d)", k.Value, first)}
			}
			seen[k.Value] = k.Line
			if e := checkNode(n.Content[i+1], depth+1); e != nil {
				return e
			}
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			if e := checkNode(c, depth+1); e != nil {
				return e
			}
		}
	}
	return nil
}

// toValue converts a checked node tree to JSON-compatible Go values:
// map[string]any, []any, string, int64, float64, bool and nil.
func toValue(n *yaml.Node) any {
	if n == nil {
		return nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			m[n.Content[i].Value] = toValue(n.Content[i+1])
		}
		return m
	case yaml.SequenceNode:
		l := make([]any, len(n.Content))
		for i, c := range n.Content {
			l[i] = toValue(c)
		}
		return l
	case yaml.ScalarNode:
		return scalarValue(n)
	case yaml.DocumentNode:
		if len(n.Content) == 1 {
			return toValue(n.Content[0])
		}
	}
	return nil
}

func scalarValue(n *yaml.Node) any {
	switch n.ShortTag() {
	case "!!null":
		return nil
	case "!!bool":
		var b bool
		if n.Decode(&b) == nil {
			return b
		}
	case "!!int":
		var i int64
		if n.Decode(&i) == nil {
			return i
		}
		var f float64
		if n.Decode(&f) == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return f
		}
	case "!!float":
		var f float64
		if n.Decode(&f) == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return f
		}
	}
	return n.Value
}

// isNull reports whether n is absent or an explicit null.
func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// lookup returns the key and value nodes of key in mapping m.
func lookup(m *yaml.Node, key string) (k, v *yaml.Node) {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i], m.Content[i+1]
		}
	}
	return nil, nil
}

// value returns the value node of key in mapping m.
func value(m *yaml.Node, key string) *yaml.Node {
	_, v := lookup(m, key)
	return v
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "null"
		}
		return "a scalar"
	}
	return "an unsupported node"
}
