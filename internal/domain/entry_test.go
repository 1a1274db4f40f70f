package domain

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
)

// A step of one command entered by its command.issued (IssuedPayload.Enter) folds to the
// state a step.enter followed by the command.issued gives, in every epoch, whichever form
// the log holds; only the event the entry's id names differs.
func TestAnEntryInTheCommandFoldsAsAStepEnter(t *testing.T) {
	started := &eventv1.Event{Type: EventPlaybookStarted, PayloadJson: []byte(`{"path":"p","workload":{}}`)}
	issued := func(epoch int32, entry bool) *eventv1.Event {
		ev := &eventv1.Event{EventId: "issued-" + string(rune('0'+epoch)), Type: EventCommandIssued, Step: "s", CommandId: CommandID("e", "s", epoch, -1, 1), Attempt: 1, Iteration: &eventv1.Iteration{Epoch: epoch, Index: -1}}
		if entry {
			ev.PayloadJson = []byte(`{"enter":{"epoch":` + string(rune('0'+epoch)) + `}}`)
		}
		return ev
	}
	enter := func(epoch int32) *eventv1.Event {
		return &eventv1.Event{EventId: "enter-" + string(rune('0'+epoch)), Type: EventStepEnter, Step: "s", PayloadJson: []byte(`{"epoch":` + string(rune('0'+epoch)) + `}`), Iteration: &eventv1.Iteration{Epoch: epoch, Index: -1}}
	}
	done := func(epoch int32) *eventv1.Event {
		return &eventv1.Event{EventId: "done-" + string(rune('0'+epoch)), Type: EventCommandCompleted, Step: "s", CommandId: CommandID("e", "s", epoch, -1, 1), Attempt: 1, Iteration: &eventv1.Iteration{Epoch: epoch, Index: -1}, ResultJson: []byte(`{"n":1}`)}
	}
	exit := func(epoch int32) *eventv1.Event {
		return &eventv1.Event{EventId: "exit-" + string(rune('0'+epoch)), Type: EventStepExit, Step: "s", PayloadJson: []byte(`{"fired":["s"]}`)}
	}
	fold := func(evs ...*eventv1.Event) *sbv1.ExecutionState {
		st := NewState("e")
		for _, ev := range evs {
			ev = proto.Clone(ev).(*eventv1.Event)
			ev.Seq = st.GetSeq() + 1
			require.NoError(t, Apply(st, ev))
		}
		return st
	}
	older := []*eventv1.Event{started, enter(1), issued(1, false)}
	merged := []*eventv1.Event{started, issued(1, true)}
	for _, at := range []string{"entered", "completed", "routed", "entered again"} {
		o, m := fold(older...), fold(merged...)
		so, sm := o.GetSteps()["s"], m.GetSteps()["s"]
		require.Equal(t, "enter-"+string(rune('0'+so.GetEpoch())), so.GetEnterEventId(), at)
		require.Equal(t, "issued-"+string(rune('0'+sm.GetEpoch())), sm.GetEnterEventId(), at, "the entry's event")
		so.EnterEventId, sm.EnterEventId = "", ""
		o.Seq, m.Seq, o.LastEventId, m.LastEventId = 0, 0, "", ""
		require.True(t, proto.Equal(o, m), "%s: %v\n%v", at, o, m)
		switch at {
		case "entered":
			require.Equal(t, eventv1.StepStatus_STEP_STATUS_RUNNING, sm.GetStatus())
			require.Equal(t, int32(1), m.GetRunning())
			require.Equal(t, CommandID("e", "s", 1, -1, 1), sm.GetCommandId())
			older, merged = append(older, done(1)), append(merged, done(1))
		case "completed":
			require.Equal(t, eventv1.StepStatus_STEP_STATUS_COMPLETED, sm.GetStatus())
			older, merged = append(older, exit(1)), append(merged, exit(1))
		case "routed":
			require.True(t, sm.GetRouted())
			older, merged = append(older, enter(2), issued(2, false)), append(merged, issued(2, true))
		case "entered again":
			require.Equal(t, int32(2), sm.GetEpoch())
			require.Equal(t, eventv1.StepStatus_STEP_STATUS_RUNNING, sm.GetStatus())
			require.False(t, sm.GetRouted())
		}
	}
	// A retry's command.issued carries no entry: the epoch stays.
	retry := &eventv1.Event{Type: EventCommandIssued, Step: "s", CommandId: CommandID("e", "s", 2, -1, 2), Attempt: 2, Iteration: &eventv1.Iteration{Epoch: 2, Index: -1}}
	m := fold(append(merged, retry)...)
	require.Equal(t, int32(2), m.GetSteps()["s"].GetEpoch())
	require.Equal(t, int32(2), m.GetSteps()["s"].GetAttempt())
	require.False(t, Enters(retry))
	require.True(t, Enters(merged[1]))
	require.True(t, Enters(enter(1)))

	// A malformed entry is an error of the fold, naming the event type.
	bad := issued(1, false)
	bad.PayloadJson = []byte(`{"enter":`)
	st := fold(started)
	bad.Seq = 2
	require.ErrorContains(t, Apply(st, bad), "command.issued payload")
}
