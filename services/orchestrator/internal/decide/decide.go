// Package decide is the orchestrator's decision function: a pure, deterministic map from a
// compiled playbook and an execution state (a committed log prefix) to the events that
// move the execution forward. It does no I/O, reads no clock and draws no random numbers,
// so any replica deciding on the same state produces the same events with the same ids.
//
// One decision (decider.run, in this file) passes through the package's parts, one file
// each: active.go (the steps a decision can act on, found in one walk of the state),
// timers.go (the execution deadline, retry waits), loops.go (iterations of loops over
// collections), cursor.go (cursor loops: claims, bodies, drain), routing.go (a finished
// step's arcs, joins, skips), steps.go (entering and exiting steps, context writes),
// commands.go (a step's command, its render scope and templates), finish.go (the terminal
// event and final result), and limits.go (the bounds on step entries and events).
package decide

import (
	"encoding/json"
	"errors"
	"fmt"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/internal/playbook/template"
)

// Compiled is a playbook prepared for deciding: parsed once per catalog version, with its
// arc graph analysed (incoming arcs, back-edges).
type Compiled struct {
	Playbook *playbook.Playbook
	Path     string
	Version  int64
	Renderer *template.Renderer

	// incoming lists, per step, the steps with a forward (non back-edge) arc to it.
	incoming map[string][]string
	// back marks arcs "src\x00dst" that close a cycle.
	back map[string]bool
	// backTarget marks the steps a back arc goes to.
	backTarget map[string]bool
}

// Compile analyses a parsed playbook.
func Compile(pb *playbook.Playbook, path string, version int64, r *template.Renderer) *Compiled {
	c := &Compiled{Playbook: pb, Path: path, Version: version, Renderer: r, incoming: map[string][]string{}, back: map[string]bool{}, backTarget: map[string]bool{}}
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
				c.backTarget[a.Step] = true
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
	// active are the steps this decision can act on (Active).
	active *Active
	// varsJSON is the execution's variables as the scope of every command carries them
	// (domain.VarsJSON), encoded once per decision.
	varsJSON    json.RawMessage
	varsEncoded bool
	// commands are the shared parts of each step's commands (stepCommand), built once per
	// decision and dropped when ctx changes.
	commands map[string]*stepCommand
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
	// Active is ActiveOf the state decided on, when the caller computed it already for the
	// Needed* calls (nil, or computed from another state: the decision computes its own).
	Active *Active
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
	return ActiveOf(st).NeededLoopResults()
}

// NeededLoopResults is the package's NeededLoopResults on a's state.
func (a *Active) NeededLoopResults() []LoopResults {
	var out []LoopResults
	for _, name := range a.names {
		s := a.st.GetSteps()[name]
		if domain.LoopResultsPending(s) {
			out = append(out, LoopResults{Step: name, Epoch: s.GetEpoch(), EnterEventID: s.GetEnterEventId(), EnterSeq: s.GetLoop().GetEnterSeq(), Total: domain.LoopTotal(s.GetLoop())})
		}
	}
	if out == nil {
		out = []LoopResults{}
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
	return ActiveOf(st).NeededCollections()
}

// NeededCollections is the package's NeededCollections on a's state.
func (a *Active) NeededCollections() []*eventv1.ResultRef {
	var out []*eventv1.ResultRef
	for _, name := range a.names {
		s := a.st.GetSteps()[name]
		l := s.GetLoop()
		if l.GetItemsRef() != nil && s.GetStatus() == eventv1.StepStatus_STEP_STATUS_RUNNING && int(l.GetIssued()) < domain.LoopTotal(l) {
			out = append(out, l.GetItemsRef())
		}
	}
	if out == nil {
		out = []*eventv1.ResultRef{}
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
	active := activeFor(st, in)
	for _, name := range active.names {
		if s := st.GetSteps()[name]; domain.LoopResultsPending(s) && in.LoopResults[s.GetEnterEventId()] == nil {
			return nil, fmt.Errorf("step %s: %w (epoch %d)", name, ErrLoopResultsMissing, s.GetEpoch())
		}
	}
	d := &decider{c: c, st: st, status: map[string]eventv1.StepStatus{}, fired: map[string][]string{}, entered: map[string]bool{}, running: st.GetRunning(), in: in,
		active: active, limits: EffectiveLimits(c.Playbook.Limits, in.Limits)}
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
		for _, src := range d.active.reused {
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
	for _, name := range d.active.names {
		s := d.st.GetSteps()[name]
		if s.GetRouted() || (s.GetStatus() != eventv1.StepStatus_STEP_STATUS_COMPLETED && s.GetStatus() != eventv1.StepStatus_STEP_STATUS_FAILED) {
			continue
		}
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

// MaxLoopCollectionBytes bounds a loop's rendered collection. One up to
// InlineCollectionMax travels in its step.enter event and stays in the state; a larger one
// is stored once in the resultstore by the orchestrator and the state keeps its reference
// and length (the decision holds it in memory while rendering it).
const MaxLoopCollectionBytes = 32 << 20

// InlineCollectionMax is the largest rendered collection (the JSON array) that travels
// inline in step.enter; the orchestrator stores a larger one by reference.
const InlineCollectionMax = 64 << 10

func (d *decider) emit(ev *eventv1.Event) {
	ev.ExecutionId = d.st.GetExecutionId()
	ev.Tenant = d.st.GetTenant()
	ev.ParentExecutionId = d.st.GetParentExecutionId()
	ev.Producer = "orchestrator"
	d.out = append(d.out, ev)
}
