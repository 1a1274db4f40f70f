package domain

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
)

// folder applies events with consecutive seqs.
type folder struct {
	t  *testing.T
	st *sbv1.ExecutionState
}

func newFolder(t *testing.T) *folder {
	f := &folder{t: t, st: NewState("x")}
	f.add(&eventv1.Event{Type: EventPlaybookStarted, PayloadJson: []byte(`{"workload":{}}`)})
	return f
}

func (f *folder) add(ev *eventv1.Event) {
	f.t.Helper()
	ev.Seq = f.st.GetSeq() + 1
	require.NoError(f.t, Apply(f.st, ev))
}

// iteration folds one loop iteration's events with the given result.
func (f *folder) iteration(step string, epoch, i int32, result []byte) {
	it := &eventv1.Iteration{Epoch: epoch, Index: i}
	cmd := CommandID("x", step, epoch, i, 1)
	f.add(&eventv1.Event{Type: EventCommandIssued, Step: step, CommandId: cmd, Iteration: it})
	f.add(&eventv1.Event{Type: EventCommandStarted, Step: step, CommandId: cmd, Iteration: it})
	f.add(&eventv1.Event{Type: EventCallDone, Step: step, CommandId: cmd, Iteration: it, ResultJson: result})
	f.add(&eventv1.Event{Type: EventCommandCompleted, Step: step, CommandId: cmd, Iteration: it})
}

func enterByRef(total int) []byte {
	b, _ := json.Marshal(EnterPayload{Epoch: 1, Loop: &LoopPayload{Iterator: "i", Total: int32(total), ItemsRef: &RefView{URI: "noetl://results/t/x/e1-items", Size: 10, ContentType: "application/json", SHA256: "ab"}}})
	return b
}

// A collection held by reference keeps only its reference and length in the state, and a
// loop too long for its list of results to fit the inline budget keeps no per-iteration
// data at all: the state's size does not grow with the iterations done.
func TestLongLoopStateStaysFlat(t *testing.T) {
	const n = 20000
	f := newFolder(t)
	f.add(&eventv1.Event{Type: EventStepEnter, Step: "s", PayloadJson: enterByRef(n)})
	l := f.st.GetSteps()["s"].GetLoop()
	require.Equal(t, int32(n), l.GetTotal())
	require.Equal(t, "noetl://results/t/x/e1-items", l.GetItemsRef().GetUri())
	require.Empty(t, l.GetItemsJson())
	require.True(t, l.GetResultsOmitted())
	var sizeAt100 int
	for i := int32(0); i < n-1; i++ {
		f.iteration("s", 1, i, []byte(`{"ok":true}`))
		if i == 99 {
			sizeAt100 = proto.Size(f.st)
		}
	}
	// Only the varint counters and the last event id change size.
	require.InDelta(t, sizeAt100, proto.Size(f.st), 8)
	f.iteration("s", 1, n-1, []byte(`{"ok":true}`))
	s := f.st.GetSteps()["s"]
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_COMPLETED, s.GetStatus())
	require.True(t, LoopResultsPending(s))
	require.Nil(t, s.GetResultJson())
	require.Less(t, proto.Size(f.st), 2048)
}

// A short loop keeps its list of results until it would exceed the inline budget, then
// drops it and ends with the summary.
func TestLoopResultsOverTheInlineBudgetAreOmitted(t *testing.T) {
	f := newFolder(t)
	f.add(&eventv1.Event{Type: EventStepEnter, Step: "s", PayloadJson: []byte(`{"epoch":1,"loop":{"items":[1,2,3,4,5,6,7,8,9,10],"iterator":"i"}}`)})
	big := []byte(`"` + strings.Repeat("x", 10<<10) + `"`)
	for i := int32(0); i < 5; i++ {
		f.iteration("s", 1, i, big)
	}
	l := f.st.GetSteps()["s"].GetLoop()
	require.False(t, l.GetResultsOmitted())
	require.Len(t, l.GetResultsJson(), 10)
	for i := int32(5); i < 10; i++ {
		f.iteration("s", 1, i, big)
	}
	s := f.st.GetSteps()["s"]
	require.True(t, s.GetLoop().GetResultsOmitted())
	require.Nil(t, s.GetLoop().GetResultsJson())
	require.True(t, LoopResultsPending(s))
	require.Nil(t, s.GetResultJson())
	require.Nil(t, s.GetResultRef())
}

// A loop whose list of results went past the budget completes without a result in the
// state; the step.exit that routes it carries the assembled list's reference, which
// becomes the step's result. Folding from a snapshot taken while the result is pending
// gives the same state.
func TestLoopResultsByReferenceArriveWithStepExit(t *testing.T) {
	f := newFolder(t)
	f.add(&eventv1.Event{Type: EventStepEnter, EventId: "enter", Step: "s", PayloadJson: []byte(`{"epoch":1,"loop":{"items":[1,2,3,4,5,6,7,8],"iterator":"i"}}`)})
	require.Equal(t, int64(2), f.st.GetSteps()["s"].GetLoop().GetEnterSeq())
	big := []byte(`"` + strings.Repeat("x", 10<<10) + `"`)
	for i := int32(0); i < 8; i++ {
		f.iteration("s", 1, i, big)
	}
	s := f.st.GetSteps()["s"]
	require.True(t, LoopResultsPending(s))
	raw, err := proto.Marshal(f.st)
	require.NoError(t, err)

	ref := &eventv1.ResultRef{Uri: "noetl://results/t/x/" + LoopResultsID("enter"), Size: 82000, ContentType: "application/json", Sha256: "ab", ExtractedJson: LoopResultsExtracted(8)}
	exit := &eventv1.Event{Type: EventStepExit, Step: "s", PayloadJson: []byte(`{"fired":[]}`), ResultRef: ref}
	f.add(exit)
	s = f.st.GetSteps()["s"]
	require.False(t, LoopResultsPending(s))
	require.True(t, proto.Equal(ref, s.GetResultRef()))
	require.Nil(t, s.GetResultJson())
	v, ok := StepResult{Ref: RefViewOf(s.GetResultRef())}.Value().(map[string]any)
	require.True(t, ok)
	require.Equal(t, "array", v["_summary"])
	require.Equal(t, ref.GetUri(), v["_ref"])

	restored := &sbv1.ExecutionState{}
	require.NoError(t, proto.Unmarshal(raw, restored))
	require.NoError(t, Apply(restored, exit))
	require.True(t, proto.Equal(f.st, restored))

	// A later step.exit (a re-entry's) does not replace a routed loop's result.
	f.add(&eventv1.Event{Type: EventStepExit, Step: "s", ResultRef: &eventv1.ResultRef{Uri: "other"}})
	require.Equal(t, ref.GetUri(), f.st.GetSteps()["s"].GetResultRef().GetUri())
}

// An iteration's element in the list is its inline result, or its reference's scope view.
func TestIterationResult(t *testing.T) {
	b, err := IterationResult(&eventv1.Event{ResultJson: []byte(`{"a":1}`)})
	require.NoError(t, err)
	require.JSONEq(t, `{"a":1}`, string(b))
	b, err = IterationResult(&eventv1.Event{ResultRef: &eventv1.ResultRef{Uri: "u", Size: 9, ExtractedJson: []byte(`{"n":2}`)}})
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, json.Unmarshal(b, &v))
	require.Equal(t, "u", v["_ref"])
	require.Equal(t, float64(2), v["n"])
	ev := &eventv1.Event{Type: EventCallDone, Step: "s", Iteration: &eventv1.Iteration{Epoch: 2, Index: 3}}
	i, ok := IsIterationResult(ev, "s", 2, 4)
	require.True(t, ok)
	require.Equal(t, 3, i)
	for _, c := range []struct {
		step         string
		epoch, total int
	}{{"t", 2, 4}, {"s", 1, 4}, {"s", 2, 3}} {
		_, ok := IsIterationResult(ev, c.step, int32(c.epoch), c.total)
		require.False(t, ok)
	}
}

// Within the budget the result is the index-aligned list, as before.
func TestShortLoopKeepsItsResults(t *testing.T) {
	f := newFolder(t)
	f.add(&eventv1.Event{Type: EventStepEnter, Step: "s", PayloadJson: []byte(`{"epoch":1,"loop":{"items":["a","b","c"],"iterator":"i"}}`)})
	f.iteration("s", 1, 1, []byte(`2`))
	f.iteration("s", 1, 0, []byte(`1`))
	f.iteration("s", 1, 2, nil)
	require.JSONEq(t, `[1,2,null]`, string(f.st.GetSteps()["s"].GetResultJson()))
	require.Equal(t, 3, LoopTotal(f.st.GetSteps()["s"].GetLoop()))
}

// A state written before LoopState.total existed counts its inline items.
func TestLoopTotalOfAnOldState(t *testing.T) {
	require.Equal(t, 2, LoopTotal(&sbv1.LoopState{ItemsJson: [][]byte{[]byte("1"), []byte("2")}}))
	require.Equal(t, 0, LoopTotal(nil))
}
