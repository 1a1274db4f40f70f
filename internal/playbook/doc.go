// Package playbook parses and validates NoETL playbooks (apiVersion noetl.io/v2 and
// noetl.io/v10): the DSL.
//
// Parse turns a YAML document into a *Playbook with bounded, strict parsing:
// the input size, YAML nesting depth and the use of anchors and aliases are
// limited before any semantic work is done, and every error names the line
// (and, where there is one, the step and the field) it is about. Keys the
// engine does not read register with a warning (ignored.go; the keys each tool
// kind reads are ToolKeys).
//
// The templates inside playbook values are evaluated by package template
// (internal/playbook/template); Parse uses it only to analyse them: the names
// they reference, whether they compile, and SQL text they splice into.
package playbook
