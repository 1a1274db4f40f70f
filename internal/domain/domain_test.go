package domain

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

func TestIDsAreDeterministicAndDistinct(t *testing.T) {
	a := CommandID("exec", "step", 1, -1, 1)
	require.Equal(t, a, CommandID("exec", "step", 1, -1, 1))
	for _, other := range []string{
		CommandID("exec", "step", 2, -1, 1), CommandID("exec", "step", 1, 0, 1),
		CommandID("exec", "step", 1, -1, 2), CommandID("exec", "stepx", 1, -1, 1), CommandID("exe", "cstep", 1, -1, 1),
	} {
		require.NotEqual(t, a, other)
	}
	require.Equal(t, EventID(a, EventCallDone), EventID(a, EventCallDone))
	require.NotEqual(t, EventID(a, EventCallDone), EventID(a, EventCommandCompleted))
	require.Len(t, a, 27)
}

func TestApplyRefusesGaps(t *testing.T) {
	st := NewState("e")
	require.NoError(t, Apply(st, &eventv1.Event{Seq: 1, Type: EventPlaybookStarted, PayloadJson: []byte(`{"path":"p","workload":{"a":1}}`)}))
	require.ErrorIs(t, Apply(st, &eventv1.Event{Seq: 3, Type: EventStepEnter, Step: "s"}), ErrGap)
	require.NoError(t, Apply(st, &eventv1.Event{Seq: 2, Type: EventStepEnter, Step: "s", PayloadJson: []byte(`{"epoch":1}`)}))
	require.Equal(t, int32(1), st.GetRunning())
	require.NoError(t, Apply(st, &eventv1.Event{Seq: 3, Type: EventCommandIssued, Step: "s", CommandId: "c1"}))
	// A late event of another command does not touch the step.
	require.NoError(t, Apply(st, &eventv1.Event{Seq: 4, Type: EventCommandCompleted, Step: "s", CommandId: "old"}))
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_RUNNING, st.GetSteps()["s"].GetStatus())
	require.NoError(t, Apply(st, &eventv1.Event{Seq: 5, Type: EventCallError, Step: "s", CommandId: "c1", Error: &eventv1.ErrorInfo{Message: "boom"}}))
	require.NoError(t, Apply(st, &eventv1.Event{Seq: 6, Type: EventCommandFailed, Step: "s", CommandId: "c1"}))
	require.Equal(t, []string{"s"}, st.GetFailedSteps())
	require.Equal(t, "boom", st.GetSteps()["s"].GetError().GetMessage())
	require.Equal(t, int32(0), st.GetRunning())
	require.NoError(t, Apply(st, &eventv1.Event{Seq: 7, Type: EventCtxUpdated, PayloadJson: []byte(`{"values":{"k":2}}`)}))
	require.JSONEq(t, `{"k":2}`, string(st.GetCtxJson()))
}

// FoldCopy is the event without its command, the original untouched.
func TestFoldCopyDropsOnlyTheCommand(t *testing.T) {
	ev := &eventv1.Event{EventId: "e1", ExecutionId: "x", Type: EventCommandIssued, Seq: 3, CommandId: "c1",
		Command: &eventv1.Command{CommandId: "c1", ContextJson: []byte(`{"workload":{}}`)}}
	c := FoldCopy(ev)
	require.Nil(t, c.GetCommand())
	require.NotNil(t, ev.GetCommand(), "the original keeps its command")
	c.Command = ev.GetCommand()
	require.True(t, proto.Equal(ev, c))
	c.Seq = 9
	require.EqualValues(t, 3, ev.GetSeq(), "a copy")
}
