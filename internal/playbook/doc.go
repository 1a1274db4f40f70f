// Package playbook parses, validates and renders NoETL playbooks
// (apiVersion noetl.io/v2 and noetl.io/v10).
//
// Parse turns a YAML document into a *Playbook with bounded, strict parsing:
// the input size, YAML nesting depth and the use of anchors and aliases are
// limited before any semantic work is done, and every error names the line
// (and, where there is one, the step and the field) it is about.
//
// Renderer evaluates the Jinja2 templates that appear in playbook values.
// It uses gonja v2 for lexing and parsing and its own evaluator, which gives
// NoETL's semantics: chainable undefined values, typed results for strings
// that are exactly one expression, real errors (never a silent false) for
// syntax errors, unknown filters and type errors, and limits on output size
// and evaluation time.
package playbook
