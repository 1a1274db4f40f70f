package domain

import (
	"encoding/json"
	"errors"
	"fmt"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
)

// Bounds of execution variables (vars.<name> in templates). They travel in the render
// scope of every command, so they are small: checked when written, against the committed
// state.
const (
	// MaxVarName bounds a variable's name.
	MaxVarName = 64
	// MaxVarValueBytes bounds one value as JSON.
	MaxVarValueBytes = 16 << 10
	// MaxVars bounds how many variables an execution holds.
	MaxVars = 100
	// MaxVarsBytes bounds an execution's variables in all: names and values as JSON.
	MaxVarsBytes = 64 << 10
)

// VarTypes are the variable types NoETL records (var_type); the first is the default.
var VarTypes = []string{"user_defined", "step_result", "computed", "iterator_state"}

// ErrVarName is the error of a name that cannot be a variable's.
var ErrVarName = errors.New("must match [A-Za-z_][A-Za-z0-9_]* (at most 64 characters), to be read as vars.<name>")

// CheckVarName checks a variable name: an identifier, so that a template reads it as
// vars.<name>.
func CheckVarName(name string) error {
	if name == "" || len(name) > MaxVarName {
		return ErrVarName
	}
	for i := range len(name) {
		c := name[i]
		letter := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return ErrVarName
		}
	}
	return nil
}

// VarsPayload is the payload of vars.updated: clear drops every variable, then the names
// in Unset are dropped, then Set is written (a set name keeps its first create time).
type VarsPayload struct {
	Clear bool                `json:"clear,omitempty"`
	Unset []string            `json:"unset,omitempty"`
	Set   map[string]VarValue `json:"set,omitempty"`
}

// VarValue is one variable written by vars.updated.
type VarValue struct {
	Value      json.RawMessage `json:"value"`
	Type       string          `json:"type,omitempty"`
	SourceStep string          `json:"source_step,omitempty"`
}

// applyVars folds a vars.updated event into st.
func applyVars(st *sbv1.ExecutionState, ev *eventv1.Event) error {
	var p VarsPayload
	if err := json.Unmarshal(ev.GetPayloadJson(), &p); err != nil {
		return fmt.Errorf("vars.updated payload: %w", err)
	}
	if p.Clear {
		st.Vars = nil
	}
	for _, name := range p.Unset {
		delete(st.Vars, name)
	}
	if len(p.Set) > 0 && st.Vars == nil {
		st.Vars = make(map[string]*sbv1.Variable, len(p.Set))
	}
	for name, v := range p.Set {
		value := v.Value
		if len(value) == 0 {
			value = json.RawMessage("null")
		}
		created := ev.GetCommitTime()
		if old := st.Vars[name]; old != nil && old.GetCreateTime() != nil {
			created = old.GetCreateTime()
		}
		st.Vars[name] = &sbv1.Variable{ValueJson: value, Type: v.Type, SourceStep: v.SourceStep, CreateTime: created, UpdateTime: ev.GetCommitTime()}
	}
	return nil
}

// VarsJSON is the values of st's variables as one JSON object, the render scope's vars;
// nil when there are none. Keys are sorted, so equal states give equal bytes.
func VarsJSON(st *sbv1.ExecutionState) json.RawMessage {
	if len(st.GetVars()) == 0 {
		return nil
	}
	m := make(map[string]json.RawMessage, len(st.GetVars()))
	for name, v := range st.GetVars() {
		m[name] = v.GetValueJson()
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil // a value that is not JSON was never written (the orchestrator checks)
	}
	return b
}

// VarsBytes is the size st's variables count against MaxVarsBytes: names and values.
func VarsBytes(vars map[string]*sbv1.Variable) int {
	n := 0
	for name, v := range vars {
		n += len(name) + len(v.GetValueJson())
	}
	return n
}

// variables is the scope's execution variables as a template sees them: an empty map
// without any.
func (s *Scope) variables() map[string]any {
	m := map[string]any{}
	if len(s.Variables) > 0 {
		_ = DecodeJSON(s.Variables, &m)
	}
	return m
}
