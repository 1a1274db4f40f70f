package compat

import (
	"encoding/json"
	"net/http"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/internal/domain"
)

// variable is one execution variable in NoETL's shape (its access counters, which would
// make a read a write, are not kept).
type variable struct {
	Name       string          `json:"var_name"`
	Type       string          `json:"var_type"`
	Value      json.RawMessage `json:"var_value"`
	SourceStep *string         `json:"source_step"`
	CreatedAt  *string         `json:"created_at"`
	UpdatedAt  *string         `json:"updated_at"`
}

func variableOf(v *apiv1.ExecutionVariable) variable {
	out := variable{Name: v.GetName(), Type: v.GetType(), Value: jsonOf(v.GetValue()), CreatedAt: timeText(v.GetCreateTime()), UpdatedAt: timeText(v.GetUpdateTime())}
	if out.Value == nil {
		out.Value = json.RawMessage("null")
	}
	if s := v.GetSourceStep(); s != "" {
		out.SourceStep = &s
	}
	return out
}

// listVars handles GET /api/vars/{execution_id}: the execution's variables, by name.
func (h *handler) listVars(w http.ResponseWriter, r *http.Request) {
	resp, err := h.b.ListExecutionVariables(r.Context(), &apiv1.ListExecutionVariablesRequest{ExecutionId: r.PathValue("execution_id")})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := make([]variable, 0, len(resp.GetVariables()))
	for _, v := range resp.GetVariables() {
		out = append(out, variableOf(v))
	}
	writeJSON(w, http.StatusOK, out)
}

// getVar handles GET /api/vars/{execution_id}/{name}: one variable, 404 when not set.
func (h *handler) getVar(w http.ResponseWriter, r *http.Request) {
	id, name := r.PathValue("execution_id"), r.PathValue("name")
	if err := domain.CheckVarName(name); err != nil {
		h.writeError(w, r, status.Errorf(codes.InvalidArgument, "var_name: %v", err))
		return
	}
	resp, err := h.b.ListExecutionVariables(r.Context(), &apiv1.ListExecutionVariablesRequest{ExecutionId: id})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	for _, v := range resp.GetVariables() {
		if v.GetName() == name {
			writeJSON(w, http.StatusOK, variableOf(v))
			return
		}
	}
	h.writeError(w, r, status.Errorf(codes.NotFound, "vars.%s: not set in execution %s", name, id))
}

// setVars handles POST /api/vars/{execution_id} with NoETL's body, {variables: [{var_name,
// var_value, var_type?, source_step?}, ...]}, or {variables: {name: value, ...}, var_type?,
// source_step?}; and POST /api/vars/{execution_id}/{name} {var_value | value, var_type?,
// source_step?}. One request writes one type and source step (one vars.updated event).
func (h *handler) setVars(w http.ResponseWriter, r *http.Request) {
	id, one := r.PathValue("execution_id"), r.PathValue("name")
	var req struct {
		Variables  json.RawMessage `json:"variables"`
		VarType    string          `json:"var_type"`
		SourceStep string          `json:"source_step"`
		VarValue   json.RawMessage `json:"var_value"`
		Value      json.RawMessage `json:"value"`
	}
	if err := decode(r, &req, false); err != nil {
		h.writeError(w, r, err)
		return
	}
	set := &apiv1.SetExecutionVariablesRequest{ExecutionId: id, Variables: map[string]*structpb.Value{}, Type: req.VarType, SourceStep: req.SourceStep}
	put := func(field, name string, raw json.RawMessage) error {
		if len(raw) == 0 {
			return status.Errorf(codes.InvalidArgument, "%s: required", field)
		}
		if _, dup := set.Variables[name]; dup {
			return status.Errorf(codes.InvalidArgument, "%s: %q given twice", field, name)
		}
		v := &structpb.Value{}
		if err := protojson.Unmarshal(raw, v); err != nil {
			return status.Errorf(codes.InvalidArgument, "%s: not a JSON value", field)
		}
		set.Variables[name] = v
		return nil
	}
	var err error
	switch {
	case one != "":
		raw := req.VarValue
		if len(raw) == 0 {
			raw = req.Value
		}
		err = put("var_value", one, raw)
	case len(req.Variables) == 0 || string(req.Variables) == "null":
		err = status.Error(codes.InvalidArgument, "variables: required (a list of {var_name, var_value} or an object of name to value)")
	case req.Variables[0] == '[':
		err = variableList(req.Variables, set, put)
	case req.Variables[0] == '{':
		var m map[string]json.RawMessage
		if err = json.Unmarshal(req.Variables, &m); err == nil {
			for name, raw := range m {
				if err = put("variables."+name, name, raw); err != nil {
					break
				}
			}
		}
	default:
		err = status.Error(codes.InvalidArgument, "variables: must be a list of {var_name, var_value} or an object of name to value")
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	resp, err := h.b.SetExecutionVariables(r.Context(), set)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if one != "" {
		writeJSON(w, http.StatusOK, map[string]any{"execution_id": id, "var_name": one, "status": "ok"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"execution_id": id, "variables_set": resp.GetVariablesSet(), "status": "ok"})
}

// variableList reads NoETL's list form of variables into set: every item must give the
// same var_type and source_step, which the request then records.
func variableList(raw json.RawMessage, set *apiv1.SetExecutionVariablesRequest, put func(field, name string, raw json.RawMessage) error) error {
	var items []struct {
		Name       *string         `json:"var_name"`
		Value      json.RawMessage `json:"var_value"`
		Type       string          `json:"var_type"`
		SourceStep string          `json:"source_step"`
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		return status.Error(codes.InvalidArgument, "variables: must be a list of {var_name, var_value, var_type?, source_step?}")
	}
	for i, it := range items {
		field := "variables[" + strconv.Itoa(i) + "]"
		if it.Name == nil || *it.Name == "" {
			return status.Errorf(codes.InvalidArgument, "%s.var_name: required", field)
		}
		if set.Type == "" {
			set.Type = it.Type
		}
		if set.SourceStep == "" {
			set.SourceStep = it.SourceStep
		}
		if it.Type != "" && it.Type != set.Type {
			return status.Errorf(codes.InvalidArgument, "%s.var_type: one request sets variables of one type (here %q)", field, set.Type)
		}
		if it.SourceStep != "" && it.SourceStep != set.SourceStep {
			return status.Errorf(codes.InvalidArgument, "%s.source_step: one request sets variables of one source step (here %q)", field, set.SourceStep)
		}
		if _, dup := set.Variables[*it.Name]; dup {
			return status.Errorf(codes.InvalidArgument, "%s.var_name: %q given twice", field, *it.Name)
		}
		if err := put(field+".var_value", *it.Name, it.Value); err != nil {
			return err
		}
	}
	return nil
}

// deleteVars handles DELETE /api/vars/{execution_id}/{name} (404 when not set) and DELETE
// /api/vars/{execution_id} (every variable).
func (h *handler) deleteVars(w http.ResponseWriter, r *http.Request) {
	id, name := r.PathValue("execution_id"), r.PathValue("name")
	req := &apiv1.DeleteExecutionVariablesRequest{ExecutionId: id}
	if name != "" {
		req.Names = []string{name}
	}
	resp, err := h.b.DeleteExecutionVariables(r.Context(), req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if name != "" {
		writeJSON(w, http.StatusOK, map[string]any{"execution_id": id, "var_name": name, "status": "deleted"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"execution_id": id, "variables_deleted": resp.GetVariablesDeleted(), "status": "ok"})
}
