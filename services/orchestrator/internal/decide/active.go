package decide

import (
	"sort"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
)

// Active is what a decision on one state reads step by step, found in one walk of the
// state's steps (ActiveOf): the steps a decision can act on, and on a rerun's first
// decision its reused steps. Every pass of a decision (the routing of finished steps, the
// advance of loops, cursors and retries, the held-events check, the end of the execution,
// the references the caller loads: NeededCollections, NeededClaimRows, NeededLoopResults)
// reads these lists instead of the whole state, so a decision costs the steps in flight,
// not all the steps of a long execution.
//
// A step is active unless it is routed (its arcs evaluated: step.exit or step.skipped), not
// running and dropped no held events. No pass acts on a step outside that: routing and the
// end wait on steps not routed; loops, cursors, retries and the references to load belong
// to running steps; a loop's list of results is pending only until it is routed; and the
// held check reads HeldDropped. Steps a pass only looks up by name (an arc's target, an
// upstream of a join, a step a template references) are read from the state as before.
type Active struct {
	st *sbv1.ExecutionState
	// names are the active steps, in name order.
	names []string
	// reused are, on a rerun's first decision (its from_step not yet entered), the steps it
	// took over from the original, in name order; nil on every other decision.
	reused []string
}

// ActiveOf walks st's steps once and returns its active steps. Pass it in Inputs.Active to
// the decision on the same st, to save DecideWith the walk.
func ActiveOf(st *sbv1.ExecutionState) *Active {
	a := &Active{st: st}
	steps := st.GetSteps()
	from := st.GetFromStep()
	rerunStart := from != "" && steps[from] == nil
	for name, s := range steps {
		if isActive(s) {
			a.names = append(a.names, name)
		}
		if rerunStart && s.GetReused() {
			a.reused = append(a.reused, name)
		}
	}
	sort.Strings(a.names)
	sort.Strings(a.reused)
	return a
}

// isActive reports whether a decision may act on step s (see Active).
func isActive(s *sbv1.StepState) bool {
	return !s.GetRouted() || s.GetStatus() == eventv1.StepStatus_STEP_STATUS_RUNNING || s.GetHeldDropped() > 0
}

// activeFor is in.Active when it was computed from st, else st's own.
func activeFor(st *sbv1.ExecutionState, in Inputs) *Active {
	if a := in.Active; a != nil && a.st == st {
		return a
	}
	return ActiveOf(st)
}

// ActiveIndex keeps the Active of one state current as events are folded into it, so that
// a decision on a long execution pays for the steps its new events touched rather than a
// walk of every step, which grew with every step: at the playbook limit of 5,000 steps
// about 80 µs per decision, against 0.2 µs from the index (BenchmarkActiveOfLongChain,
// BenchmarkActiveIndexLongChain).
//
// It rests on the fold's own shape: domain.Apply changes only the step its event names,
// except a rerun's playbook.started, which seeds the steps it reuses. So after each event
// folded into the state, Folded notes that step; Of then rechecks the noted steps alone.
// Anything Of cannot vouch for is walked afresh: another state, an event not noted (the
// noted seqs must run gap-free up to the state's), a playbook.started, and a rerun's first
// decision, whose reused steps only a walk lists. A wrong index could only come from a
// fold that changed a step other than its event's, which the property test
// (TestFoldAndDecideProperties) would see: it checks Of against ActiveOf before every
// decision.
//
// The zero value is ready; it is not safe for concurrent use (one shard goroutine owns
// each cached state).
type ActiveIndex struct {
	st *sbv1.ExecutionState
	// seq is the state's seq the index accounts for: active holds the steps that were
	// active at the last walk or Of, and touched the steps of the events noted since, up to
	// seq.
	seq     int64
	active  map[string]struct{}
	touched []string
	// stale is set when a noted event may have changed steps other than its own, or past
	// maxTouched events noted since the last Of.
	stale bool
}

// Folded notes that ev was folded into st (after domain.Apply accepted it).
func (x *ActiveIndex) Folded(st *sbv1.ExecutionState, ev *eventv1.Event) {
	if x.st != st || ev.GetSeq() != x.seq+1 {
		x.stale = true
		return
	}
	x.seq = ev.GetSeq()
	if ev.GetType() == domain.EventPlaybookStarted {
		x.stale = true // a rerun's start seeds the steps it reuses
		return
	}
	if len(x.touched) >= maxTouched {
		// Many events and no decision (heartbeats of a long body, say): a walk at the next
		// decision costs less than remembering them, and keeps the index bounded.
		x.stale, x.touched = true, x.touched[:0]
		return
	}
	x.touched = append(x.touched, ev.GetStep())
}

// maxTouched bounds the steps an ActiveIndex notes between two decisions.
const maxTouched = 1024

// Tracks reports whether Of(st) would answer from the index, without walking st: every
// event folded into st since the last Of was noted.
func (x *ActiveIndex) Tracks(st *sbv1.ExecutionState) bool {
	return x.st == st && !x.stale && x.seq == st.GetSeq() && x.active != nil
}

// Of returns st's Active, as ActiveOf(st) would, rechecking only the steps noted since the
// last call when the index can vouch for the rest, and walking st otherwise.
func (x *ActiveIndex) Of(st *sbv1.ExecutionState) *Active {
	from := st.GetFromStep()
	rerunStart := from != "" && st.GetSteps()[from] == nil
	if !x.Tracks(st) || rerunStart {
		a := ActiveOf(st)
		x.st, x.seq, x.stale, x.touched = st, st.GetSeq(), false, x.touched[:0]
		x.active = make(map[string]struct{}, len(a.names))
		for _, name := range a.names {
			x.active[name] = struct{}{}
		}
		return a
	}
	steps := st.GetSteps()
	for _, name := range x.touched {
		if s := steps[name]; s != nil && isActive(s) {
			x.active[name] = struct{}{}
		} else {
			delete(x.active, name)
		}
	}
	x.touched = x.touched[:0]
	a := &Active{st: st}
	for name := range x.active {
		a.names = append(a.names, name)
	}
	sort.Strings(a.names)
	return a
}
