package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
)

// Playbook runs a sub-playbook (kind playbook): it starts a child execution linked to the
// running one, and when return_step or return_result is set waits for the child's end on
// commit notices (WaitExecution, no polling) and returns the child's result. The child's
// id is derived from the command, so a redelivered command re-attaches to the same child.
type Playbook struct {
	// Orchestrator starts and waits for executions.
	Orchestrator orchv1.OrchestratorServiceClient
}

// ChildRef identifies the execution a sub-playbook call runs in.
type ChildRef struct {
	Tenant, ExecutionID, Label string
}

type childKey struct{}

// WithChild puts the running command's identity in ctx for the playbook tool.
func WithChild(ctx context.Context, ref ChildRef) context.Context {
	return context.WithValue(ctx, childKey{}, ref)
}

// Run implements Tool.
func (p *Playbook) Run(ctx context.Context, c *Call) (any, error) {
	ref, _ := ctx.Value(childKey{}).(ChildRef)
	path, _ := c.Config["path"].(string)
	version := int64(0)
	if v, ok := c.Config["version"].(float64); ok {
		version = int64(v)
	}
	if path == "" {
		if id, ok := c.Config["catalog_id"].(string); ok {
			path = id
		}
	}
	if path == "" {
		return nil, &Error{Msg: "playbook: path is required"}
	}
	workload := map[string]any{}
	for _, key := range []string{"payload", "args", "input"} {
		if m, ok := c.Config[key].(map[string]any); ok {
			for k, v := range m {
				workload[k] = v
			}
		}
	}
	w, err := json.Marshal(workload)
	if err != nil {
		return nil, &Error{Msg: "playbook: input is not JSON-encodable: " + err.Error()}
	}
	started, err := p.Orchestrator.StartExecution(ctx, &orchv1.StartExecutionRequest{
		Tenant: ref.Tenant, Path: path, Version: version, WorkloadJson: w,
		IdempotencyKey:    "child:" + c.CommandID + ":" + ref.Label,
		ParentExecutionId: ref.ExecutionID,
	})
	if err != nil {
		return nil, &Error{Msg: fmt.Sprintf("playbook: start %s: %v", path, err), Retryable: true}
	}
	child := started.GetExecutionId()
	returnStep, _ := c.Config["return_step"].(string)
	if returnStep == "" {
		returnStep, _ = c.Config["result_step"].(string)
	}
	returnResult, _ := c.Config["return_result"].(bool)
	if returnStep == "" && !returnResult {
		return map[string]any{"execution_id": child, "status": "started", "path": path}, nil
	}
	var deadline time.Time
	if t, ok := c.Config["timeout"].(float64); ok && t > 0 {
		deadline = time.Now().Add(time.Duration(t * float64(time.Second)))
	}
	for {
		if !deadline.IsZero() && time.Now().After(deadline) {
			p.cancel(ref.Tenant, child, "parent step timed out")
			return nil, &Error{Msg: fmt.Sprintf("playbook: child %s did not finish within its timeout", child)}
		}
		resp, err := p.Orchestrator.WaitExecution(ctx, &orchv1.WaitExecutionRequest{Tenant: ref.Tenant, ExecutionId: child, Timeout: durationpb.New(time.Minute)})
		if ctx.Err() != nil {
			// A cancelled parent takes its child along. A stopping worker does not: the
			// command runs again on another worker, whose start (same idempotency key)
			// finds this child and waits for it.
			if errors.Is(context.Cause(ctx), ErrExecutionCancelled) {
				p.cancel(ref.Tenant, child, "parent cancelled")
			}
			return nil, ctx.Err()
		}
		if err != nil {
			return nil, &Error{Msg: fmt.Sprintf("playbook: wait for child %s: %v", child, err), Retryable: true}
		}
		if resp.GetTerminal() {
			return childResult(child, resp.GetState(), returnStep)
		}
	}
}

func (p *Playbook) cancel(tenant, child, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = p.Orchestrator.CancelExecution(ctx, &orchv1.CancelExecutionRequest{Tenant: tenant, ExecutionId: child, Reason: reason})
}

// childResult is what a blocking sub-playbook call returns: the named step's result, or
// the child's final result.
func childResult(child string, st *sbv1.ExecutionState, returnStep string) (any, error) {
	if st.GetStatus() != eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED {
		msg := st.GetError().GetMessage()
		if msg == "" {
			msg = st.GetStatus().String()
		}
		return nil, &Error{Msg: fmt.Sprintf("playbook: child %s ended %s: %s", child, st.GetStatus(), msg)}
	}
	raw := st.GetResultJson()
	if returnStep != "" {
		s := st.GetSteps()[returnStep]
		if s == nil || s.GetStatus() != eventv1.StepStatus_STEP_STATUS_COMPLETED {
			return nil, &Error{Msg: fmt.Sprintf("playbook: child %s has no completed step %q", child, returnStep)}
		}
		raw = s.GetResultJson()
	}
	if len(raw) == 0 {
		return nil, nil
	}
	var v any
	if err := domain.DecodeJSON(raw, &v); err != nil {
		return nil, &Error{Msg: fmt.Sprintf("playbook: child %s result: %v", child, err)}
	}
	return v, nil
}
