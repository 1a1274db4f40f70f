package api

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/services/gateway/internal/apierr"
)

// ListExecutionVariables implements ExecutionService: the variables of the execution's
// state, which the statebuilder folds from its vars.updated events.
func (s *Server) ListExecutionVariables(ctx context.Context, req *apiv1.ListExecutionVariablesRequest) (*apiv1.ListExecutionVariablesResponse, error) {
	if err := validExecutionID("execution_id", req.GetExecutionId()); err != nil {
		return nil, err
	}
	resp, err := s.State.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: req.GetExecutionId(), Tenant: tenant(ctx)})
	if err != nil {
		return nil, err
	}
	vars := resp.GetState().GetVars()
	names := make([]string, 0, len(vars))
	for name := range vars {
		names = append(names, name)
	}
	sort.Strings(names)
	out := &apiv1.ListExecutionVariablesResponse{Variables: make([]*apiv1.ExecutionVariable, 0, len(names))}
	for _, name := range names {
		v := vars[name]
		out.Variables = append(out.Variables, &apiv1.ExecutionVariable{Name: name, Value: jsonValue(v.GetValueJson()), Type: v.GetType(), SourceStep: v.GetSourceStep(), CreateTime: v.GetCreateTime(), UpdateTime: v.GetUpdateTime()})
	}
	return out, nil
}

// SetExecutionVariables implements ExecutionService: the orchestrator publishes the write
// as a vars.updated event and answers once it is committed.
func (s *Server) SetExecutionVariables(ctx context.Context, req *apiv1.SetExecutionVariablesRequest) (*apiv1.SetExecutionVariablesResponse, error) {
	if err := validExecutionID("execution_id", req.GetExecutionId()); err != nil {
		return nil, err
	}
	if len(req.GetVariables()) == 0 {
		return nil, invalid("variables", "required (an object of name to value)")
	}
	if len(req.GetVariables()) > domain.MaxVars {
		return nil, invalid("variables", fmt.Sprintf("%d variables exceeds the limit of %d per execution", len(req.GetVariables()), domain.MaxVars))
	}
	set := make(map[string][]byte, len(req.GetVariables()))
	for name, v := range req.GetVariables() {
		if err := domain.CheckVarName(name); err != nil {
			return nil, invalid("variables", fmt.Sprintf("%q %v", name, err))
		}
		var b []byte
		if v == nil {
			b = []byte("null")
		} else {
			var err error
			if b, err = json.Marshal(v.AsInterface()); err != nil {
				return nil, invalid("variables."+name, "not representable as JSON (a NaN or infinite number)")
			}
		}
		if len(b) > domain.MaxVarValueBytes {
			return nil, tooLarge(apierr.ReasonVariablesTooLarge, "variables."+name, len(b), domain.MaxVarValueBytes)
		}
		set[name] = b
	}
	resp, err := s.Orchestrator.UpdateExecutionVariables(ctx, &orchv1.UpdateExecutionVariablesRequest{Tenant: tenant(ctx), ExecutionId: req.GetExecutionId(), SetJson: set, Type: req.GetType(), SourceStep: req.GetSourceStep()})
	if err != nil {
		return nil, varsError(err)
	}
	return &apiv1.SetExecutionVariablesResponse{VariablesSet: int32(len(set)), Seq: resp.GetSeq()}, nil
}

// DeleteExecutionVariables implements ExecutionService.
func (s *Server) DeleteExecutionVariables(ctx context.Context, req *apiv1.DeleteExecutionVariablesRequest) (*apiv1.DeleteExecutionVariablesResponse, error) {
	if err := validExecutionID("execution_id", req.GetExecutionId()); err != nil {
		return nil, err
	}
	if len(req.GetNames()) > domain.MaxVars {
		return nil, invalid("names", fmt.Sprintf("%d names exceeds the limit of %d", len(req.GetNames()), domain.MaxVars))
	}
	for _, name := range req.GetNames() {
		if err := domain.CheckVarName(name); err != nil {
			return nil, invalid("names", fmt.Sprintf("%q %v", name, err))
		}
	}
	resp, err := s.Orchestrator.UpdateExecutionVariables(ctx, &orchv1.UpdateExecutionVariablesRequest{Tenant: tenant(ctx), ExecutionId: req.GetExecutionId(), Unset: req.GetNames(), Clear: len(req.GetNames()) == 0})
	if err != nil {
		return nil, err
	}
	return &apiv1.DeleteExecutionVariablesResponse{VariablesDeleted: resp.GetUnset(), Seq: resp.GetSeq()}, nil
}

// varsError gives the orchestrator's refusal of variables over the execution's bounds (a
// RESOURCE_EXHAUSTED "variables...") the reason VARIABLES_TOO_LARGE, so that REST answers
// 413: a retry will not help.
func varsError(err error) error {
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || len(st.Details()) > 0 || !strings.HasPrefix(st.Message(), "variables") {
		return err
	}
	return apierr.New(codes.ResourceExhausted, apierr.ReasonVariablesTooLarge, st.Message(), map[string]string{"field": "variables"})
}
