// Package vars is the variables part of the orchestrator's OrchestratorService:
// UpdateExecutionVariables writes an execution's variables as one vars.updated event and
// answers once the log holds it.
//
// Invariants: a write is checked against the committed state (a terminal execution's
// variables no longer change; every name to unset must be set; the variables after the
// write stay within domain.MaxVars and domain.MaxVarsBytes); each write's event id derives
// from a fresh request id, so two writes never collapse into one; the answer's seq is the
// seq the log gave the event.
package vars

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/eventbus"
	"github.com/noetl/noetl/services/orchestrator/internal/notice"
)

// Service implements UpdateExecutionVariables of OrchestratorService.
type Service struct {
	NC         *nats.Conn
	JS         jetstream.JetStream
	State      sbv1.StateServiceClient
	Partitions int
	// CommitTimeout bounds how long a write waits for its event to commit.
	CommitTimeout time.Duration
}

// UpdateExecutionVariables writes an execution's variables as one vars.updated event and
// answers once it is committed. It is checked against the committed state: the execution
// must not be terminal, every name to unset must be set, and the variables after the write
// must stay within domain.MaxVars and domain.MaxVarsBytes. The event's id derives from a
// fresh request id (its cause is the request), so two writes never collapse into one.
func (s *Service) UpdateExecutionVariables(ctx context.Context, req *orchv1.UpdateExecutionVariablesRequest) (*orchv1.UpdateExecutionVariablesResponse, error) {
	if req.GetExecutionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "execution_id: required")
	}
	p, err := varsPayload(req)
	if err != nil {
		return nil, err
	}
	resp, err := s.State.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: req.GetExecutionId(), Tenant: domain.TenantOrDefault(req.GetTenant())})
	if err != nil {
		return nil, err
	}
	st := resp.GetState()
	if domain.IsTerminalStatus(st.GetStatus()) {
		return nil, status.Errorf(codes.FailedPrecondition, "execution %s is already %s: its variables can no longer change", st.GetExecutionId(), st.GetStatus())
	}
	after := make(map[string]*sbv1.Variable, len(st.GetVars())+len(p.Set))
	if !p.Clear {
		for name, v := range st.GetVars() {
			after[name] = v
		}
	}
	unset := int32(len(st.GetVars()))
	if !p.Clear {
		unset = 0
		for _, name := range p.Unset {
			if _, ok := after[name]; !ok {
				return nil, status.Errorf(codes.NotFound, "vars.%s: not set in execution %s", name, st.GetExecutionId())
			}
			delete(after, name)
			unset++
		}
	}
	for name, v := range p.Set {
		after[name] = &sbv1.Variable{ValueJson: v.Value}
	}
	if len(after) > domain.MaxVars {
		return nil, status.Errorf(codes.ResourceExhausted, "variables: %d exceeds the limit of %d per execution", len(after), domain.MaxVars)
	}
	if n := domain.VarsBytes(after); n > domain.MaxVarsBytes {
		return nil, status.Errorf(codes.ResourceExhausted, "variables: %d bytes exceeds the limit of %d bytes per execution", n, domain.MaxVarsBytes)
	}
	payload, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	rid, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	ev := &eventv1.Event{
		EventId:           domain.EventID(st.GetExecutionId()+"\x00vars\x00"+rid.String(), domain.EventVarsUpdated),
		ExecutionId:       st.GetExecutionId(),
		Tenant:            st.GetTenant(),
		ParentExecutionId: st.GetParentExecutionId(),
		Type:              domain.EventVarsUpdated,
		CauseEventId:      st.GetLastEventId(),
		PayloadJson:       payload,
		Producer:          "orchestrator",
		ProduceTime:       timestamppb.Now(),
	}
	seq, err := s.publishCommitted(ctx, st, ev)
	if err != nil {
		return nil, err
	}
	return &orchv1.UpdateExecutionVariablesResponse{Seq: seq, Unset: unset}, nil
}

// varsPayload checks a request and builds the event's payload.
func varsPayload(req *orchv1.UpdateExecutionVariablesRequest) (*domain.VarsPayload, error) {
	typ := req.GetType()
	if typ == "" {
		typ = domain.VarTypes[0]
	}
	if !slices.Contains(domain.VarTypes, typ) {
		return nil, status.Errorf(codes.InvalidArgument, "type: must be one of %v", domain.VarTypes)
	}
	if len(req.GetSourceStep()) > 256 {
		return nil, status.Error(codes.InvalidArgument, "source_step: at most 256 characters")
	}
	if len(req.GetSetJson()) == 0 && len(req.GetUnset()) == 0 && !req.GetClear() {
		return nil, status.Error(codes.InvalidArgument, "variables: nothing to set or unset")
	}
	p := &domain.VarsPayload{Clear: req.GetClear()}
	seen := map[string]bool{}
	if !p.Clear {
		for _, name := range req.GetUnset() {
			if err := domain.CheckVarName(name); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "unset: %q %v", name, err)
			}
			if !seen[name] {
				seen[name] = true
				p.Unset = append(p.Unset, name)
			}
		}
	}
	for name, raw := range req.GetSetJson() {
		if err := domain.CheckVarName(name); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "variables: %q %v", name, err)
		}
		if seen[name] {
			return nil, status.Errorf(codes.InvalidArgument, "variables.%s: both set and unset", name)
		}
		if len(raw) > domain.MaxVarValueBytes {
			return nil, status.Errorf(codes.ResourceExhausted, "variables.%s: %d bytes exceeds the limit of %d bytes", name, len(raw), domain.MaxVarValueBytes)
		}
		if !json.Valid(raw) {
			return nil, status.Errorf(codes.InvalidArgument, "variables.%s: not JSON", name)
		}
		if p.Set == nil {
			p.Set = map[string]domain.VarValue{}
		}
		p.Set[name] = domain.VarValue{Value: raw, Type: typ, SourceStep: req.GetSourceStep()}
	}
	return p, nil
}

// publishCommitted publishes ev, an event of the execution whose state is st, and waits
// until the log holds it, returning its seq. Past the commit timeout it reads the state
// again: a terminal execution (whose log refuses the event) is FailedPrecondition.
func (s *Service) publishCommitted(ctx context.Context, st *sbv1.ExecutionState, ev *eventv1.Event) (int64, error) {
	id := st.GetExecutionId()
	watch, err := notice.Subscribe(s.NC, id)
	if err != nil {
		return 0, status.Errorf(codes.Unavailable, "nats: %v", err)
	}
	defer watch.Close()
	if err := eventbus.Publish(ctx, s.JS, s.Partitions, []*eventv1.Event{ev}); err != nil {
		return 0, status.Errorf(codes.Unavailable, "publish %s: %v", ev.GetType(), err)
	}
	timeout := s.CommitTimeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	after := st.GetSeq()
	for {
		upTo, terminal, err := watch.Next(wctx)
		if err != nil {
			break
		}
		if upTo <= after {
			continue
		}
		seq, found, err := s.findEvent(ctx, st, ev.GetEventId(), ev.GetType(), after, upTo)
		if err != nil {
			return 0, err
		}
		if found {
			return seq, nil
		}
		after = upTo
		if terminal {
			break
		}
	}
	if resp, err := s.State.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: id, Tenant: st.GetTenant()}); err == nil && domain.IsTerminalStatus(resp.GetState().GetStatus()) {
		return 0, status.Errorf(codes.FailedPrecondition, "execution %s ended (%s) before the write was committed: its variables can no longer change", id, resp.GetState().GetStatus())
	}
	return 0, status.Errorf(codes.Unavailable, "execution %s: %s was published but not committed within %s", id, ev.GetType(), timeout)
}

// findEvent looks for event id of type typ among the execution's events after seq after,
// up to upTo.
func (s *Service) findEvent(ctx context.Context, st *sbv1.ExecutionState, id, typ string, after, upTo int64) (int64, bool, error) {
	for {
		page, err := s.State.ListEvents(ctx, &sbv1.ListEventsRequest{ExecutionId: st.GetExecutionId(), Tenant: st.GetTenant(), AfterSeq: after, UpToSeq: upTo, Types: []string{typ}, PageSize: 1000})
		if err != nil {
			return 0, false, err
		}
		for _, e := range page.GetEvents() {
			if e.GetEventId() == id {
				return e.GetSeq(), true, nil
			}
		}
		if after = page.GetNextAfterSeq(); after == 0 {
			return 0, false, nil
		}
	}
}
