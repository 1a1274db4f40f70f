package domain

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// TestLostLogTailDoesNotStrandTheStep replays the sequence the chaos probe found: the
// batch holding step b's step.enter and command.issued was committed, its command
// forwarded, and then lost (Postgres stopped with synchronous_commit off, or an
// asynchronous replica promoted); the worker's command.started, call.done and
// command.completed were committed first, and the reconciler published the lost enter and
// issue again after them. The step completes with the worker's result, once.
func TestLostLogTailDoesNotStrandTheStep(t *testing.T) {
	f := newFolder(t)
	it := &eventv1.Iteration{Epoch: 1, Index: -1}
	cmd := CommandID("x", "b", 1, -1, 1)
	enter := func() {
		f.add(&eventv1.Event{EventId: "enter-b-1", Type: EventStepEnter, Step: "b", PayloadJson: []byte(`{"epoch":1}`), Iteration: it})
	}
	issue := func() {
		f.add(&eventv1.Event{EventId: "issued-b-1", Type: EventCommandIssued, Step: "b", CommandId: cmd, Attempt: 1, Iteration: it})
	}
	// The worker's events arrive first.
	f.add(&eventv1.Event{Type: EventCommandStarted, Step: "b", CommandId: cmd, Attempt: 1, Iteration: it})
	f.add(&eventv1.Event{Type: EventCallDone, Step: "b", CommandId: cmd, Attempt: 1, Iteration: it, ResultJson: []byte(`{"n":7}`)})
	f.add(&eventv1.Event{Type: EventCommandCompleted, Step: "b", CommandId: cmd, Attempt: 1, Iteration: it})
	s := f.st.GetSteps()["b"]
	require.Len(t, s.GetHeld(), 3, "held until the command is issued")
	require.Equal(t, int32(0), f.st.GetRunning())

	enter()
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_RUNNING, s.GetStatus())
	require.Len(t, s.GetHeld(), 3, "still no command.issued")
	issue()
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_COMPLETED, s.GetStatus(), "the held completion applies")
	require.JSONEq(t, `{"n":7}`, string(s.GetResultJson()))
	require.Empty(t, s.GetHeld())
	require.Equal(t, int32(0), f.st.GetRunning())
	require.Empty(t, f.st.GetFailedSteps())
}

// TestHeldEventsOfALaterEpochAndAttempt: a completion of a later epoch waits for that
// epoch's enter and issue; one of a retry's second attempt waits for that attempt's issue;
// late events of older epochs and attempts are still ignored, not held.
func TestHeldEventsOfALaterEpochAndAttempt(t *testing.T) {
	f := newFolder(t)
	it1, it2 := &eventv1.Iteration{Epoch: 1, Index: -1}, &eventv1.Iteration{Epoch: 2, Index: -1}
	c1, c2 := CommandID("x", "p", 1, -1, 1), CommandID("x", "p", 2, -1, 1)
	f.add(&eventv1.Event{Type: EventStepEnter, Step: "p", PayloadJson: []byte(`{"epoch":1}`), Iteration: it1})
	f.add(&eventv1.Event{Type: EventCommandIssued, Step: "p", CommandId: c1, Attempt: 1, Iteration: it1})
	f.add(&eventv1.Event{Type: EventCommandCompleted, Step: "p", CommandId: c1, Attempt: 1, Iteration: it1})
	s := f.st.GetSteps()["p"]
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_COMPLETED, s.GetStatus())

	// Epoch 2's command completes before its (lost, republished) enter and issue.
	f.add(&eventv1.Event{Type: EventCommandCompleted, Step: "p", CommandId: c2, Attempt: 1, Iteration: it2})
	require.Len(t, s.GetHeld(), 1)
	// A late duplicate of epoch 1's completion is ignored, not held.
	f.add(&eventv1.Event{Type: EventCommandCompleted, Step: "p", CommandId: c1, Attempt: 1, Iteration: it1})
	require.Len(t, s.GetHeld(), 1)
	f.add(&eventv1.Event{Type: EventStepEnter, Step: "p", PayloadJson: []byte(`{"epoch":2}`), Iteration: it2})
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_RUNNING, s.GetStatus())
	f.add(&eventv1.Event{Type: EventCommandIssued, Step: "p", CommandId: c2, Attempt: 1, Iteration: it2})
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_COMPLETED, s.GetStatus())
	require.Empty(t, s.GetHeld())

	// A retry: attempt 1 failed with a retry pending; attempt 2's failure arrives before
	// its issue.
	r1, r2 := CommandID("x", "r", 1, -1, 1), CommandID("x", "r", 1, -1, 2)
	f.add(&eventv1.Event{Type: EventStepEnter, Step: "r", PayloadJson: []byte(`{"epoch":1}`), Iteration: it1})
	f.add(&eventv1.Event{Type: EventCommandIssued, Step: "r", CommandId: r1, Attempt: 1, Iteration: it1})
	f.add(&eventv1.Event{Type: EventCommandFailed, Step: "r", CommandId: r1, Attempt: 1, Iteration: it1, PayloadJson: []byte(`{"retry":{"attempts":3,"delay_seconds":1}}`)})
	r := f.st.GetSteps()["r"]
	require.NotNil(t, r.GetRetry())
	f.add(&eventv1.Event{Type: EventCommandCompleted, Step: "r", CommandId: r2, Attempt: 2, Iteration: it1})
	require.Len(t, r.GetHeld(), 1)
	f.add(&eventv1.Event{Type: EventCommandIssued, Step: "r", CommandId: r2, Attempt: 2, Iteration: it1})
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_COMPLETED, r.GetStatus())
	require.Empty(t, r.GetHeld())
}

// TestHeldEventsAreBounded: a step holds at most MaxHeldEvents events and MaxHeldBytes
// bytes; an event past either bound is dropped and counted, a repeated event id is dropped
// as a duplicate, and releasing the held events empties the count of bytes.
func TestHeldEventsAreBounded(t *testing.T) {
	f := newFolder(t)
	it := &eventv1.Iteration{Epoch: 1, Index: 0}
	early := func(step string, i int, result []byte) *eventv1.Event {
		cmd := CommandID("x", step, 1, int32(i), 1)
		return &eventv1.Event{EventId: EventID(cmd, EventCallDone), Type: EventCallDone, Step: step, CommandId: cmd, Attempt: 1, Iteration: it, ResultJson: result}
	}
	for i := range MaxHeldEvents + 5 {
		f.add(early("loop", i, []byte(`1`)))
	}
	f.add(early("loop", 0, []byte(`1`))) // the same id again
	s := f.st.GetSteps()["loop"]
	require.Len(t, s.GetHeld(), MaxHeldEvents)
	require.EqualValues(t, 5, s.GetHeldDropped())
	var size int64
	for _, ev := range s.GetHeld() {
		size += int64(proto.Size(ev))
	}
	require.Equal(t, size, s.GetHeldBytes())

	// Large results reach the byte bound first.
	big := make([]byte, 200<<10)
	for i := range big {
		big[i] = 'a'
	}
	for i := range 6 {
		f.add(early("big", i, big))
	}
	b := f.st.GetSteps()["big"]
	require.Len(t, b.GetHeld(), 5, "five 200 KiB events fit 1 MiB, the sixth does not")
	require.EqualValues(t, 1, b.GetHeldDropped())
	require.LessOrEqual(t, b.GetHeldBytes(), int64(MaxHeldBytes))

	// Once the step's enter and issue arrive, what was held is applied and the bytes go.
	f.add(&eventv1.Event{EventId: "enter-big", Type: EventStepEnter, Step: "big", PayloadJson: []byte(`{"epoch":1,"loop":{"iterator":"i","items":[1,2,3,4,5,6]}}`), Iteration: &eventv1.Iteration{Epoch: 1, Index: -1}})
	require.Empty(t, b.GetHeld())
	require.Zero(t, b.GetHeldBytes())
	require.EqualValues(t, 1, b.GetHeldDropped(), "a dropped event stays counted")
}
