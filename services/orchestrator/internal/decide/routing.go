package decide

import (
	"fmt"
	"strings"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
)

// Routing: a finished step's arcs (next, when, else), arrivals at join steps and skips.

// stepStatus is the status of a step as of this pass.
func (d *decider) stepStatus(name string) eventv1.StepStatus {
	if s, ok := d.status[name]; ok {
		return s
	}
	return d.st.GetSteps()[name].GetStatus()
}

func (d *decider) stepFired(name string) []string {
	if f, ok := d.fired[name]; ok {
		return f
	}
	return d.st.GetSteps()[name].GetFired()
}

// routed reports whether a step's arcs are evaluated (it is done with) as of this pass.
func (d *decider) routed(name string) bool {
	if _, ok := d.fired[name]; ok {
		return true
	}
	s := d.st.GetSteps()[name]
	return s != nil && s.GetRouted()
}

func (d *decider) route(name string) error {
	s := d.st.GetSteps()[name]
	return d.routeFinished(name, s.GetStatus(), s.GetDoneEventId(), d.result(s))
}

// result is a completed step's result: from the state, or for a loop whose list of
// results is assembled by reference (domain.LoopResultsPending), that reference from the
// inputs.
func (d *decider) result(s *sbv1.StepState) domain.StepResult {
	res, ref := d.rawResult(s)
	return domain.StepResult{Status: "completed", Result: res, Ref: domain.RefViewOf(ref)}
}

// rawResult is result as the inline JSON or the reference an event carries.
func (d *decider) rawResult(s *sbv1.StepState) ([]byte, *eventv1.ResultRef) {
	if domain.LoopResultsPending(s) {
		return nil, d.in.LoopResults[s.GetEnterEventId()]
	}
	return s.GetResultJson(), s.GetResultRef()
}

// routeFinished evaluates the arcs of a step that finished with status; cause is the event
// that finished it and res its result.
func (d *decider) routeFinished(name string, status eventv1.StepStatus, cause string, res domain.StepResult) error {
	ps := d.c.Playbook.Step(name)
	if status == eventv1.StepStatus_STEP_STATUS_FAILED || ps == nil {
		// A failed step does not route through its arcs.
		return d.exit(name, cause, nil, nil)
	}
	// The template variables are built only for a set: or an arc's when: or set: to read:
	// a plain next: (the common chain) routes without decoding any result.
	var vars map[string]any
	varsOf := func() map[string]any {
		if vars != nil {
			return vars
		}
		vars = d.vars(ps)
		out := res.Value()
		vars[name] = out
		vars["output"] = out
		vars["result"] = out
		if steps, ok := vars["steps"].(map[string]any); ok {
			steps[name] = map[string]any{"status": "completed", "result": out}
		}
		if ps.Loop != nil {
			vars["event"] = map[string]any{"name": "loop.done"}
		} else {
			vars["event"] = map[string]any{"name": "step.done"}
		}
		return vars
	}
	if len(ps.Set) > 0 {
		vars := varsOf()
		vals, err := d.renderSet(ps.Set, vars, name, "set")
		if err != nil {
			return err
		}
		d.updateCtx(vals, domain.EventID(cause, domain.EventCtxUpdated), name)
		for k, v := range vals {
			vars[k] = v
		}
		vars["ctx"] = d.ctx
	}
	var fired, notFired []playbook.Arc
	if ps.Next != nil {
		matched := false
		for _, a := range ps.Next.Arcs {
			if matched && ps.Next.Mode != playbook.ModeInclusive {
				notFired = append(notFired, a)
				continue
			}
			ok := true
			var err error
			if strings.TrimSpace(a.When) != "" {
				ok, err = d.truthy(a.When, varsOf(), name, "next arc to "+a.Step)
			}
			if err != nil {
				return err
			}
			if ok {
				matched = true
				fired = append(fired, a)
			} else {
				notFired = append(notFired, a)
			}
		}
	}
	targets := make([]string, 0, len(fired))
	for _, a := range fired {
		targets = append(targets, a.Step)
	}
	// Mark the step routed for this pass before arriving at targets (barriers read it), but
	// emit step.exit last: a state that contains step.exit then contains every event this
	// decision emitted before it, so no decision runs on a half-committed routing.
	if targets == nil {
		targets = []string{}
	}
	d.fired[name] = targets
	for _, a := range fired {
		if len(a.Set) > 0 {
			varsOf() // before any arc's set: changes ctx, every arc's set sees the ctx before them
			break
		}
	}
	for i, a := range fired {
		if len(a.Set) > 0 {
			vals, err := d.renderSet(a.Set, varsOf(), name, "next arc to "+a.Step+": set")
			if err != nil {
				return err
			}
			d.updateCtx(vals, domain.EventID(cause+"\x00arc"+fmt.Sprint(i), domain.EventCtxUpdated), name)
		}
		if err := d.arrive(name, a.Step, cause); err != nil {
			return err
		}
	}
	for _, a := range notFired {
		if err := d.arrive(name, a.Step, cause); err != nil {
			return err
		}
	}
	// A loop's list of results assembled by reference becomes its result with step.exit.
	var ref *eventv1.ResultRef
	if s := d.st.GetSteps()[name]; domain.LoopResultsPending(s) {
		ref = d.in.LoopResults[s.GetEnterEventId()]
	}
	return d.exit(name, cause, targets, ref)
}

// arrive handles the evaluation of an arc src->dst (fired or not) and enters or skips dst
// once its barrier is satisfied.
func (d *decider) arrive(src, dst, cause string) error {
	if d.entered[dst] {
		return nil // same-pass dedup
	}
	if d.c.back[src+"\x00"+dst] {
		if contains(d.stepFired(src), dst) {
			return d.enter(dst, cause)
		}
		return nil
	}
	st := d.stepStatus(dst)
	if st == eventv1.StepStatus_STEP_STATUS_RUNNING {
		return nil
	}
	if st != eventv1.StepStatus_STEP_STATUS_UNSPECIFIED && !d.c.backTarget[dst] {
		// Already entered and finished through another arc (convergence without a cycle).
		if contains(d.stepFired(src), dst) && d.routed(dst) && len(d.c.incoming[dst]) <= 1 {
			return d.enter(dst, cause)
		}
		return nil
	}
	anyFired := false
	for _, up := range d.c.incoming[dst] {
		if !d.routed(up) {
			return nil // barrier: wait for every upstream
		}
		if contains(d.stepFired(up), dst) {
			anyFired = true
		}
	}
	if anyFired {
		return d.enter(dst, cause)
	}
	return d.skip(dst, cause)
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// skip emits step.skipped for dst and propagates the skip to its targets.
func (d *decider) skip(dst, cause string) error {
	epoch := d.st.GetSteps()[dst].GetEpoch() + 1
	d.emit(&eventv1.Event{
		EventId:      domain.EventID(domain.StepEnterCause(d.st.GetExecutionId(), dst, epoch), domain.EventStepSkipped),
		Type:         domain.EventStepSkipped,
		Step:         dst,
		CauseEventId: cause,
	})
	d.status[dst] = eventv1.StepStatus_STEP_STATUS_SKIPPED
	d.fired[dst] = nil
	d.entered[dst] = true
	ps := d.c.Playbook.Step(dst)
	if ps == nil || ps.Next == nil {
		return nil
	}
	for _, a := range ps.Next.Arcs {
		if err := d.arrive(dst, a.Step, cause); err != nil {
			return err
		}
	}
	return nil
}
