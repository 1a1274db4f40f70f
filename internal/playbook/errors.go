package playbook

import (
	"fmt"
	"strings"
)

// Error is one parse or validation error. It names the position and, where
// there is one, the step and the field it is about.
type Error struct {
	// Line is the 1-based line, 0 when unknown.
	Line int
	// Column is the 1-based column, 0 when unknown.
	Column int
	// Step is the name of the step the error is about, if any.
	Step string
	// Field is the dotted path of the field the error is about, if any.
	Field string
	// Msg says what is wrong.
	Msg string
}

// Error formats the error as
// `line 12, column 5: step "fetch": field "tool.kind": unknown tool kind "htp"`,
// leaving out the parts that are empty.
func (e *Error) Error() string {
	var b strings.Builder
	sep := func() {
		if b.Len() > 0 {
			b.WriteString(": ")
		}
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ", column %d", e.Column)
		}
	}
	if e.Step != "" {
		sep()
		fmt.Fprintf(&b, "step %q", e.Step)
	}
	if e.Field != "" {
		sep()
		fmt.Fprintf(&b, "field %q", e.Field)
	}
	sep()
	b.WriteString(e.Msg)
	return b.String()
}

// ErrorList is every error found in a playbook, in document order. Parse
// returns one when the playbook is invalid; errors.As on it yields the first
// *Error.
type ErrorList []*Error

// Error reports the first error and how many more there are.
func (l ErrorList) Error() string {
	switch len(l) {
	case 0:
		return "no errors"
	case 1:
		return l[0].Error()
	default:
		return fmt.Sprintf("%s (and %d more errors)", l[0].Error(), len(l)-1)
	}
}

// Unwrap returns the errors of the list, so errors.As finds the first *Error.
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}
