package executions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/services/orchestrator/internal/catalog"
)

// MaxRerunStartBytes bounds the payload of a rerun's playbook.started: the workload, the
// labels, the reused steps' results (inline ones as they are, by-reference ones as their
// references) and the ctx. It leaves room in a message (natsx.MaxMessageBytes) for the
// rest of the event.
const MaxRerunStartBytes = natsx.MaxMessageBytes - 16<<10

// rerunPage is the page size of the reads of the original's log.
const rerunPage = 1000

// RerunExecution starts a new execution of an execution's playbook version, workload and
// labels. With from_step, the steps the original completed before its first step.enter of
// from_step (and those it skipped) are reused: their results and fired arcs, and the ctx
// of that moment, go into the new execution's playbook.started, whose fold makes them
// completed and routed, and the first decision enters from_step. The original must have
// entered from_step; it may still be running.
func (s *Service) RerunExecution(ctx context.Context, req *orchv1.RerunExecutionRequest) (*orchv1.RerunExecutionResponse, error) {
	tenant := domain.TenantOrDefault(req.GetTenant())
	if req.GetExecutionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "execution_id: required")
	}
	resp, err := s.State.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: req.GetExecutionId(), Tenant: tenant})
	if err != nil {
		return nil, err // NotFound for another tenant's execution
	}
	orig := resp.GetState()
	if domain.PoolFor(orig.GetPlaybookPath()) == "system" && !auth.FromContext(ctx).Can(auth.PermSystem) {
		return nil, status.Errorf(codes.PermissionDenied, "execution_id: rerunning system/ playbooks requires the system role")
	}
	cp, err := s.Catalog.Compiled(ctx, tenant, orig.GetPlaybookPath(), orig.GetPlaybookVersion())
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, status.Errorf(codes.FailedPrecondition, "execution %s: its playbook %q (version %d) is no longer in the catalog", orig.GetExecutionId(), orig.GetPlaybookPath(), orig.GetPlaybookVersion())
	}
	if err != nil {
		return nil, err
	}
	var workload map[string]any
	if err := domain.DecodeJSON(jsonObject(orig.GetWorkloadJson()), &workload); err != nil {
		return nil, fmt.Errorf("execution %s: workload: %w", orig.GetExecutionId(), err)
	}
	p := domain.StartedPayload{Path: cp.Path, Version: cp.Version, Workload: workload, Labels: orig.GetLabels(), RerunOf: orig.GetExecutionId(), TimeoutSeconds: cp.Playbook.Timeout.Seconds()}
	var reused []string
	if from := req.GetFromStep(); from != "" {
		if cp.Playbook.Step(from) == nil {
			return nil, status.Errorf(codes.InvalidArgument, "from_step: playbook %q version %d has no step %q", cp.Path, cp.Version, from)
		}
		seed, err := s.rerunSeed(ctx, tenant, orig.GetExecutionId(), from)
		if err != nil {
			return nil, err
		}
		p.FromStep, p.Reused, p.Ctx = from, seed.Reused, seed.Ctx
		for _, r := range seed.Reused {
			reused = append(reused, r.Name)
		}
	}
	payload, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	tooLarge := func() error {
		return status.Errorf(codes.ResourceExhausted, "from_step: the rerun's start (%d bytes: the workload, the results of the %d reused steps held inline and the ctx) exceeds the limit of %d bytes; rerun from an earlier step", len(payload), len(p.Reused), MaxRerunStartBytes)
	}
	if len(payload) > MaxRerunStartBytes {
		return nil, tooLarge()
	}
	// A rerun is the caller's own execution, not a child of the original's parent (which
	// neither waits for it nor cancels it).
	id, _, err := s.publishStart(ctx, tenant, req.GetIdempotencyKey(), "", payload, tooLarge, nil)
	if err != nil {
		return nil, err
	}
	return &orchv1.RerunExecutionResponse{ExecutionId: id, Version: cp.Version, ReusedSteps: reused}, nil
}

// rerunSeed folds the log of execution id up to (not including) its first entry of step
// from and returns what a rerun from there reuses: every step completed or skipped in
// that state, in name order, and its ctx. A completed step that the state had not routed
// yet (the decision entering from routes it in the same output) gets its fired arcs, and a
// loop its assembled list of results, from its step.exit further on.
func (s *Service) rerunSeed(ctx context.Context, tenant, id, from string) (*domain.StartedPayload, error) {
	// The step's first entry is its first step.enter or, for a step of one command entered
	// by its command.issued (domain.IssuedPayload.Enter), its first command.issued: no
	// command of a step precedes its entry.
	first, err := s.State.ListEvents(ctx, &sbv1.ListEventsRequest{ExecutionId: id, Tenant: tenant, Step: from, Types: []string{domain.EventStepEnter, domain.EventCommandIssued}, PageSize: 1})
	if err != nil {
		return nil, err
	}
	if len(first.GetEvents()) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "from_step: execution %s never entered step %q", id, from)
	}
	upTo := first.GetEvents()[0].GetSeq() - 1
	st := domain.NewState(id)
	for st.GetSeq() < upTo {
		page, err := s.State.ListEvents(ctx, &sbv1.ListEventsRequest{ExecutionId: id, Tenant: tenant, AfterSeq: st.GetSeq(), UpToSeq: upTo, PageSize: rerunPage})
		if err != nil {
			return nil, err
		}
		if len(page.GetEvents()) == 0 {
			return nil, status.Errorf(codes.Unavailable, "execution %s: its log ends at seq %d before seq %d", id, st.GetSeq(), upTo)
		}
		for _, ev := range page.GetEvents() {
			if err := domain.Apply(st, ev); err != nil {
				return nil, status.Errorf(codes.Unavailable, "execution %s: %v", id, err)
			}
		}
	}
	out := &domain.StartedPayload{}
	if len(st.GetCtxJson()) > 0 {
		if err := json.Unmarshal(st.GetCtxJson(), &out.Ctx); err != nil {
			return nil, fmt.Errorf("execution %s: ctx: %w", id, err)
		}
	}
	names := make([]string, 0, len(st.GetSteps()))
	for name := range st.GetSteps() {
		names = append(names, name)
	}
	sort.Strings(names)
	// pending maps the event that finished a step not routed yet to its index in Reused.
	pending := map[string]int{}
	for _, name := range names {
		ss := st.GetSteps()[name]
		if name == from {
			continue // skipped before it was entered: the rerun enters it
		}
		switch ss.GetStatus() {
		case eventv1.StepStatus_STEP_STATUS_COMPLETED:
		case eventv1.StepStatus_STEP_STATUS_SKIPPED:
			out.Reused = append(out.Reused, domain.ReusedStep{Name: name, Skipped: true})
			continue
		default:
			continue // running or failed: the rerun runs it again if it is reached
		}
		r := domain.ReusedStep{Name: name, Result: ss.GetResultJson(), Fired: ss.GetFired()}
		if err := r.SetRef(ss.GetResultRef()); err != nil {
			return nil, err
		}
		if !ss.GetRouted() {
			pending[ss.GetDoneEventId()] = len(out.Reused)
		}
		out.Reused = append(out.Reused, r)
	}
	for after := upTo; len(pending) > 0; {
		page, err := s.State.ListEvents(ctx, &sbv1.ListEventsRequest{ExecutionId: id, Tenant: tenant, AfterSeq: after, Types: []string{domain.EventStepExit}, PageSize: rerunPage})
		if err != nil {
			return nil, err
		}
		for _, ev := range page.GetEvents() {
			i, ok := pending[ev.GetCauseEventId()]
			if !ok {
				continue
			}
			delete(pending, ev.GetCauseEventId())
			var xp domain.ExitPayload
			if len(ev.GetPayloadJson()) > 0 {
				if err := json.Unmarshal(ev.GetPayloadJson(), &xp); err != nil {
					return nil, fmt.Errorf("execution %s: step.exit payload: %w", id, err)
				}
			}
			out.Reused[i].Fired = xp.Fired
			if ref := ev.GetResultRef(); ref != nil && len(out.Reused[i].Result) == 0 && len(out.Reused[i].ResultRef) == 0 {
				if err := out.Reused[i].SetRef(ref); err != nil {
					return nil, err
				}
			}
		}
		if page.GetNextAfterSeq() == 0 {
			break
		}
		after = page.GetNextAfterSeq()
	}
	// A step still unrouted in the whole log (a running original) is not reused: its
	// routing is unknown, so the rerun decides it again.
	if len(pending) > 0 {
		drop := map[int]bool{}
		for _, i := range pending {
			drop[i] = true
		}
		kept := out.Reused[:0]
		for i, r := range out.Reused {
			if !drop[i] {
				kept = append(kept, r)
			}
		}
		out.Reused = kept
	}
	return out, nil
}

// jsonObject is b, or an empty object when b is empty.
func jsonObject(b []byte) []byte {
	if len(b) == 0 {
		return []byte("{}")
	}
	return b
}
