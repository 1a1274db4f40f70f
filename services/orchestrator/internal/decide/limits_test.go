package decide

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
)

// cycle is the probe's playbook, start -> a, a -> b, b -> a, with room for a limits block.
const cycle = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: cycle, path: t/p}
%s
workflow:
  - step: start
    next: a
  - step: a
    next: b
  - step: b
    next: a
`

// drive runs decisions with in until the execution ends or maxDecisions pass, completing
// every command it issues with result.
func (s *sim) drive(in Inputs, maxDecisions int, result func(cmd *eventv1.Event) string) {
	s.t.Helper()
	for i := 0; i < maxDecisions; i++ {
		requireSameAsUnfiltered(s.t, s.c, s.st, in)
		evs, err := DecideWith(s.c, s.st, in)
		require.NoError(s.t, err)
		again, err := DecideWith(s.c, s.st, in)
		require.NoError(s.t, err)
		require.Equal(s.t, ids(evs), ids(again), "decide must be deterministic")
		s.apply(evs...)
		if domain.IsTerminalStatus(s.st.GetStatus()) {
			return
		}
		for _, ev := range expanded(evs) {
			if ev.GetType() != domain.EventCommandIssued {
				continue
			}
			mk := func(typ string) *eventv1.Event {
				return &eventv1.Event{EventId: domain.EventID(ev.GetCommandId(), typ), ExecutionId: "x", Type: typ, Step: ev.GetStep(), CommandId: ev.GetCommandId(), Iteration: ev.GetIteration(), Attempt: ev.GetAttempt()}
			}
			done := mk(domain.EventCallDone)
			done.ResultJson = []byte(result(ev))
			s.apply(mk(domain.EventCommandStarted), done, mk(domain.EventCommandCompleted))
		}
	}
	s.t.Fatalf("the execution did not end in %d decisions", maxDecisions)
}

func ok(*eventv1.Event) string { return `{"ok":true}` }

func TestCycleEndsFailedAtThePlaybooksLimitOfEntries(t *testing.T) {
	s := newSim(t, fmt.Sprintf(cycle, "executor: {spec: {policy: {limits: {max_step_entries: 3}}}}"), `{}`)
	s.drive(Inputs{}, 100, ok)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, s.st.GetStatus())
	require.Equal(t, CodeLimitExceeded, s.st.GetError().GetCode())
	require.Equal(t, `step "a": would be entered 4 times, over the limit of 3 (executor.spec.policy.limits.max_step_entries)`, s.st.GetError().GetMessage())
	require.Equal(t, 3, s.count(domain.EventStepEnter, "a"))
	require.Equal(t, 3, s.count(domain.EventStepEnter, "b"))
	last := s.log[len(s.log)-1]
	require.Equal(t, domain.EventPlaybookFailed, last.GetType(), "the terminal event ends the log")
	var p domain.TerminalPayload
	require.NoError(t, json.Unmarshal(last.GetPayloadJson(), &p))
	require.Equal(t, []string{"a"}, p.FailedSteps)
	// playbook.started; start, a three times and b twice, five events each (issued with
	// the entry, started, done, completed, exit); b's last run, never routed (four); the
	// terminal.
	require.Len(t, s.log, 1+6*5+4+1)
}

func TestOperatorLimitsAreCeilings(t *testing.T) {
	tenant := Limits{StepEntries: Limit{Max: 2, Source: `max_step_entries of tenant "t" (NOETL_TENANT_LIMITS)`}}
	// The playbook asks for more than the tenant may have: the tenant's cap wins.
	s := newSim(t, fmt.Sprintf(cycle, "executor: {spec: {policy: {limits: {max_step_entries: 50}}}}"), `{}`)
	s.drive(Inputs{Limits: tenant}, 100, ok)
	require.Equal(t, `step "a": would be entered 3 times, over the limit of 2 (max_step_entries of tenant "t" (NOETL_TENANT_LIMITS))`, s.st.GetError().GetMessage())
	require.Equal(t, 2, s.count(domain.EventStepEnter, "a"))

	// Without limits of its own, the playbook gets the operator's.
	s = newSim(t, fmt.Sprintf(cycle, ""), `{}`)
	s.drive(Inputs{Limits: Limits{StepEntries: Limit{Max: 4, Source: "NOETL_MAX_STEP_ENTRIES"}}}, 100, ok)
	require.Equal(t, `step "a": would be entered 5 times, over the limit of 4 (NOETL_MAX_STEP_ENTRIES)`, s.st.GetError().GetMessage())
}

func TestEffectiveLimits(t *testing.T) {
	def := Limits{StepEntries: Limit{Max: DefaultMaxStepEntries, Source: "the default max_step_entries"}, Events: Limit{Max: DefaultMaxEvents, Source: "the default max_events"}}
	require.Equal(t, def, EffectiveLimits(playbook.Limits{}, Limits{}))
	own := func(n int64, f string) Limit { return Limit{Max: n, Source: "executor.spec.policy.limits." + f} }
	require.Equal(t, Limits{StepEntries: own(5, "max_step_entries"), Events: own(70, "max_events")},
		EffectiveLimits(playbook.Limits{MaxStepEntries: 5, MaxEvents: 70}, Limits{}))
	require.Equal(t, Limits{StepEntries: def.StepEntries, Events: def.Events},
		EffectiveLimits(playbook.Limits{MaxStepEntries: DefaultMaxStepEntries + 1, MaxEvents: DefaultMaxEvents * 10}, Limits{}), "a playbook cannot raise the defaults")
	op := Limits{StepEntries: Limit{Max: 100, Source: "tenant"}, Events: Limit{Max: 20_000_000, Source: "global"}}
	require.Equal(t, Limits{StepEntries: own(100, "max_step_entries"), Events: own(5_000_000, "max_events")},
		EffectiveLimits(playbook.Limits{MaxStepEntries: 100, MaxEvents: 5_000_000}, op), "an operator may raise the defaults, a playbook lower the operator's")
	require.Equal(t, op, EffectiveLimits(playbook.Limits{MaxStepEntries: 101}, op))
}

func TestPaginationBackEdgeWithinTheLimitCompletes(t *testing.T) {
	const pages = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: pages, path: t/p}
executor: {spec: {policy: {limits: {max_step_entries: %d}}}}
workflow:
  - step: start
    next: page
  - step: page
    tool: {kind: noop}
    set: {ctx.n: "{{ (ctx.n | default(0)) + 1 }}"}
    next:
      arcs:
        - {step: page, when: "{{ ctx.n < 5 }}"}
        - step: end
  - step: end
    tool: {kind: noop}
`
	s := newSim(t, fmt.Sprintf(pages, 5), `{}`)
	s.drive(Inputs{}, 100, ok)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, s.st.GetStatus(), "%v", s.st.GetError())
	require.Equal(t, 5, s.count(domain.EventStepEnter, "page"))

	s = newSim(t, fmt.Sprintf(pages, 4), `{}`)
	s.drive(Inputs{}, 100, ok)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, s.st.GetStatus())
	require.Equal(t, `step "page": would be entered 5 times, over the limit of 4 (executor.spec.policy.limits.max_step_entries)`, s.st.GetError().GetMessage())
}

func TestLoopIterationsAreNotEntries(t *testing.T) {
	for _, mode := range []string{"sequential", "parallel"} {
		s := newSim(t, fmt.Sprintf(`
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: l, path: t/p}
executor: {spec: {policy: {limits: {max_step_entries: 1}}}}
workflow:
  - step: start
    loop: {in: "{{ range(300) | list }}", iterator: i, spec: {mode: %s, max_in_flight: 7}}
    tool: {kind: noop}
`, mode), `{}`)
		s.drive(Inputs{}, 400, ok)
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, s.st.GetStatus(), "%s: %v", mode, s.st.GetError())
		require.Equal(t, 300, s.count(domain.EventCommandIssued, "start"), mode)
	}
}

func TestEventLimitStopsALoop(t *testing.T) {
	s := newSim(t, `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: l, path: t/p}
executor: {spec: {policy: {limits: {max_events: 20}}}}
workflow:
  - step: start
    loop: {in: "{{ range(100) | list }}", iterator: i}
    tool: {kind: noop}
`, `{}`)
	s.drive(Inputs{}, 200, ok)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, s.st.GetStatus())
	require.Equal(t, CodeLimitExceeded, s.st.GetError().GetCode())
	// playbook.started, step.enter, then four events per iteration: the fifth iteration
	// would start at seq 22.
	require.Equal(t, `step "start": the execution has 22 events, at the limit of 20 (executor.spec.policy.limits.max_events); not issuing iteration 5`, s.st.GetError().GetMessage())
	require.Equal(t, 5, s.count(domain.EventCommandIssued, "start"))
	require.Len(t, s.log, 23)
}

func TestEventLimitStopsACycle(t *testing.T) {
	s := newSim(t, fmt.Sprintf(cycle, ""), `{}`)
	s.drive(Inputs{Limits: Limits{Events: Limit{Max: 50, Source: "NOETL_MAX_EVENTS"}}}, 100, ok)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, s.st.GetStatus())
	require.Regexp(t, `^step "[ab]": the execution has 5\d events, at the limit of 50 \(NOETL_MAX_EVENTS\); not entering it$`, s.st.GetError().GetMessage())
	require.Less(t, len(s.log), 50+8, "at most one entry past the limit")
}

func TestRetriesAreNotEntries(t *testing.T) {
	s := newSim(t, `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: r, path: t/p}
executor: {spec: {policy: {limits: {max_step_entries: 1}}}}
workflow:
  - step: start
    tool: {kind: noop}
`, `{}`)
	for attempt := int32(1); attempt <= 3; attempt++ {
		cmds := s.decide()
		if attempt > 1 {
			// The timer of the previous failure was scheduled; fire it and decide again.
			require.Empty(t, cmds)
			sched := s.log[len(s.log)-1]
			require.Equal(t, domain.EventTimerScheduled, sched.GetType())
			var tp domain.TimerPayload
			require.NoError(t, json.Unmarshal(sched.GetPayloadJson(), &tp))
			s.apply(&eventv1.Event{EventId: domain.EventID(tp.TimerID, domain.EventTimerFired), ExecutionId: "x", Type: domain.EventTimerFired, Step: "start", PayloadJson: sched.GetPayloadJson()})
			cmds = s.decide()
		}
		require.Len(t, cmds, 1)
		require.Equal(t, attempt, cmds[0].GetAttempt())
		if attempt == 3 {
			s.complete(cmds[0])
			break
		}
		mk := func(typ string) *eventv1.Event {
			return &eventv1.Event{EventId: domain.EventID(cmds[0].GetCommandId(), typ), ExecutionId: "x", Type: typ, Step: "start", CommandId: cmds[0].GetCommandId(), Attempt: attempt}
		}
		failed := mk(domain.EventCommandFailed)
		failed.PayloadJson, _ = json.Marshal(domain.FailedPayload{Retry: &domain.RetryRequest{Attempts: 3, DelaySeconds: 1}})
		failed.CommitTime = timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		failed.Error = &eventv1.ErrorInfo{Message: "boom", Retryable: true}
		s.apply(mk(domain.EventCommandStarted), failed)
		require.Empty(t, s.decide(), "the retry is scheduled on a timer")
	}
	runAll(t, s, func(string) string { return `{"ok":true}` })
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, s.st.GetStatus(), "%v", s.st.GetError())
	require.Equal(t, 1, s.count(domain.EventStepEnter, "start"))
}

// TestDroppedHeldEventsFailTheExecution: a step that had to drop events it could not hold
// until their command was issued (StepState.HeldDropped) fails the execution with
// limit_exceeded naming the step and the bounds, instead of waiting for a completion the
// state no longer has.
func TestDroppedHeldEventsFailTheExecution(t *testing.T) {
	s := newSim(t, fmt.Sprintf(cycle, ""), `{}`)
	s.decide()
	s.st.GetSteps()["start"].HeldDropped = 7
	evs, err := DecideWith(s.c, s.st, Inputs{})
	require.NoError(t, err)
	require.NotEmpty(t, evs)
	last := evs[len(evs)-1]
	require.Equal(t, domain.EventPlaybookFailed, last.GetType())
	require.Equal(t, CodeLimitExceeded, last.GetError().GetCode())
	require.Equal(t, fmt.Sprintf(`step "start": 7 events of its commands arrived before the log showed those commands issued (the tail of the log was lost) and were dropped: a step holds at most %d such events, %d bytes; the execution cannot finish reliably`, domain.MaxHeldEvents, domain.MaxHeldBytes), last.GetError().GetMessage())
}
