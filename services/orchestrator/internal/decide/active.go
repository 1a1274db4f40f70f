package decide

import (
	"sort"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
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
