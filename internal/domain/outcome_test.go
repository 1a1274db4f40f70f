package domain

import (
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// memLog is an execution's log as the materializer's writer keeps it: it drops an event whose
// id it holds (a duplicate) and one whose OutcomeRival it holds (a second outcome), and
// folds the rest.
type memLog struct {
	f   *folder
	ids map[string]bool
}

func newLog(t *testing.T) *memLog { return &memLog{f: newFolder(t), ids: map[string]bool{}} }

// append offers ev to the log and reports what became of it.
func (l *memLog) append(ev *eventv1.Event) string {
	switch {
	case l.ids[ev.GetEventId()]:
		return "duplicate"
	case OutcomeRival(ev) != "" && l.ids[OutcomeRival(ev)]:
		return "refused"
	}
	l.ids[ev.GetEventId()] = true
	l.f.add(ev)
	return "kept"
}

// outcome is a worker's event for command cmd of step s (iteration it), with the id the
// worker gives it.
func outcome(s, cmd string, it *eventv1.Iteration, typ string) *eventv1.Event {
	return &eventv1.Event{EventId: EventID(cmd, typ), Type: typ, Step: s, CommandId: cmd, Attempt: 1, Iteration: it}
}

func withResult(ev *eventv1.Event, result string) *eventv1.Event {
	ev.ResultJson = []byte(result)
	return ev
}

func withError(ev *eventv1.Event, msg string) *eventv1.Event {
	ev.Error = &eventv1.ErrorInfo{Code: "tool_error", Message: msg}
	return ev
}

// TestFirstOutcomeOfACommandIsKept replays the duplicate outcomes a redelivered command
// produces (runs A and B of one command, each as the worker publishes it) through the log
// and the fold: one terminal event per command stays, and the step ends as it says.
func TestFirstOutcomeOfACommandIsKept(t *testing.T) {
	it := &eventv1.Iteration{Epoch: 1, Index: -1}
	cmd := CommandID("x", "s", 1, -1, 1)
	ev := func(typ string) *eventv1.Event { return outcome("s", cmd, it, typ) }
	done := func(result string) *eventv1.Event { return withResult(ev(EventCallDone), result) }
	callErr := func(msg string) *eventv1.Event { return withError(ev(EventCallError), msg) }
	failed := func(msg string) *eventv1.Event { return withError(ev(EventCommandFailed), msg) }
	completed := func() *eventv1.Event { return ev(EventCommandCompleted) }

	for _, tc := range []struct {
		name       string
		events     []*eventv1.Event
		fates      []string
		status     eventv1.StepStatus
		result     string // "" for none
		errMessage string // "" for none
	}{
		{
			name:   "call.done twice with different results",
			events: []*eventv1.Event{done(`{"run":"A"}`), done(`{"run":"B"}`), completed()},
			fates:  []string{"kept", "duplicate", "kept"},
			status: eventv1.StepStatus_STEP_STATUS_COMPLETED, result: `{"run":"A"}`,
		},
		{
			name:   "command.completed twice",
			events: []*eventv1.Event{done(`{"run":"A"}`), completed(), done(`{"run":"B"}`), completed()},
			fates:  []string{"kept", "kept", "duplicate", "duplicate"},
			status: eventv1.StepStatus_STEP_STATUS_COMPLETED, result: `{"run":"A"}`,
		},
		{
			name:   "call.done then call.error: a second run fails after the first completed",
			events: []*eventv1.Event{done(`{"run":"A"}`), completed(), callErr("B failed"), failed("B failed")},
			fates:  []string{"kept", "kept", "refused", "refused"},
			status: eventv1.StepStatus_STEP_STATUS_COMPLETED, result: `{"run":"A"}`,
		},
		{
			name:   "command.completed then command.failed",
			events: []*eventv1.Event{done(`{"run":"A"}`), completed(), failed("B failed")},
			fates:  []string{"kept", "kept", "refused"},
			status: eventv1.StepStatus_STEP_STATUS_COMPLETED, result: `{"run":"A"}`,
		},
		{
			name:   "a success after the failure",
			events: []*eventv1.Event{callErr("A failed"), failed("A failed"), done(`{"run":"B"}`), completed()},
			fates:  []string{"kept", "kept", "refused", "refused"},
			status: eventv1.StepStatus_STEP_STATUS_FAILED, errMessage: "A failed",
		},
		{
			// Two runs overlapped: both call events precede any terminal event, and the
			// first terminal event decides.
			name:   "call.done then call.error before either terminal event",
			events: []*eventv1.Event{done(`{"run":"A"}`), callErr("B failed"), failed("B failed"), completed()},
			fates:  []string{"kept", "kept", "kept", "refused"},
			status: eventv1.StepStatus_STEP_STATUS_FAILED, result: `{"run":"A"}`, errMessage: "B failed",
		},
		{
			// Run A's command.failed never got into the stream (its publish failed after
			// the first message): run B's success is the outcome, not a step left running.
			name:   "a failure without its terminal event, then a success",
			events: []*eventv1.Event{callErr("A failed"), done(`{"run":"B"}`), completed()},
			fates:  []string{"kept", "kept", "kept"},
			status: eventv1.StepStatus_STEP_STATUS_COMPLETED, result: `{"run":"B"}`, errMessage: "A failed",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLog(t)
			l.f.add(&eventv1.Event{EventId: "enter", Type: EventStepEnter, Step: "s", PayloadJson: []byte(`{"epoch":1}`), Iteration: it})
			l.f.add(&eventv1.Event{EventId: "issued", Type: EventCommandIssued, Step: "s", CommandId: cmd, Attempt: 1, Iteration: it})
			l.append(ev(EventCommandStarted))
			var fates []string
			for _, e := range tc.events {
				fates = append(fates, l.append(e))
			}
			require.Equal(t, tc.fates, fates)
			terminals := 0
			for id := range l.ids {
				if id == EventID(cmd, EventCommandCompleted) || id == EventID(cmd, EventCommandFailed) {
					terminals++
				}
			}
			require.Equal(t, 1, terminals, "one terminal event of the command in the log")
			s := l.f.st.GetSteps()["s"]
			require.Equal(t, tc.status, s.GetStatus())
			require.Equal(t, int32(0), l.f.st.GetRunning())
			if tc.result == "" {
				require.Empty(t, s.GetResultJson())
			} else {
				require.JSONEq(t, tc.result, string(s.GetResultJson()))
			}
			require.Equal(t, tc.errMessage, s.GetError().GetMessage())
			if tc.status == eventv1.StepStatus_STEP_STATUS_FAILED {
				require.Equal(t, []string{"s"}, l.f.st.GetFailedSteps())
			} else {
				require.Empty(t, l.f.st.GetFailedSteps())
			}
		})
	}
}

// TestSecondOutcomeDoesNotEndARetryOrALoop: an old attempt's late success does not end a
// step waiting on its retry timer, and a second run's failure of a completed loop
// iteration does not fail its loop.
func TestSecondOutcomeDoesNotEndARetryOrALoop(t *testing.T) {
	l := newLog(t)
	it := &eventv1.Iteration{Epoch: 1, Index: -1}
	r1 := CommandID("x", "r", 1, -1, 1)
	l.f.add(&eventv1.Event{EventId: "enter-r", Type: EventStepEnter, Step: "r", PayloadJson: []byte(`{"epoch":1}`), Iteration: it})
	l.f.add(&eventv1.Event{EventId: "issued-r1", Type: EventCommandIssued, Step: "r", CommandId: r1, Attempt: 1, Iteration: it})
	fail := withError(outcome("r", r1, it, EventCommandFailed), "try again")
	fail.PayloadJson = []byte(`{"retry":{"attempts":3,"delay_seconds":60}}`)
	require.Equal(t, "kept", l.append(withError(outcome("r", r1, it, EventCallError), "try again")))
	require.Equal(t, "kept", l.append(fail))
	r := l.f.st.GetSteps()["r"]
	require.NotNil(t, r.GetRetry(), "a retry is pending")
	// Attempt 1 redelivered: it succeeds this time.
	require.Equal(t, "refused", l.append(withResult(outcome("r", r1, it, EventCallDone), `{"late":true}`)))
	require.Equal(t, "refused", l.append(outcome("r", r1, it, EventCommandCompleted)))
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_RUNNING, r.GetStatus(), "still waiting on its timer")
	require.NotNil(t, r.GetRetry())
	require.Empty(t, r.GetResultJson())

	// A loop of two iterations: iteration 0 completes, and its second run fails.
	l.f.add(&eventv1.Event{EventId: "enter-l", Type: EventStepEnter, Step: "l", PayloadJson: []byte(`{"epoch":1,"loop":{"iterator":"i","items":[1,2]}}`), Iteration: it})
	for i := range int32(2) {
		iit := &eventv1.Iteration{Epoch: 1, Index: i}
		l.f.add(&eventv1.Event{EventId: []string{"issued-l0", "issued-l1"}[i], Type: EventCommandIssued, Step: "l", CommandId: CommandID("x", "l", 1, i, 1), Attempt: 1, Iteration: iit})
	}
	i0 := &eventv1.Iteration{Epoch: 1, Index: 0}
	c0 := CommandID("x", "l", 1, 0, 1)
	require.Equal(t, "kept", l.append(withResult(outcome("l", c0, i0, EventCallDone), `"a"`)))
	require.Equal(t, "kept", l.append(outcome("l", c0, i0, EventCommandCompleted)))
	require.Equal(t, "refused", l.append(withError(outcome("l", c0, i0, EventCallError), "second run failed")))
	require.Equal(t, "refused", l.append(withError(outcome("l", c0, i0, EventCommandFailed), "second run failed")))
	loop := l.f.st.GetSteps()["l"]
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_RUNNING, loop.GetStatus(), "the loop waits for iteration 1")
	require.Equal(t, int32(1), loop.GetLoop().GetDone())
	require.Nil(t, loop.GetError())
	require.Empty(t, l.f.st.GetFailedSteps())

	i1 := &eventv1.Iteration{Epoch: 1, Index: 1}
	c1 := CommandID("x", "l", 1, 1, 1)
	require.Equal(t, "kept", l.append(withResult(outcome("l", c1, i1, EventCallDone), `"b"`)))
	require.Equal(t, "kept", l.append(outcome("l", c1, i1, EventCommandCompleted)))
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_COMPLETED, loop.GetStatus())
	require.JSONEq(t, `["a","b"]`, string(loop.GetResultJson()))
}

func TestOutcomeRival(t *testing.T) {
	c := "c1"
	for typ, want := range map[string]string{
		EventCallDone:         EventID(c, EventCommandFailed),
		EventCommandCompleted: EventID(c, EventCommandFailed),
		EventCallError:        EventID(c, EventCommandCompleted),
		EventCommandFailed:    EventID(c, EventCommandCompleted),
		EventCommandStarted:   "",
		EventCommandIssued:    "",
		EventStepExit:         "",
	} {
		require.Equal(t, want, OutcomeRival(&eventv1.Event{Type: typ, CommandId: c}), typ)
	}
	require.Empty(t, OutcomeRival(&eventv1.Event{Type: EventCallDone}), "no command")
}
