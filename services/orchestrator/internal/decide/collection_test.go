package decide

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
)

// byRef plays the engine's offload: it rewrites a loop's step.enter to carry its collection
// by reference and returns the collection under that reference.
func byRef(t require.TestingT, evs []*eventv1.Event, in *Inputs) {
	for _, ev := range evs {
		if ev.GetType() != domain.EventStepEnter {
			continue
		}
		var p domain.EnterPayload
		require.NoError(t, json.Unmarshal(ev.GetPayloadJson(), &p))
		if p.Loop == nil {
			continue
		}
		uri := "noetl://results/t/x/" + ev.GetEventId() + "-items"
		in.Collections[uri] = p.Loop.Items
		p.Loop = &domain.LoopPayload{Iterator: p.Loop.Iterator, Total: int32(len(p.Loop.Items)), ItemsRef: &domain.RefView{URI: uri}}
		b, err := json.Marshal(p)
		require.NoError(t, err)
		ev.PayloadJson = b
	}
}

// A loop whose collection the state holds by reference issues each iteration with its item
// from the caller's inputs, and the decision asks for the collection while iterations are
// left to issue.
func TestLoopOverACollectionByReference(t *testing.T) {
	s := newSim(t, fmt.Sprintf(loopBook, "parallel"), `{"items":["a","b","c","d","e"]}`)
	in := Inputs{Collections: map[string][]json.RawMessage{}}
	evs, err := DecideWith(s.c, s.st, in)
	require.NoError(t, err)
	byRef(t, evs, &in)
	s.apply(evs...)
	l := s.st.GetSteps()["start"].GetLoop()
	require.Empty(t, l.GetItemsJson())
	require.Equal(t, int32(5), l.GetTotal())
	require.Len(t, NeededCollections(s.st), 1)
	uri := NeededCollections(s.st)[0].GetUri()

	// Without its collection the decision refuses to guess.
	_, err = Decide(s.c, s.st)
	require.ErrorIs(t, err, ErrCollectionMissing)

	pending := commandsOf(evs)
	require.Len(t, pending, 2)
	for len(pending) > 0 {
		cmd := pending[0]
		pending = pending[1:]
		s.complete(cmd)
		evs, err := DecideWith(s.c, s.st, in)
		require.NoError(t, err)
		s.apply(evs...)
		pending = append(pending, commandsOf(evs)...)
	}
	require.Empty(t, NeededCollections(s.st))
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_COMPLETED, s.st.GetSteps()["after"].GetStatus())
	require.JSONEq(t, `[{"item":"a","index":0},{"item":"b","index":1},{"item":"c","index":2},{"item":"d","index":3},{"item":"e","index":4}]`, string(s.st.GetSteps()["start"].GetResultJson()))
	require.NotEmpty(t, uri)
}

// sent reports whether ev issues a command a worker runs: a command.issued with its
// command (a cursor body refused over max_bytes carries none).
func sent(ev *eventv1.Event) bool {
	return ev.GetType() == domain.EventCommandIssued && ev.GetCommand() != nil
}

func commandsOf(evs []*eventv1.Event) []*eventv1.Event {
	var out []*eventv1.Event
	for _, ev := range expanded(evs) {
		if sent(ev) {
			out = append(out, ev)
		}
	}
	return out
}
