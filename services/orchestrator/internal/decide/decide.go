// Package decide is the orchestrator's decision function: a pure, deterministic map from a
// compiled playbook and an execution state (a committed log prefix) to the events that
// move the execution forward. It does no I/O, reads no clock and draws no random numbers,
// so any replica deciding on the same state produces the same events with the same ids.
package decide

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
)

// Compiled is a playbook prepared for deciding: parsed once per catalog version, with its
// arc graph analysed (incoming arcs, back-edges).
type Compiled struct {
	Playbook *playbook.Playbook
	Path     string
	Version  int64
	Renderer *playbook.Renderer

	// incoming lists, per step, the steps with a forward (non back-edge) arc to it.
	incoming map[string][]string
	// back marks arcs "src\x00dst" that close a cycle.
	back map[string]bool
}

// Compile analyses a parsed playbook.
func Compile(pb *playbook.Playbook, path string, version int64, r *playbook.Renderer) *Compiled {
	c := &Compiled{Playbook: pb, Path: path, Version: version, Renderer: r, incoming: map[string][]string{}, back: map[string]bool{}}
	succ := map[string][]string{}
	for _, s := range pb.Steps {
		if s.Next == nil {
			continue
		}
		for _, a := range s.Next.Arcs {
			succ[s.Name] = append(succ[s.Name], a.Step)
		}
	}
	reaches := func(from, to string) bool {
		seen := map[string]bool{}
		stack := []string{from}
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if n == to {
				return true
			}
			if seen[n] {
				continue
			}
			seen[n] = true
			stack = append(stack, succ[n]...)
		}
		return false
	}
	for _, s := range pb.Steps {
		if s.Next == nil {
			continue
		}
		seen := map[string]bool{}
		for _, a := range s.Next.Arcs {
			if reaches(a.Step, s.Name) {
				c.back[s.Name+"\x00"+a.Step] = true
				continue
			}
			if !seen[a.Step] {
				seen[a.Step] = true
				c.incoming[a.Step] = append(c.incoming[a.Step], s.Name)
			}
		}
	}
	return c
}

// Error is a deterministic failure found while deciding (a condition that cannot be
// evaluated, a template error, a limit reached). It fails the execution, naming the step.
type Error struct {
	Step string
	Msg  string
	// Code is the error code of the failed execution ("" means "decision_error").
	Code string
}

func (e *Error) Error() string { return fmt.Sprintf("step %q: %s", e.Step, e.Msg) }

// decider holds the working set of one Decide call.
type decider struct {
	c   *Compiled
	st  *sbv1.ExecutionState
	out []*eventv1.Event

	workload map[string]any
	ctx      map[string]any
	// overlay of step status decided in this pass, on top of st.Steps.
	status  map[string]eventv1.StepStatus
	fired   map[string][]string
	entered map[string]bool
	running int32

	in Inputs
	// limits are the execution's effective limits (EffectiveLimits).
	limits Limits
}

// Inputs are the immutable data a decision reads besides the state: the loop collections
// that the state holds by reference, and the lists of iteration results of completed loops
// too large for the state, both prepared by the caller (the decision itself does no I/O).
// Content behind a reference never changes, so deciding stays deterministic.
type Inputs struct {
	// Collections maps a collection's reference URI to its items.
	Collections map[string][]json.RawMessage
	// LoopResults maps the step.enter event id of a completed loop epoch (see
	// NeededLoopResults) to the reference of its stored list of iteration results.
	LoopResults map[string]*eventv1.ResultRef
	// Limits are the operator's limits for the execution's tenant (zero fields: the
	// defaults); the playbook's executor.spec.policy.limits may only lower them
	// (EffectiveLimits).
	Limits Limits
	// ClaimRows maps the reference URI of a cursor claim's result to its rows (see
	// NeededClaimRows).
	ClaimRows map[string][]json.RawMessage
}

// ErrCollectionMissing is returned when a decision needs a loop collection held by
// reference that the caller did not load (see NeededCollections); the caller loads it and
// decides again.
var ErrCollectionMissing = errors.New("loop collection not loaded")

// ErrLoopResultsMissing is returned when a decision routes a completed loop whose list of
// iteration results is not in the state and the caller did not provide its reference (see
// NeededLoopResults); the caller stores the list and decides again.
var ErrLoopResultsMissing = errors.New("loop results not assembled")

// LoopResults names a completed loop epoch whose list of iteration results the caller must
// assemble (from the iterations' call.done events, in index order) and store before the
// decision that routes it.
type LoopResults struct {
	// Step is the loop step.
	Step string
	// Epoch is the loop's epoch; its iterations' events carry it.
	Epoch int32
	// EnterEventID is the id of the epoch's step.enter: the key of Inputs.LoopResults and
	// the cause the stored list's id derives from (domain.LoopResultsID).
	EnterEventID string
	// EnterSeq is the seq of that step.enter: the iterations' events come after it (zero
	// when unknown: from the start of the log).
	EnterSeq int64
	// Total is the number of iterations.
	Total int
}

// NeededLoopResults returns the completed loop epochs whose lists of iteration results a
// decision on st routes and the state does not hold, in step name order.
func NeededLoopResults(st *sbv1.ExecutionState) []LoopResults {
	var names []string
	for name, s := range st.GetSteps() {
		if domain.LoopResultsPending(s) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	out := make([]LoopResults, 0, len(names))
	for _, name := range names {
		s := st.GetSteps()[name]
		out = append(out, LoopResults{Step: name, Epoch: s.GetEpoch(), EnterEventID: s.GetEnterEventId(), EnterSeq: s.GetLoop().GetEnterSeq(), Total: domain.LoopTotal(s.GetLoop())})
	}
	return out
}

// Decide returns the events that follow st. It returns nothing for a terminal execution or
// when the execution waits on running commands.
func Decide(c *Compiled, st *sbv1.ExecutionState) ([]*eventv1.Event, error) {
	return DecideWith(c, st, Inputs{})
}

// NeededCollections returns the references of the loop collections a decision on st may
// read: those of running loops with iterations left to issue, in step name order.
func NeededCollections(st *sbv1.ExecutionState) []*eventv1.ResultRef {
	var names []string
	for name, s := range st.GetSteps() {
		l := s.GetLoop()
		if l.GetItemsRef() != nil && s.GetStatus() == eventv1.StepStatus_STEP_STATUS_RUNNING && int(l.GetIssued()) < domain.LoopTotal(l) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	out := make([]*eventv1.ResultRef, 0, len(names))
	for _, name := range names {
		out = append(out, st.GetSteps()[name].GetLoop().GetItemsRef())
	}
	return out
}

// DecideWith is Decide with the inputs a decision on st reads besides the state: the loop
// collections held by reference (NeededCollections) and the references of completed loops'
// lists of results (NeededLoopResults).
func DecideWith(c *Compiled, st *sbv1.ExecutionState, in Inputs) ([]*eventv1.Event, error) {
	if st.GetStatus() != eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING {
		return nil, nil
	}
	for _, n := range NeededLoopResults(st) {
		if in.LoopResults[n.EnterEventID] == nil {
			return nil, fmt.Errorf("step %s: %w (epoch %d)", n.Step, ErrLoopResultsMissing, n.Epoch)
		}
	}
	d := &decider{c: c, st: st, status: map[string]eventv1.StepStatus{}, fired: map[string][]string{}, entered: map[string]bool{}, running: st.GetRunning(), in: in,
		limits: EffectiveLimits(c.Playbook.Limits, in.Limits)}
	if err := domain.DecodeJSON(orEmpty(st.GetWorkloadJson()), &d.workload); err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	if err := domain.DecodeJSON(orEmpty(st.GetCtxJson()), &d.ctx); err != nil {
		return nil, fmt.Errorf("ctx: %w", err)
	}
	if err := d.run(); err != nil {
		var de *Error
		if asDecideError(err, &de) {
			return append(d.out, d.terminalFailed(de)), nil
		}
		return nil, err
	}
	return d.out, nil
}

func asDecideError(err error, target **Error) bool {
	e, ok := err.(*Error)
	if ok {
		*target = e
	}
	return ok
}

func orEmpty(b []byte) []byte {
	if len(b) == 0 {
		return []byte("{}")
	}
	return b
}

func (d *decider) run() error {
	if err := d.checkHeld(); err != nil {
		return err
	}
	if ended := d.deadline(); ended {
		return nil
	}
	if from := d.st.GetFromStep(); from != "" && d.st.GetSteps()[from] == nil {
		// A rerun from a step: its first decision enters that step (the steps before it
		// are reused, completed and routed, by the fold of playbook.started).
		if d.c.Playbook.Step(from) == nil {
			return &Error{Step: from, Msg: "the rerun's from_step is not a step of the playbook"}
		}
		cause := d.st.GetLastEventId()
		if err := d.enter(from, cause); err != nil {
			return err
		}
		// Arcs of reused steps that fired in the original to steps this execution has not
		// reached (a branch beside from that had not finished) arrive as they did there.
		var reused []string
		for name, s := range d.st.GetSteps() {
			if s.GetReused() {
				reused = append(reused, name)
			}
		}
		sort.Strings(reused)
		for _, src := range reused {
			for _, dst := range d.st.GetSteps()[src].GetFired() {
				if d.stepStatus(dst) == eventv1.StepStatus_STEP_STATUS_UNSPECIFIED {
					if err := d.arrive(src, dst, cause); err != nil {
						return err
					}
				}
			}
		}
		return d.finish()
	}
	if len(d.st.GetSteps()) == 0 {
		if d.c.Playbook.Step("start") == nil {
			return &Error{Step: "start", Msg: "playbook has no start step"}
		}
		if err := d.enter("start", d.st.GetLastEventId()); err != nil {
			return err
		}
		return d.finish()
	}
	// Route every finished step whose arcs have not been evaluated, in name order so the
	// output is deterministic.
	var todo []string
	for name, s := range d.st.GetSteps() {
		if !s.GetRouted() && (s.GetStatus() == eventv1.StepStatus_STEP_STATUS_COMPLETED || s.GetStatus() == eventv1.StepStatus_STEP_STATUS_FAILED) {
			todo = append(todo, name)
		}
	}
	sort.Strings(todo)
	for _, name := range todo {
		if err := d.route(name); err != nil {
			return err
		}
	}
	if err := d.advanceLoops(); err != nil {
		return err
	}
	if err := d.advanceCursors(); err != nil { // cursor.go
		return err
	}
	if err := d.advanceRetries(); err != nil {
		return err
	}
	return d.finish()
}

// deadline keeps an execution's timeout: it schedules the durable timer of the deadline
// (due at the start's commit time plus the timeout, as the fold computed it: no clock is
// read), and once the timer fired it fails the execution, reporting that it ended.
func (d *decider) deadline() (ended bool) {
	dl := d.st.GetDeadline()
	if dl == nil {
		return false
	}
	id := d.st.GetExecutionId()
	if d.st.GetDeadlinePassed() {
		timeout := dl.AsTime().Sub(d.st.GetStartTime().AsTime())
		d.out = append(d.out, d.terminal(domain.EventPlaybookFailed, &eventv1.ErrorInfo{Code: "deadline_exceeded",
			Message: fmt.Sprintf("the execution ran past its timeout of %s (spec.timeout or the start's timeout) and was stopped", timeout)}, nil, nil, nil))
		return true
	}
	if !d.st.GetDeadlineScheduled() {
		payload, _ := json.Marshal(domain.TimerPayload{TimerID: domain.DeadlineTimerID(id), DueAt: dl.AsTime()})
		d.emit(&eventv1.Event{EventId: domain.EventID(domain.ExecutionCause(id), domain.EventTimerScheduled), Type: domain.EventTimerScheduled, CauseEventId: d.st.GetLastEventId(), PayloadJson: payload})
	}
	return false
}

// advanceRetries schedules the durable timer of each pending retry and, once the timer
// fired, issues the next attempt. The due time comes from the failure's commit time, not
// from a clock.
func (d *decider) advanceRetries() error {
	var names []string
	for name, s := range d.st.GetSteps() {
		if s.GetRetry() != nil && s.GetStatus() == eventv1.StepStatus_STEP_STATUS_RUNNING {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		s := d.st.GetSteps()[name]
		r := s.GetRetry()
		ps := d.c.Playbook.Step(name)
		if ps == nil {
			continue
		}
		if r.GetTimerId() == "" {
			due := r.GetFailedTime().AsTime().Add(time.Duration(r.GetDelaySeconds() * float64(time.Second)))
			timerID := "t" + domain.EventID(r.GetFailedEventId(), "timer")[1:]
			payload, _ := json.Marshal(domain.TimerPayload{TimerID: timerID, DueAt: due, Attempt: r.GetNextAttempt()})
			d.emit(&eventv1.Event{EventId: domain.EventID(r.GetFailedEventId(), domain.EventTimerScheduled), Type: domain.EventTimerScheduled, Step: name, Attempt: r.GetNextAttempt(), CauseEventId: r.GetFailedEventId(), PayloadJson: payload})
			continue
		}
		if !r.GetFired() {
			continue
		}
		if err := d.checkEvents(name, fmt.Sprintf("issuing attempt %d", r.GetNextAttempt())); err != nil {
			return err
		}
		iter := &eventv1.Iteration{Epoch: s.GetEpoch(), Index: -1}
		cmdID := domain.CommandID(d.st.GetExecutionId(), name, s.GetEpoch(), -1, r.GetNextAttempt())
		cmd, err := d.command(ps, cmdID, iter, r.GetNextAttempt(), nil)
		if err != nil {
			return err
		}
		issuedID := domain.EventID(cmdID, domain.EventCommandIssued)
		cmd.IssuedEventId = issuedID
		d.emit(&eventv1.Event{EventId: issuedID, Type: domain.EventCommandIssued, Step: name, CommandId: cmdID, Attempt: r.GetNextAttempt(), CauseEventId: r.GetFailedEventId(), Iteration: iter, Command: cmd})
	}
	return nil
}

// advanceLoops issues the next iterations of running loop steps, keeping at most
// max_in_flight (1 when sequential) iterations in flight.
func (d *decider) advanceLoops() error {
	var names []string
	for name, s := range d.st.GetSteps() {
		if s.GetLoop() != nil && s.GetStatus() == eventv1.StepStatus_STEP_STATUS_RUNNING && d.stepStatus(name) == eventv1.StepStatus_STEP_STATUS_RUNNING && !d.entered[name] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		s := d.st.GetSteps()[name]
		ps := d.c.Playbook.Step(name)
		if ps == nil || ps.Loop == nil {
			continue
		}
		limit, err := d.maxInFlight(ps)
		if err != nil {
			return err
		}
		l := s.GetLoop()
		total := domain.LoopTotal(l)
		item := func(i int) json.RawMessage { return l.GetItemsJson()[i] }
		if ref := l.GetItemsRef(); ref != nil {
			items := d.in.Collections[ref.GetUri()]
			if len(items) != total {
				return fmt.Errorf("step %s: %w: %s (%d items, want %d)", name, ErrCollectionMissing, ref.GetUri(), len(items), total)
			}
			item = func(i int) json.RawMessage { return items[i] }
		}
		if i := int(l.GetIssued()); i < total && i < int(l.GetDone())+limit {
			if err := d.checkEvents(name, fmt.Sprintf("issuing iteration %d", i)); err != nil {
				return err
			}
		}
		for i := int(l.GetIssued()); i < total && i < int(l.GetDone())+limit; i++ {
			if err := d.issueIteration(ps, s.GetEpoch(), int32(i), item(i), total, s.GetEnterEventId()); err != nil {
				return err
			}
		}
	}
	return nil
}

// collection renders a loop step's in: and requires a list.
func (d *decider) collection(ps *playbook.Step) ([]json.RawMessage, error) {
	v := ps.Loop.InValue
	if ps.Loop.In != "" {
		v = ps.Loop.In
	}
	rv, err := d.c.Renderer.Render(v, d.vars(ps))
	if err != nil {
		return nil, &Error{Step: ps.Name, Msg: fmt.Sprintf("loop.in: %v", err)}
	}
	list, ok := rv.([]any)
	if !ok {
		return nil, &Error{Step: ps.Name, Msg: fmt.Sprintf("loop.in must render to a list, got %T", rv)}
	}
	items := make([]json.RawMessage, len(list))
	size := 0
	for i, it := range list {
		b, err := json.Marshal(it)
		if err != nil {
			return nil, &Error{Step: ps.Name, Msg: fmt.Sprintf("loop.in item %d: %v", i, err)}
		}
		items[i] = b
		size += len(b) + 1
		if size > MaxLoopCollectionBytes {
			return nil, &Error{Step: ps.Name, Msg: fmt.Sprintf("loop.in: the collection exceeds %d bytes (at item %d of %d); loop over ids or pages instead", MaxLoopCollectionBytes, i, len(list))}
		}
	}
	return items, nil
}

// MaxLoopCollectionBytes bounds a loop's rendered collection. One up to
// InlineCollectionMax travels in its step.enter event and stays in the state; a larger one
// is stored once in the resultstore by the orchestrator and the state keeps its reference
// and length (the decision holds it in memory while rendering it).
const MaxLoopCollectionBytes = 32 << 20

// InlineCollectionMax is the largest rendered collection (the JSON array) that travels
// inline in step.enter; the orchestrator stores a larger one by reference.
const InlineCollectionMax = 64 << 10

// maxInFlight is how many iterations of a loop may run at once.
func (d *decider) maxInFlight(ps *playbook.Step) (int, error) {
	if ps.Loop.Mode != playbook.LoopParallel {
		return 1, nil
	}
	n := ps.Loop.MaxInFlight
	if ps.Loop.MaxInFlightExpr != "" {
		v, err := d.c.Renderer.Eval(ps.Loop.MaxInFlightExpr, d.vars(ps))
		if err != nil {
			return 0, &Error{Step: ps.Name, Msg: fmt.Sprintf("loop.spec.max_in_flight: %v", err)}
		}
		switch x := v.(type) {
		case int64:
			n = int(x)
		case float64:
			n = int(x)
		}
	}
	if n <= 0 {
		n = 1 << 30
	}
	return n, nil
}

// issueIteration emits the command.issued of one loop iteration.
func (d *decider) issueIteration(ps *playbook.Step, epoch, index int32, item json.RawMessage, total int, cause string) error {
	exec := d.st.GetExecutionId()
	iter := &eventv1.Iteration{Epoch: epoch, Index: index}
	cmdID := domain.CommandID(exec, ps.Name, epoch, index, 1)
	var v any
	if err := domain.DecodeJSON(item, &v); err != nil {
		return err
	}
	cmd, err := d.command(ps, cmdID, iter, 1, map[string]any{ps.Loop.Iterator: v, "_index": index, "_total": total})
	if err != nil {
		return err
	}
	issuedID := domain.EventID(cmdID, domain.EventCommandIssued)
	cmd.IssuedEventId = issuedID
	d.emit(&eventv1.Event{EventId: issuedID, Type: domain.EventCommandIssued, Step: ps.Name, CommandId: cmdID, Attempt: 1, CauseEventId: cause, Iteration: iter, Command: cmd})
	return nil
}

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

func (d *decider) emit(ev *eventv1.Event) {
	ev.ExecutionId = d.st.GetExecutionId()
	ev.Tenant = d.st.GetTenant()
	ev.ParentExecutionId = d.st.GetParentExecutionId()
	ev.Producer = "orchestrator"
	d.out = append(d.out, ev)
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
	vars := d.vars(ps)
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
	if len(ps.Set) > 0 {
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
			ok, err := d.truthy(a.When, vars, name, "next arc to "+a.Step)
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
	for i, a := range fired {
		if len(a.Set) > 0 {
			vals, err := d.renderSet(a.Set, vars, name, "next arc to "+a.Step+": set")
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
	if st != eventv1.StepStatus_STEP_STATUS_UNSPECIFIED && !d.isBackTarget(dst) {
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

func (d *decider) isBackTarget(dst string) bool {
	for k := range d.c.back {
		if strings.HasSuffix(k, "\x00"+dst) {
			return true
		}
	}
	return false
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

// exit emits step.exit for a step routed to fired; ref, when set, is the result of a loop
// whose list of results is held by reference.
func (d *decider) exit(name, cause string, fired []string, ref *eventv1.ResultRef) error {
	payload, err := json.Marshal(domain.ExitPayload{Fired: fired, CursorDrained: d.cursorDrained(name)})
	if err != nil {
		return err
	}
	d.emit(&eventv1.Event{
		EventId:      domain.EventID(cause, domain.EventStepExit),
		Type:         domain.EventStepExit,
		Step:         name,
		CauseEventId: cause,
		PayloadJson:  payload,
		ResultRef:    ref,
	})
	if fired == nil {
		fired = []string{}
	}
	d.fired[name] = fired
	return nil
}

func (d *decider) updateCtx(vals map[string]any, id, step string) {
	if len(vals) == 0 {
		return
	}
	payload, _ := json.Marshal(domain.CtxPayload{Values: vals})
	d.emit(&eventv1.Event{EventId: id, Type: domain.EventCtxUpdated, Step: step, PayloadJson: payload})
	if d.ctx == nil {
		d.ctx = map[string]any{}
	}
	for k, v := range vals {
		d.ctx[k] = v
	}
}

// enter emits step.enter and command.issued for a step, or step.skipped when its legacy
// when guard is false.
func (d *decider) enter(name, cause string) error {
	ps := d.c.Playbook.Step(name)
	if ps == nil {
		return &Error{Step: name, Msg: "arc target does not exist"}
	}
	if ps.When != "" {
		ok, err := d.truthy(ps.When, d.vars(ps), name, "when")
		if err != nil {
			return err
		}
		if !ok {
			return d.skip(name, cause)
		}
	}
	exec := d.st.GetExecutionId()
	epoch := d.st.GetSteps()[name].GetEpoch() + 1
	if err := d.checkEntry(name, epoch); err != nil {
		return err
	}
	enterID := domain.EventID(domain.StepEnterCause(exec, name, epoch), domain.EventStepEnter)
	if ps.Loop != nil && ps.Loop.Cursor != nil {
		return d.enterCursor(ps, epoch, enterID, cause) // cursor.go
	}
	enter := domain.EnterPayload{Epoch: epoch}
	if ps.Loop != nil {
		items, err := d.collection(ps)
		if err != nil {
			return err
		}
		enter.Loop = &domain.LoopPayload{Items: items, Iterator: ps.Loop.Iterator}
	}
	payload, err := json.Marshal(enter)
	if err != nil {
		return err
	}
	d.emit(&eventv1.Event{EventId: enterID, Type: domain.EventStepEnter, Step: name, CauseEventId: cause, PayloadJson: payload, Iteration: &eventv1.Iteration{Epoch: epoch, Index: -1}})
	d.entered[name] = true
	d.status[name] = eventv1.StepStatus_STEP_STATUS_RUNNING
	delete(d.fired, name)
	if enter.Loop != nil {
		if len(enter.Loop.Items) == 0 {
			// An empty collection completes the loop at once: route it in this pass.
			d.status[name] = eventv1.StepStatus_STEP_STATUS_COMPLETED
			return d.routeFinished(name, eventv1.StepStatus_STEP_STATUS_COMPLETED, enterID, domain.StepResult{Status: "completed", Result: []byte("[]")})
		}
		d.running++
		limit, err := d.maxInFlight(ps)
		if err != nil {
			return err
		}
		for i := 0; i < len(enter.Loop.Items) && i < limit; i++ {
			if err := d.issueIteration(ps, epoch, int32(i), enter.Loop.Items[i], len(enter.Loop.Items), enterID); err != nil {
				return err
			}
		}
		return nil
	}
	d.running++

	iter := &eventv1.Iteration{Epoch: epoch, Index: -1}
	cmdID := domain.CommandID(exec, name, epoch, -1, 1)
	cmd, err := d.command(ps, cmdID, iter, 1, nil)
	if err != nil {
		return err
	}
	issuedID := domain.EventID(cmdID, domain.EventCommandIssued)
	cmd.IssuedEventId = issuedID
	d.emit(&eventv1.Event{EventId: issuedID, Type: domain.EventCommandIssued, Step: name, CommandId: cmdID, Attempt: 1, CauseEventId: enterID, Iteration: iter, Command: cmd})
	return nil
}

// command builds the command of a step: unrendered tool configs and input, plus the render
// scope restricted to the steps its templates reference.
func (d *decider) command(ps *playbook.Step, id string, iter *eventv1.Iteration, attempt int32, iterScope map[string]any) (*eventv1.Command, error) {
	tools := make([]*eventv1.ToolCall, 0, len(ps.Tool))
	for _, t := range ps.Tool {
		t, err := d.resolveWorkbook(ps, t)
		if err != nil {
			return nil, err
		}
		cfg, err := json.Marshal(t.Config)
		if err != nil {
			return nil, &Error{Step: ps.Name, Msg: "tool config is not JSON-encodable: " + err.Error()}
		}
		tools = append(tools, &eventv1.ToolCall{Kind: t.Kind, Label: t.Label, ConfigJson: cfg})
	}
	if len(tools) == 0 {
		tools = append(tools, &eventv1.ToolCall{Kind: "noop", ConfigJson: []byte("{}")})
	}
	input, err := json.Marshal(ps.Input)
	if err != nil {
		return nil, &Error{Step: ps.Name, Msg: "input is not JSON-encodable: " + err.Error()}
	}
	scope := d.scope(ps)
	if iterScope != nil {
		scope.Iter = iterScope
		scope.Iterator = ps.Loop.Iterator
	}
	sc, err := json.Marshal(scope)
	if err != nil {
		return nil, err
	}
	var selectFields []string
	if out, ok := ps.Extra["output"].(map[string]any); ok {
		if sel, ok := out["output_select"].([]any); ok {
			for _, f := range sel {
				if fs, ok := f.(string); ok {
					selectFields = append(selectFields, fs)
				}
			}
		}
	}
	return &eventv1.Command{
		OutputSelect:      selectFields,
		CommandId:         id,
		ExecutionId:       d.st.GetExecutionId(),
		Tenant:            d.st.GetTenant(),
		Pool:              domain.PoolFor(d.c.Path),
		Step:              ps.Name,
		Tools:             tools,
		InputJson:         input,
		ContextJson:       sc,
		Iteration:         iter,
		Attempt:           attempt,
		PlaybookPath:      d.c.Path,
		ParentExecutionId: d.st.GetParentExecutionId(),
		Timeout:           stepTimeout(ps),
		KeychainJson:      ps.Keychain, // declarations only: the worker resolves them
	}, nil
}

// stepTimeout is a command's bound of one attempt: the step's spec.timeout, unset without.
func stepTimeout(ps *playbook.Step) *durationpb.Duration {
	if ps.Timeout <= 0 {
		return nil
	}
	return durationpb.New(ps.Timeout)
}

// scope is the render scope of a step: workload, ctx and the results of the steps its
// templates reference (all finished steps when the references cannot be resolved).
func (d *decider) scope(ps *playbook.Step) *domain.Scope {
	sc := &domain.Scope{ExecutionID: d.st.GetExecutionId(), Workload: d.workload, Ctx: d.ctx, Steps: map[string]domain.StepResult{}}
	sc.Variables = domain.VarsJSON(d.st) // execution variables, as vars.<name>
	add := func(name string) {
		s := d.st.GetSteps()[name]
		if s == nil || s.GetStatus() != eventv1.StepStatus_STEP_STATUS_COMPLETED {
			return
		}
		sc.Steps[name] = d.result(s)
	}
	if ps == nil {
		return sc
	}
	if ps.RefsAll {
		for name := range d.st.GetSteps() {
			add(name)
		}
		return sc
	}
	for _, name := range ps.Refs {
		add(name)
	}
	if ps.RefsSelf {
		add(ps.Name)
	}
	return sc
}

// vars builds template variables for templates evaluated in the orchestrator (conditions,
// set:, loop collections) of step ps.
func (d *decider) vars(ps *playbook.Step) map[string]any {
	return d.scope(ps).Vars()
}

func (d *decider) truthy(expr string, vars map[string]any, step, where string) (bool, error) {
	if strings.TrimSpace(expr) == "" {
		return true, nil
	}
	ok, err := d.c.Renderer.Truthy(expr, vars)
	if err != nil {
		return false, &Error{Step: step, Msg: fmt.Sprintf("%s: condition %q failed to evaluate: %v", where, expr, err)}
	}
	return ok, nil
}

// renderSet renders a set: block and strips the scope prefixes (ctx., step.); iter. keys
// are kept for loops.
func (d *decider) renderSet(set map[string]any, vars map[string]any, step, where string) (map[string]any, error) {
	out := make(map[string]any, len(set))
	for k, v := range set {
		rv, err := d.c.Renderer.Render(v, vars)
		if err != nil {
			return nil, &Error{Step: step, Msg: fmt.Sprintf("%s: %s: %v", where, k, err)}
		}
		key := strings.TrimPrefix(strings.TrimPrefix(k, "ctx."), "step.")
		out[key] = rv
	}
	return out, nil
}

// finish emits the terminal event when nothing runs and nothing is left to route.
func (d *decider) finish() error {
	if d.running > 0 {
		return nil
	}
	for name, s := range d.st.GetSteps() {
		if (s.GetStatus() == eventv1.StepStatus_STEP_STATUS_COMPLETED || s.GetStatus() == eventv1.StepStatus_STEP_STATUS_FAILED) && !d.routed(name) {
			return nil
		}
	}
	failed := d.st.GetFailedSteps()
	if len(failed) > 0 {
		msgs := make([]string, 0, len(failed))
		seen := map[string]bool{}
		for _, f := range failed {
			if seen[f] {
				continue
			}
			seen[f] = true
			// "step a failed: <why>", unless why already names the step ("step a: tool python: ...").
			m := "step " + f + " failed"
			if e := d.st.GetSteps()[f].GetError(); e != nil && e.GetMessage() != "" {
				if why := e.GetMessage(); strings.HasPrefix(why, "step "+f+": ") {
					m = why
				} else {
					m += ": " + why
				}
			}
			msgs = append(msgs, m)
		}
		d.out = append(d.out, d.terminal(domain.EventPlaybookFailed, &eventv1.ErrorInfo{Code: "step_failed", Message: strings.Join(msgs, "; ")}, failed, nil, nil))
		return nil
	}
	res, ref := d.finalResult()
	d.out = append(d.out, d.terminal(domain.EventPlaybookCompleted, nil, nil, res, ref))
	return nil
}

// finalResult is the result of the end step when it completed, else of the completed leaf
// step (no next) first in name order.
func (d *decider) finalResult() ([]byte, *eventv1.ResultRef) {
	steps := d.st.GetSteps()
	if s := steps["end"]; s != nil && s.GetStatus() == eventv1.StepStatus_STEP_STATUS_COMPLETED {
		return d.rawResult(s)
	}
	var names []string
	for name, s := range steps {
		if s.GetStatus() != eventv1.StepStatus_STEP_STATUS_COMPLETED {
			continue
		}
		if ps := d.c.Playbook.Step(name); ps != nil && (ps.Next == nil || len(ps.Next.Arcs) == 0) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, nil
	}
	return d.rawResult(steps[names[0]])
}

func (d *decider) terminal(typ string, e *eventv1.ErrorInfo, failed []string, res []byte, ref *eventv1.ResultRef) *eventv1.Event {
	payload, _ := json.Marshal(domain.TerminalPayload{FailedSteps: failed})
	return &eventv1.Event{
		EventId:           domain.EventID(domain.ExecutionCause(d.st.GetExecutionId()), typ),
		ExecutionId:       d.st.GetExecutionId(),
		Tenant:            d.st.GetTenant(),
		ParentExecutionId: d.st.GetParentExecutionId(),
		Type:              typ,
		CauseEventId:      d.st.GetLastEventId(),
		PayloadJson:       payload,
		Error:             e,
		ResultJson:        res,
		ResultRef:         ref,
		Producer:          "orchestrator",
	}
}

func (d *decider) terminalFailed(e *Error) *eventv1.Event {
	code := e.Code
	if code == "" {
		code = "decision_error"
	}
	return d.terminal(domain.EventPlaybookFailed, &eventv1.ErrorInfo{Code: code, Message: e.Error()}, []string{e.Step}, nil, nil)
}

// resolveWorkbook replaces a workbook tool by the named task's tool: the task's
// configuration with the calling tool's input (and args) merged over the task's input.
func (d *decider) resolveWorkbook(ps *playbook.Step, t *playbook.Tool) (*playbook.Tool, error) {
	if t.Kind != "workbook" {
		return t, nil
	}
	name, _ := t.Config["name"].(string)
	if name == "" {
		name, _ = t.Config["task"].(string)
	}
	task := d.c.Playbook.Workbook[name]
	if task == nil {
		return nil, &Error{Step: ps.Name, Msg: fmt.Sprintf("workbook task %q not found", name)}
	}
	if task.Kind == "workbook" {
		return nil, &Error{Step: ps.Name, Msg: fmt.Sprintf("workbook task %q refers to another workbook task", name)}
	}
	cfg := make(map[string]any, len(task.Config)+2)
	for k, v := range task.Config {
		cfg[k] = v
	}
	input := map[string]any{}
	for _, src := range []map[string]any{task.Config, t.Config} {
		for _, key := range []string{"input", "args"} {
			if m, ok := src[key].(map[string]any); ok {
				for k, v := range m {
					input[k] = v
				}
			}
		}
	}
	delete(cfg, "args")
	cfg["input"] = input
	for k, v := range t.Config {
		if k != "name" && k != "task" && k != "input" && k != "args" {
			cfg[k] = v
		}
	}
	return &playbook.Tool{Kind: task.Kind, Label: t.Label, Config: cfg, Policy: task.Policy}, nil
}
