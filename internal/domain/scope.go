package domain

import (
	"bytes"
	"encoding/json"
	"strings"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// StepResult is a step's result as carried in a render scope: inline JSON or a reference.
type StepResult struct {
	Status string          `json:"status,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Ref    *RefView        `json:"ref,omitempty"`
}

// RefView is the JSON form of a ResultRef inside a render scope.
type RefView struct {
	URI         string          `json:"uri"`
	Size        int64           `json:"size"`
	ContentType string          `json:"content_type"`
	SHA256      string          `json:"sha256"`
	RowCount    int64           `json:"row_count,omitempty"`
	Extracted   json.RawMessage `json:"extracted,omitempty"`
}

// RefViewOf converts a ResultRef.
func RefViewOf(r *eventv1.ResultRef) *RefView {
	if r == nil {
		return nil
	}
	return &RefView{URI: r.GetUri(), Size: r.GetSize(), ContentType: r.GetContentType(), SHA256: r.GetSha256(), RowCount: r.GetRowCount(), Extracted: r.GetExtractedJson()}
}

// ResultRef converts a RefView back to a ResultRef.
func (v *RefView) ResultRef() *eventv1.ResultRef {
	if v == nil {
		return nil
	}
	return &eventv1.ResultRef{Uri: v.URI, Size: v.Size, ContentType: v.ContentType, Sha256: v.SHA256, RowCount: v.RowCount, ExtractedJson: v.Extracted}
}

// Scope is everything a template of one step may see, in a compact form that travels in a
// command's context_json. Vars expands it into template variables.
type Scope struct {
	ExecutionID string                `json:"execution_id"`
	Workload    map[string]any        `json:"workload"`
	Ctx         map[string]any        `json:"ctx"`
	Steps       map[string]StepResult `json:"steps,omitempty"`
	// Iter is the loop iteration scope: the iterator variable, _index, _total and any
	// iter.* values; nil outside loops.
	Iter map[string]any `json:"iter,omitempty"`
	// Iterator is the loop's iterator variable name, bound at top level too.
	Iterator string `json:"iterator,omitempty"`
	// Variables are the execution's variables (VarsJSON), bound as vars.
	Variables json.RawMessage `json:"vars,omitempty"`
}

// Vars returns the template variables of the scope: workload keys at top level, then ctx
// keys (ctx is also flat, as in NoETL), then each step's unwrapped result under its name,
// then the reserved names workload, ctx, steps and execution_id.
func (s *Scope) Vars() map[string]any {
	// Room for the reserved names set here and those a worker adds per tool (command_id,
	// keychain, _attempt, _task, output, result, _prev), so the map is not grown twice.
	vars := make(map[string]any, len(s.Workload)+len(s.Ctx)+len(s.Steps)+varsReserved)
	for k, v := range s.Workload {
		vars[k] = v
	}
	for k, v := range s.Ctx {
		vars[k] = v
	}
	steps := make(map[string]any, len(s.Steps))
	for name, r := range s.Steps {
		v := r.Value()
		vars[name] = v
		steps[name] = map[string]any{"status": r.Status, "result": v}
	}
	workload := s.Workload
	if workload == nil {
		workload = map[string]any{}
	}
	ctx := s.Ctx
	if ctx == nil {
		ctx = map[string]any{}
	}
	vars["workload"] = workload
	vars["ctx"] = ctx
	vars["steps"] = steps
	vars["execution_id"] = s.ExecutionID
	vars["vars"] = s.variables()
	vars["iter"] = map[string]any{}
	if s.Iter != nil {
		vars["iter"] = s.Iter
		if s.Iterator != "" {
			vars[s.Iterator] = s.Iter[s.Iterator]
		}
		vars["loop_index"] = s.Iter["_index"]
		vars["_index"] = s.Iter["_index"]
	}
	return vars
}

// varsReserved is how many names besides the scope's own Vars leaves room for.
const varsReserved = 16

// Value is the step's user data as templates see it: the result the tool returned, with a
// synthetic "data" alias when the result is an object without its own "data" key; for a
// result held by reference, its extracted summary plus _ref, _uri and _store.
func (r StepResult) Value() any {
	if r.Ref != nil {
		m := map[string]any{}
		if len(r.Ref.Extracted) > 0 {
			var ex any
			if DecodeJSON(r.Ref.Extracted, &ex) == nil {
				if em, ok := ex.(map[string]any); ok {
					m = em
				}
			}
		}
		m["_ref"] = r.Ref.URI
		m["_uri"] = r.Ref.URI
		m["_store"] = "resultstore"
		m["_size"] = r.Ref.Size
		return withDataAlias(m)
	}
	if len(r.Result) == 0 {
		return nil
	}
	var v any
	if err := DecodeJSON(r.Result, &v); err != nil {
		return nil
	}
	return withDataAlias(v)
}

func withDataAlias(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	if _, has := m["data"]; has {
		return m
	}
	alias := make(map[string]any, len(m))
	for k, x := range m {
		alias[k] = x
	}
	m["data"] = alias
	return m
}

// PoolFor returns the worker pool of a playbook path: "system" for system/ playbooks
// (written /system/ too, as the catalog takes it), "shared" otherwise.
func PoolFor(path string) string {
	if strings.HasPrefix(strings.TrimPrefix(path, "/"), "system/") {
		return "system"
	}
	return "shared"
}

// DecodeJSON decodes JSON keeping numbers as json.Number, so templates see whole numbers as
// integers (range(n), n + 1) and fractions as floats, as they were written.
func DecodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}
