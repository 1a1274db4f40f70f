package decide

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/internal/playbook/template"
)

// everyStep is the unfiltered reference of ActiveOf: every step of st, in name order, as
// each pass of a decision walked them before Active (every pass still applies its own
// condition), and on a rerun's first decision every reused step. A decision given it is
// the decision over the whole state.
func everyStep(st *sbv1.ExecutionState) *Active {
	a := &Active{st: st}
	from := st.GetFromStep()
	for name, s := range st.GetSteps() {
		a.names = append(a.names, name)
		if from != "" && st.GetSteps()[from] == nil && s.GetReused() {
			a.reused = append(a.reused, name)
		}
	}
	sort.Strings(a.names)
	sort.Strings(a.reused)
	return a
}

// requireSameAsUnfiltered checks that a decision on st that reads only its active steps
// emits exactly what the decision over every step emits (or fails alike), and that the
// references to load agree.
func requireSameAsUnfiltered(t require.TestingT, c *Compiled, st *sbv1.ExecutionState, in Inputs) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	a, all := ActiveOf(st), everyStep(st)
	requireSameRefs(t, all.NeededCollections(), a.NeededCollections(), "NeededCollections")
	requireSameRefs(t, all.NeededClaimRows(), a.NeededClaimRows(), "NeededClaimRows")
	require.Equal(t, all.NeededLoopResults(), a.NeededLoopResults(), "NeededLoopResults")
	in.Active = all
	want, wantErr := DecideWith(c, st, in)
	in.Active = a
	got, gotErr := DecideWith(c, st, in)
	require.Equal(t, fmt.Sprint(wantErr), fmt.Sprint(gotErr), "the decision's error")
	require.Equal(t, ids(want), ids(got), "the decision's events")
	for i := range want {
		require.True(t, proto.Equal(want[i], got[i]), "event %d (%s of %s) differs from the unfiltered decision's", i, want[i].GetType(), want[i].GetStep())
	}
}

func requireSameRefs(t require.TestingT, want, got []*eventv1.ResultRef, what string) {
	require.Equal(t, len(want), len(got), what)
	require.Equal(t, want == nil, got == nil, "%s: nil or empty", what)
	for i := range want {
		require.True(t, proto.Equal(want[i], got[i]), "%s[%d]", what, i)
	}
}

// chainBook is a playbook of n steps one after another (start, s1, ..., s<n-1>), the last
// with the arcs next (YAML, none when empty) to the steps of tail (YAML).
func chainBook(n int, next string, tail string) string {
	var b strings.Builder
	b.WriteString("apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: c, path: t/p}\nworkflow:\n")
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("s%d", i)
		if i == 0 {
			name = "start"
		}
		fmt.Fprintf(&b, "  - step: %s\n    tool: {kind: noop}\n", name)
		switch {
		case i < n-1:
			fmt.Fprintf(&b, "    next: [{step: s%d}]\n", i+1)
		case next != "":
			fmt.Fprintf(&b, "    next: %s\n", next)
		}
	}
	b.WriteString(tail)
	return b.String()
}

// TestActiveListsTheStepsADecisionCanActOn: of a state's steps, those routed, not running
// and without dropped held events are left out; every other one is listed, in name order,
// and a rerun's first decision lists its reused steps. DecideWith ignores an Active of
// another state.
func TestActiveListsTheStepsADecisionCanActOn(t *testing.T) {
	const (
		completed = eventv1.StepStatus_STEP_STATUS_COMPLETED
		failed    = eventv1.StepStatus_STEP_STATUS_FAILED
		running   = eventv1.StepStatus_STEP_STATUS_RUNNING
		skipped   = eventv1.StepStatus_STEP_STATUS_SKIPPED
	)
	st := domain.NewState("x")
	st.Status = eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING
	st.Steps = map[string]*sbv1.StepState{}
	for i := range 50 {
		st.Steps[fmt.Sprintf("done%02d", i)] = &sbv1.StepState{Status: completed, Routed: true}
	}
	st.Steps["skipped"] = &sbv1.StepState{Status: skipped, Routed: true}
	st.Steps["failed-routed"] = &sbv1.StepState{Status: failed, Routed: true}
	st.Steps["reused"] = &sbv1.StepState{Status: completed, Routed: true, Reused: true}
	st.Steps["held"] = &sbv1.StepState{Status: completed, Routed: true, HeldDropped: 1}
	st.Steps["to-route"] = &sbv1.StepState{Status: completed}
	st.Steps["failed"] = &sbv1.StepState{Status: failed}
	st.Steps["loop"] = &sbv1.StepState{Status: running, Loop: &sbv1.LoopState{Total: 3}}
	st.Steps["cursor"] = &sbv1.StepState{Status: running, Cursor: &sbv1.CursorState{}}
	st.Steps["retry"] = &sbv1.StepState{Status: running, Retry: &sbv1.RetryState{NextAttempt: 2}}
	st.Steps["pending-results"] = &sbv1.StepState{Status: completed, Loop: &sbv1.LoopState{ResultsOmitted: true, Total: 2}}
	st.Steps["running-routed"] = &sbv1.StepState{Status: running, Routed: true}
	st.Steps["unknown"] = &sbv1.StepState{}
	a := ActiveOf(st)
	require.Equal(t, []string{"cursor", "failed", "held", "loop", "pending-results", "retry", "running-routed", "to-route", "unknown"}, a.names)
	require.Nil(t, a.reused, "not a rerun")
	require.Equal(t, []LoopResults{{Step: "pending-results", Total: 2}}, a.NeededLoopResults())

	st.FromStep = "from"
	require.Equal(t, []string{"reused"}, ActiveOf(st).reused, "a rerun's first decision reads its reused steps")
	st.Steps["from"] = &sbv1.StepState{Status: running}
	require.Nil(t, ActiveOf(st).reused, "later decisions of the rerun do not")

	// An Active of another state is not used: the decision computes its own.
	pb, err := playbook.Parse([]byte(chainBook(3, "", "")))
	require.NoError(t, err)
	c := Compile(pb, "t/p", 1, template.NewRenderer())
	other := domain.NewState("x")
	require.NoError(t, domain.Apply(other, &eventv1.Event{EventId: "start", ExecutionId: "x", Type: domain.EventPlaybookStarted, Seq: 1, PayloadJson: []byte(`{"path":"t/p","version":1,"workload":{}}`)}))
	s := newSim(t, chainBook(3, "", ""), `{}`)
	for _, cmd := range s.decide() {
		s.complete(cmd)
	}
	want, err := Decide(c, s.st)
	require.NoError(t, err)
	require.NotEmpty(t, want)
	got, err := DecideWith(c, s.st, Inputs{Active: ActiveOf(other)})
	require.NoError(t, err)
	require.Equal(t, ids(want), ids(got))
}

// TestRoutedStepsADecisionNeedsAreRead: the decisions that read a step that is completed
// and routed (a back arc's target entered again, a rerun's reused steps whose arcs arrive,
// dropped held events of a routed step, a completed loop whose list of results is pending)
// still do so behind a long chain of routed steps; each decision of these runs equals the
// unfiltered one (sim.decide checks).
func TestRoutedStepsADecisionNeedsAreRead(t *testing.T) {
	t.Run("a back arc's target", func(t *testing.T) {
		s := newSim(t, chainBook(30, "[{step: fetch, set: {ctx.page: 0}}]", `
  - step: fetch
    tool: {kind: noop}
    set: {ctx.page: "{{ ctx.page + 1 }}"}
    next:
      arcs:
        - {step: fetch, when: "{{ ctx.page < 3 }}"}
        - {step: end, when: "{{ ctx.page >= 3 }}"}
  - step: end
    tool: {kind: noop}
`), `{}`)
		runAll(t, s, func(string) string { return `{}` })
		var epochs []int32
		for _, ev := range s.log {
			if domain.Enters(ev) && ev.GetStep() == "fetch" {
				epochs = append(epochs, ev.GetIteration().GetEpoch())
			}
		}
		require.Equal(t, []int32{1, 2, 3}, epochs, "each entry of the routed fetch counts from its epoch")
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, s.st.GetStatus())
	})
	t.Run("a rerun's reused steps", func(t *testing.T) {
		pb, err := playbook.Parse([]byte(chainBook(20, "[{step: fan}]", `
  - step: fan
    tool: {kind: noop}
    next: [{step: left}, {step: right}]
  - step: left
    tool: {kind: noop}
    next: [{step: join}]
  - step: right
    tool: {kind: noop}
    next: [{step: join}]
  - step: join
    tool: {kind: noop}
`)))
		require.NoError(t, err)
		c := Compile(pb, "t/p", 1, template.NewRenderer())
		var reused []domain.ReusedStep
		for i := range 20 {
			name, next := fmt.Sprintf("s%d", i), fmt.Sprintf("s%d", i+1)
			if i == 0 {
				name = "start"
			}
			if i == 19 {
				next = "fan"
			}
			reused = append(reused, domain.ReusedStep{Name: name, Result: json.RawMessage(`1`), Fired: []string{next}})
		}
		reused = append(reused, domain.ReusedStep{Name: "fan", Result: json.RawMessage(`1`), Fired: []string{"left", "right"}})
		payload, err := json.Marshal(domain.StartedPayload{Path: "t/p", Version: 1, RerunOf: "orig", FromStep: "right", Reused: reused})
		require.NoError(t, err)
		st := domain.NewState("x")
		require.NoError(t, domain.Apply(st, &eventv1.Event{EventId: "e1", ExecutionId: "x", Type: domain.EventPlaybookStarted, PayloadJson: payload, Seq: 1}))
		requireSameAsUnfiltered(t, c, st, Inputs{})
		evs, err := Decide(c, st)
		require.NoError(t, err)
		var entered []string
		for _, ev := range evs {
			if domain.Enters(ev) {
				entered = append(entered, ev.GetStep())
			}
		}
		require.Equal(t, []string{"right", "left"}, entered, "the reused fan's other branch arrives")
	})
	t.Run("dropped held events of a routed step", func(t *testing.T) {
		s := newSim(t, chainBook(10, "", ""), `{}`)
		for range 5 {
			for _, cmd := range s.decide() {
				s.complete(cmd)
			}
		}
		s1 := s.st.GetSteps()["s1"]
		require.True(t, s1.GetRouted())
		require.Equal(t, eventv1.StepStatus_STEP_STATUS_COMPLETED, s1.GetStatus())
		s1.HeldDropped = 2
		requireSameAsUnfiltered(t, s.c, s.st, Inputs{})
		evs, err := Decide(s.c, s.st)
		require.NoError(t, err)
		require.NotEmpty(t, evs)
		last := evs[len(evs)-1]
		require.Equal(t, domain.EventPlaybookFailed, last.GetType())
		require.Equal(t, CodeLimitExceeded, last.GetError().GetCode())
		require.Contains(t, last.GetError().GetMessage(), `step "s1": 2 events`)
	})
	t.Run("a completed loop's pending list of results", func(t *testing.T) {
		s := newSim(t, chainBook(15, "[{step: loop}]", `
  - step: loop
    loop: {in: "{{ workload.items }}", iterator: it, spec: {mode: parallel}}
    tool: {kind: noop}
    next: [{step: after}]
  - step: after
    tool: {kind: noop}
`), `{"items":[0,1,2,3,4,5,6,7]}`)
		big := `{"pad":"` + strings.Repeat("x", 10<<10) + `"}`
		for range 40 {
			if len(NeededLoopResults(s.st)) > 0 {
				break
			}
			for _, cmd := range s.decide() {
				mk := func(typ string) *eventv1.Event {
					return &eventv1.Event{EventId: domain.EventID(cmd.GetCommandId(), typ), ExecutionId: "x", Type: typ, Step: cmd.GetStep(), CommandId: cmd.GetCommandId(), Iteration: cmd.GetIteration()}
				}
				done := mk(domain.EventCallDone)
				done.ResultJson = []byte(big)
				s.apply(mk(domain.EventCommandStarted), done, mk(domain.EventCommandCompleted))
			}
		}
		needs := ActiveOf(s.st).NeededLoopResults()
		require.Len(t, needs, 1)
		require.Equal(t, "loop", needs[0].Step)
		_, err := Decide(s.c, s.st)
		require.ErrorIs(t, err, ErrLoopResultsMissing)
		_, ref := assembleLoopResults(t, s.log, needs[0])
		in := Inputs{LoopResults: map[string]*eventv1.ResultRef{needs[0].EnterEventID: ref}}
		requireSameAsUnfiltered(t, s.c, s.st, in)
		evs, err := DecideWith(s.c, s.st, in)
		require.NoError(t, err)
		require.Contains(t, ids(evs), domain.EventID(s.st.GetSteps()["loop"].GetDoneEventId(), domain.EventStepExit))
	})
}

// TestActiveDecisionEqualsTheUnfilteredOne: on the state of a random playbook at a random
// point of its run, with some of its steps then changed at random (routed or not, status,
// dropped held events, reused, a retry, a rerun whose from_step is not entered yet), the
// decision that reads only the active steps emits what the decision over every step
// emits, and the references to load agree.
func TestActiveDecisionEqualsTheUnfilteredOne(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		src := genPlaybook(t)
		pb, err := playbook.Parse([]byte(src))
		require.NoError(t, err)
		c := Compile(pb, "t/p", 1, template.NewRenderer())
		items := rapid.SliceOfN(rapid.IntRange(0, 9), 0, 3).Draw(t, "items")
		workload := fmt.Sprintf(`{"items":%s,"flag":%v}`, jsonInts(items), rapid.Bool().Draw(t, "flag"))
		resultPad := rapid.SampledFrom([]int{0, 30 << 10}).Draw(t, "result size")
		st := domain.NewState("x")
		var log []*eventv1.Event
		apply := func(ev *eventv1.Event) {
			ev = proto.Clone(ev).(*eventv1.Event)
			ev.Seq = st.GetSeq() + 1
			require.NoError(t, domain.Apply(st, ev))
			log = append(log, ev)
		}
		apply(&eventv1.Event{EventId: "start", ExecutionId: "x", Type: domain.EventPlaybookStarted, PayloadJson: []byte(`{"path":"t/p","version":1,"workload":` + workload + `}`)})
		in := Inputs{LoopResults: map[string]*eventv1.ResultRef{}}
		var pending []*eventv1.Event
		rounds := rapid.IntRange(0, 60).Draw(t, "rounds")
		for round := 0; round < rounds && !domain.IsTerminalStatus(st.GetStatus()); round++ {
			for _, n := range NeededLoopResults(st) {
				_, ref := assembleLoopResults(t, log, n)
				in.LoopResults[n.EnterEventID] = ref
			}
			evs, err := DecideWith(c, st, in)
			require.NoError(t, err)
			for _, ev := range evs {
				apply(ev)
				for _, x := range expandIssued(ev) {
					if x.GetType() == domain.EventCommandIssued {
						pending = append(pending, x)
					}
				}
			}
			if len(pending) == 0 {
				if len(evs) == 0 {
					break
				}
				continue
			}
			k := rapid.IntRange(0, len(pending)-1).Draw(t, "pick")
			cmd := pending[k]
			pending = append(pending[:k], pending[k+1:]...)
			mk := func(typ string) *eventv1.Event {
				return &eventv1.Event{EventId: domain.EventID(cmd.GetCommandId(), typ), ExecutionId: "x", Type: typ, Step: cmd.GetStep(), CommandId: cmd.GetCommandId(), Iteration: cmd.GetIteration(), Attempt: cmd.GetAttempt()}
			}
			apply(mk(domain.EventCommandStarted))
			if rapid.IntRange(0, 9).Draw(t, "fail") == 0 {
				e := mk(domain.EventCommandFailed)
				e.Error = &eventv1.ErrorInfo{Message: "boom"}
				apply(e)
			} else {
				d := mk(domain.EventCallDone)
				d.ResultJson = []byte(`{"ok":true,"pad":"` + strings.Repeat("x", resultPad) + `"}`)
				apply(d)
				apply(mk(domain.EventCommandCompleted))
			}
		}
		requireSameAsUnfiltered(t, c, st, in)

		names := make([]string, 0, len(st.GetSteps()))
		for name := range st.GetSteps() {
			names = append(names, name)
		}
		sort.Strings(names)
		if len(names) == 0 {
			return
		}
		statuses := []eventv1.StepStatus{eventv1.StepStatus_STEP_STATUS_UNSPECIFIED, eventv1.StepStatus_STEP_STATUS_RUNNING,
			eventv1.StepStatus_STEP_STATUS_COMPLETED, eventv1.StepStatus_STEP_STATUS_FAILED, eventv1.StepStatus_STEP_STATUS_SKIPPED}
		for range 8 {
			mut := proto.Clone(st).(*sbv1.ExecutionState)
			mut.Status = eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING
			if rapid.Bool().Draw(t, "rerun") {
				// A rerun's first decision: from is not entered yet, the steps the
				// original completed and routed are reused (as the fold of
				// playbook.started leaves them), the others not reached yet: a reused
				// step's arcs to them arrive.
				from := rapid.SampledFrom(names).Draw(t, "from")
				mut.FromStep = from
				for _, name := range names {
					s := mut.Steps[name]
					if name == from || !s.GetRouted() || s.GetStatus() != eventv1.StepStatus_STEP_STATUS_COMPLETED || rapid.IntRange(0, 3).Draw(t, "unreached "+name) == 0 {
						delete(mut.Steps, name)
						continue
					}
					s.Reused, s.HeldDropped = true, 0
				}
				requireSameAsUnfiltered(t, c, mut, in)
				continue
			}
			for _, name := range names {
				if !rapid.Bool().Draw(t, "change "+name) {
					continue
				}
				s := mut.Steps[name]
				s.Routed = rapid.Bool().Draw(t, "routed "+name)
				s.Status = rapid.SampledFrom(statuses).Draw(t, "status "+name)
				s.Reused = rapid.Bool().Draw(t, "reused "+name)
				if rapid.IntRange(0, 7).Draw(t, "held "+name) == 0 {
					s.HeldDropped = 1
				}
				if rapid.Bool().Draw(t, "retry "+name) {
					s.Retry = &sbv1.RetryState{NextAttempt: 2, FailedEventId: "f-" + name}
					if rapid.Bool().Draw(t, "timer "+name) {
						s.Retry.TimerId, s.Retry.Fired = "t-"+name, rapid.Bool().Draw(t, "fired "+name)
					}
				}
			}
			requireSameAsUnfiltered(t, c, mut, in)
		}
	})
}

// requireSameActive checks that an ActiveIndex's answer is the walk's.
func requireSameActive(t require.TestingT, want, got *Active) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	require.Equal(t, want.names, got.names, "active steps")
	require.Equal(t, want.reused, got.reused, "reused steps")
	require.Same(t, want.st, got.st, "the state")
}

// An index that noted more than maxTouched events since the last decision gives them up
// and walks: it stays bounded, and its answer stays the walk's.
func TestActiveIndexIsBounded(t *testing.T) {
	st := longChainState(10)
	var x ActiveIndex
	x.Of(st)
	for range maxTouched + 1 {
		st.Seq++
		x.Folded(st, &eventv1.Event{Seq: st.Seq, Step: "s9", Type: domain.EventCommandHeartbeat})
	}
	require.False(t, x.Tracks(st))
	require.LessOrEqual(t, cap(x.touched), 2*maxTouched)
	requireSameActive(t, ActiveOf(st), x.Of(st))
	require.True(t, x.Tracks(st))
}
