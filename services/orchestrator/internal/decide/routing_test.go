package decide

import (
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
)

// runAll drives a playbook to its end, completing every command with result.
func runAll(t *testing.T, s *sim, result func(step string) string) {
	t.Helper()
	for i := 0; i < 200; i++ {
		cmds := s.decide()
		if len(cmds) == 0 && len(s.pending()) == 0 {
			return
		}
		for _, c := range cmds {
			mk := func(typ string) *eventv1.Event {
				return &eventv1.Event{EventId: domain.EventID(c.GetCommandId(), typ), ExecutionId: "x", Type: typ, Step: c.GetStep(), CommandId: c.GetCommandId(), Iteration: c.GetIteration()}
			}
			done := mk(domain.EventCallDone)
			done.ResultJson = []byte(result(c.GetStep()))
			s.apply(mk(domain.EventCommandStarted), done, mk(domain.EventCommandCompleted))
		}
	}
	t.Fatal("playbook did not finish in 200 decisions")
}

func (s *sim) pending() []string {
	var out []string
	for name, st := range s.st.GetSteps() {
		if st.GetStatus() == eventv1.StepStatus_STEP_STATUS_RUNNING {
			out = append(out, name)
		}
	}
	return out
}

// count counts the log's events of typ of step; step.enter counts the step's entries,
// whichever event made them (domain.Enters), and command.issued the commands issued,
// alone or in groups (expanded).
func (s *sim) count(typ, step string) int {
	n := 0
	for _, ev := range expanded(s.log) {
		if is(ev, typ) && ev.GetStep() == step {
			n++
		}
	}
	return n
}

// seq is the seq of the log's first event of typ of step, as count reads typ.
func (s *sim) seq(typ, step string) int64 {
	for _, ev := range s.log {
		if is(ev, typ) && ev.GetStep() == step {
			return ev.GetSeq()
		}
	}
	return -1
}

// is reports whether ev is of typ, an entry of its step counting as a step.enter.
func is(ev *eventv1.Event, typ string) bool {
	if typ == domain.EventStepEnter {
		return domain.Enters(ev)
	}
	return ev.GetType() == typ
}

const diamond = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: d, path: t/p}
workflow:
  - step: start
    tool: {kind: noop}
    next: {spec: {mode: %s}, arcs: [{step: a, when: "{{ workload.a }}"}, {step: b, when: "{{ workload.b }}"}]}
  - step: a
    tool: {kind: noop}
    next: [{step: join}]
  - step: b
    tool: {kind: noop}
    next: [{step: join}]
  - step: join
    tool: {kind: noop}
`

func TestInclusiveFanOutJoinsOnce(t *testing.T) {
	s := newSim(t, sprintf(diamond, "inclusive"), `{"a":true,"b":true}`)
	runAll(t, s, func(string) string { return `{}` })
	require.Equal(t, 1, s.count(domain.EventStepEnter, "join"))
	require.Greater(t, s.seq(domain.EventStepEnter, "join"), s.seq(domain.EventCommandCompleted, "a"))
	require.Greater(t, s.seq(domain.EventStepEnter, "join"), s.seq(domain.EventCommandCompleted, "b"))
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, s.st.GetStatus())
}

func TestExclusiveTakesTheFirstMatchAndSkipsTheRest(t *testing.T) {
	s := newSim(t, sprintf(diamond, "exclusive"), `{"a":true,"b":true}`)
	runAll(t, s, func(string) string { return `{}` })
	require.Equal(t, 1, s.count(domain.EventStepEnter, "a"))
	require.Equal(t, 0, s.count(domain.EventStepEnter, "b"))
	require.Equal(t, 1, s.count(domain.EventStepSkipped, "b"))
	// The barrier of join sees b skipped and enters join once, after a.
	require.Equal(t, 1, s.count(domain.EventStepEnter, "join"))
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, s.st.GetStatus())
}

func TestSkipsPropagateThroughTheBarrier(t *testing.T) {
	s := newSim(t, sprintf(diamond, "inclusive"), `{"a":false,"b":false}`)
	runAll(t, s, func(string) string { return `{}` })
	require.Equal(t, 1, s.count(domain.EventStepSkipped, "a"))
	require.Equal(t, 1, s.count(domain.EventStepSkipped, "b"))
	require.Equal(t, 1, s.count(domain.EventStepSkipped, "join"))
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, s.st.GetStatus())
}

func TestBackEdgeReentersUntilTheConditionTurns(t *testing.T) {
	s := newSim(t, `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: page, path: t/p}
workflow:
  - step: start
    tool: {kind: noop}
    next: [{step: fetch, set: {ctx.page: 0}}]
  - step: fetch
    tool: {kind: noop}
    set: {ctx.page: "{{ ctx.page + 1 }}"}
    next:
      arcs:
        - {step: fetch, when: "{{ ctx.page < 3 }}"}
        - {step: end, when: "{{ ctx.page >= 3 }}"}
  - step: end
    tool: {kind: noop}
`, `{}`)
	runAll(t, s, func(string) string { return `{}` })
	require.Equal(t, 3, s.count(domain.EventStepEnter, "fetch"))
	require.Equal(t, 1, s.count(domain.EventStepEnter, "end"))
	require.JSONEq(t, `{"page":3}`, string(s.st.GetCtxJson()))
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, s.st.GetStatus())
}

func TestConditionThatCannotBeEvaluatedFailsTheRun(t *testing.T) {
	s := newSim(t, `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: bad, path: t/p}
workflow:
  - step: start
    tool: {kind: noop}
    next: [{step: end, when: "{{ workload.n + 'x' }}"}]
  - step: end
    tool: {kind: noop}
`, `{"n": 1}`)
	runAll(t, s, func(string) string { return `{}` })
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, s.st.GetStatus())
	require.Contains(t, s.st.GetError().GetMessage(), "failed to evaluate")
}

func TestNothingIsDecidedAfterCancellation(t *testing.T) {
	s := newSim(t, sprintf(diamond, "inclusive"), `{"a":true,"b":true}`)
	cmds := s.decide()
	require.Len(t, cmds, 1)
	s.complete(cmds[0])
	s.apply(&eventv1.Event{EventId: "cancel", ExecutionId: "x", Type: domain.EventPlaybookCancelled})
	evs, err := Decide(s.c, s.st)
	require.NoError(t, err)
	require.Empty(t, evs, "a cancelled execution issues nothing, even with a step left to route")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, s.st.GetStatus())
}
