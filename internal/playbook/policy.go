package playbook

import (
	"errors"

	"go.yaml.in/yaml/v3"
)

// ParsePolicy parses a tool's spec.policy object given as JSON (or YAML) text, as a worker
// receives it inside a command's tool configuration. It returns nil for an empty policy.
func ParsePolicy(src []byte) (*Policy, error) {
	if len(src) > MaxBytes {
		return nil, errors.New("policy too large")
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	n := &doc
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	b := &builder{}
	p := b.policy(value(n, "rules"), "", "spec.policy.rules")
	if len(b.errs) > 0 {
		return nil, b.errs
	}
	return p, nil
}
