package domain

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// TestStartedFoldsARerunsSeed: labels and origin go into the state, reused steps start
// completed (or skipped) and routed with their results and fired arcs, and the ctx is the
// seed's.
func TestStartedFoldsARerunsSeed(t *testing.T) {
	t.Parallel()
	ref := &eventv1.ResultRef{Uri: "noetl://results/t/orig/c1", Size: 9, Sha256: "ff", SchemaJson: `[{"name":"id","type":"int64"}]`, RowCount: 3}
	big := ReusedStep{Name: "big", Fired: []string{"next"}}
	require.NoError(t, big.SetRef(ref))
	p, err := json.Marshal(StartedPayload{Path: "p", Version: 2, Labels: map[string]string{"team": "data"}, RerunOf: "orig", FromStep: "next",
		Reused: []ReusedStep{{Name: "start", Result: json.RawMessage(`{"a":1}`), Fired: []string{"big"}}, big, {Name: "side", Skipped: true}},
		Ctx:    map[string]any{"k": "v"}})
	require.NoError(t, err)
	st := NewState("x")
	require.NoError(t, Apply(st, &eventv1.Event{Seq: 1, EventId: "e1", Type: EventPlaybookStarted, PayloadJson: p}))
	require.Equal(t, map[string]string{"team": "data"}, st.GetLabels())
	require.Equal(t, "orig", st.GetRerunOf())
	require.Equal(t, "next", st.GetFromStep())
	require.JSONEq(t, `{"k":"v"}`, string(st.GetCtxJson()))
	require.Zero(t, st.GetRunning())
	s := st.GetSteps()["start"]
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_COMPLETED, s.GetStatus())
	require.True(t, s.GetRouted() && s.GetReused())
	require.JSONEq(t, `{"a":1}`, string(s.GetResultJson()))
	require.Equal(t, []string{"big"}, s.GetFired())
	require.True(t, proto.Equal(ref, st.GetSteps()["big"].GetResultRef()), "every field of the reference survives")
	require.Empty(t, st.GetSteps()["big"].GetResultJson())
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_SKIPPED, st.GetSteps()["side"].GetStatus())

	bad := NewState("y")
	err = Apply(bad, &eventv1.Event{Seq: 1, Type: EventPlaybookStarted, PayloadJson: []byte(`{"path":"p","reused":[{"name":"s","result_ref":{"size":"x"}}]}`)})
	require.ErrorContains(t, err, `reused step "s": result_ref`)
}
