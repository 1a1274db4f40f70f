package decide

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/internal/playbook/template"
)

const varsRoute = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: v, path: t/v}
workflow:
  - step: start
    tool: {kind: noop}
    next: {arcs: [{step: fast, when: "{{ vars.mode == 'fast' }}"}, {step: slow, when: "{{ vars.mode is not defined }}"}]}
  - step: fast
    tool: {kind: noop, result: {mode: "{{ vars.mode }}"}}
  - step: slow
    tool: {kind: noop}
`

// TestVarsReachTheScopeAndConditions checks that a vars.updated folded before a decision
// is in the render scope of the commands it issues (the worker renders vars.<name>) and in
// the orchestrator's own conditions.
func TestVarsReachTheScopeAndConditions(t *testing.T) {
	pb, err := playbook.Parse([]byte(varsRoute))
	require.NoError(t, err)
	c := Compile(pb, "t/v", 1, template.NewRenderer())
	st := domain.NewState("e")
	add := func(evs ...*eventv1.Event) {
		for _, ev := range evs {
			ev.Seq = st.GetSeq() + 1
			require.NoError(t, domain.Apply(st, ev))
		}
	}
	add(&eventv1.Event{EventId: "s", ExecutionId: "e", Type: domain.EventPlaybookStarted, PayloadJson: []byte(`{"workload":{}}`)})
	evs, err := Decide(c, st)
	require.NoError(t, err)
	add(evs...)
	var start *eventv1.Event
	for _, ev := range evs {
		if ev.GetType() == domain.EventCommandIssued {
			start = ev
		}
	}
	require.NotNil(t, start)
	var sc domain.Scope
	require.NoError(t, json.Unmarshal(start.GetCommand().GetContextJson(), &sc))
	require.Nil(t, sc.Variables, "no variables, none in the scope")

	add(&eventv1.Event{EventId: "v", ExecutionId: "e", Type: domain.EventVarsUpdated, PayloadJson: []byte(`{"set":{"mode":{"value":"fast"}}}`)})
	add(worker(start, `{}`)...)
	evs, err = Decide(c, st)
	require.NoError(t, err)
	var entered []string
	for _, ev := range evs {
		if domain.Enters(ev) {
			entered = append(entered, ev.GetStep())
		}
		switch ev.GetType() {
		case domain.EventCommandIssued:
			require.NoError(t, json.Unmarshal(ev.GetCommand().GetContextJson(), &sc))
			require.JSONEq(t, `{"mode":"fast"}`, string(sc.Variables))
			require.Equal(t, map[string]any{"mode": "fast"}, sc.Vars()["vars"])
		}
	}
	require.Equal(t, []string{"fast"}, entered, "the arc's condition read vars.mode")
}
