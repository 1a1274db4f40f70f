package decide

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/internal/playbook/template"
)

const fourSteps = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: four, path: t/four}
workflow:
  - step: start
    tool: {kind: noop}
    next: [{step: b}]
  - step: b
    tool: {kind: noop}
    next: [{step: c, set: {seen_b: "{{ b.n }}"}}]
  - step: c
    tool: {kind: noop, args: {from_b: "{{ b.n }}"}}
    next: [{step: d}]
  - step: d
    tool: {kind: noop}
`

// TestRerunFromAStepEntersItFirstAndNeverTheReusedSteps folds a rerun's playbook.started
// (start and b reused, one inline and one by reference) and runs the decisions to the end:
// the reused steps issue no command, c is entered first and sees b's result, and the
// execution completes.
func TestRerunFromAStepEntersItFirstAndNeverTheReusedSteps(t *testing.T) {
	pb, err := playbook.Parse([]byte(fourSteps))
	require.NoError(t, err)
	c := Compile(pb, "t/four", 1, template.NewRenderer())
	ref := &eventv1.ResultRef{Uri: "noetl://results/t/orig/cb", Size: 100000, Sha256: "ab", ExtractedJson: []byte(`{"n":7}`)}
	b := domain.ReusedStep{Name: "b", Fired: []string{"c"}}
	require.NoError(t, b.SetRef(ref))
	payload, err := json.Marshal(domain.StartedPayload{Path: "t/four", Version: 1, RerunOf: "orig", FromStep: "c",
		Reused: []domain.ReusedStep{{Name: "start", Result: json.RawMessage(`{"a":1}`), Fired: []string{"b"}}, b}, Ctx: map[string]any{"seen_b": 7}})
	require.NoError(t, err)
	st := domain.NewState("rerun-1")
	var log []string
	var idx ActiveIndex
	apply := func(evs ...*eventv1.Event) {
		for _, ev := range evs {
			ev = proto.Clone(ev).(*eventv1.Event)
			ev.Seq = st.GetSeq() + 1
			require.NoError(t, domain.Apply(st, ev))
			idx.Folded(st, ev)
			log = append(log, label(ev))
		}
	}
	apply(&eventv1.Event{EventId: domain.EventID("rerun-1", domain.EventPlaybookStarted), ExecutionId: "rerun-1", Tenant: "t", Type: domain.EventPlaybookStarted, PayloadJson: payload})
	require.Equal(t, "orig", st.GetRerunOf())
	require.True(t, proto.Equal(ref, st.GetSteps()["b"].GetResultRef()), "the reused reference is the original's")
	require.True(t, st.GetSteps()["start"].GetReused())
	for range 10 {
		requireSameActive(t, ActiveOf(st), idx.Of(st)) // the first decision's reused steps need a walk
		evs, err := Decide(c, st)
		require.NoError(t, err)
		if len(evs) == 0 {
			break
		}
		apply(evs...)
		for _, ev := range evs {
			if ev.GetType() == domain.EventCommandIssued {
				if ev.GetStep() == "c" {
					var scope domain.Scope
					require.NoError(t, json.Unmarshal(ev.GetCommand().GetContextJson(), &scope))
					require.Equal(t, ref.GetUri(), scope.Steps["b"].Ref.URI, "c's scope holds b's reference, not a payload")
				}
				apply(worker(ev, `{"ok":true}`)...)
			}
		}
	}
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, st.GetStatus())
	require.Equal(t, "command.issued+enter:c", log[1], "the first decision enters from_step")
	for _, l := range log {
		require.NotContains(t, []string{"command.issued:start", "command.issued:b", "command.issued+enter:start", "command.issued+enter:b", "step.enter:start", "step.enter:b"}, l)
	}
	require.Contains(t, log, "command.issued+enter:d")
}

// TestRerunEntersTheOriginalsOtherUnfinishedBranches: a reused fan-out whose other branch
// had not finished when the original entered from_step runs that branch again, and the
// join after both waits for it.
func TestRerunEntersTheOriginalsOtherUnfinishedBranches(t *testing.T) {
	pb, err := playbook.Parse([]byte(`
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: fan, path: t/fan}
workflow:
  - step: start
    tool: {kind: noop}
    next: [{step: left}, {step: right}]
  - step: left
    tool: {kind: noop}
    next: [{step: join}]
  - step: right
    tool: {kind: noop}
    next: [{step: join}]
  - step: join
    tool: {kind: noop}
`))
	require.NoError(t, err)
	c := Compile(pb, "t/fan", 1, template.NewRenderer())
	payload, err := json.Marshal(domain.StartedPayload{Path: "t/fan", Version: 1, RerunOf: "orig", FromStep: "right",
		Reused: []domain.ReusedStep{{Name: "start", Result: json.RawMessage(`1`), Fired: []string{"left", "right"}}}})
	require.NoError(t, err)
	st := domain.NewState("rerun-2")
	st.Seq = 0
	ev := &eventv1.Event{EventId: "e1", ExecutionId: "rerun-2", Tenant: "t", Type: domain.EventPlaybookStarted, PayloadJson: payload, Seq: 1}
	require.NoError(t, domain.Apply(st, ev))
	evs, err := Decide(c, st)
	require.NoError(t, err)
	var entered []string
	for _, ev := range evs {
		if domain.Enters(ev) {
			entered = append(entered, ev.GetStep())
		}
	}
	require.Equal(t, []string{"right", "left"}, entered)
}

// TestRerunFromAStepNotInThePlaybookFailsTheExecution: the orchestrator refuses such a
// rerun before it starts; a log that asks for it anyway fails, naming the step.
func TestRerunFromAStepNotInThePlaybookFailsTheExecution(t *testing.T) {
	pb, err := playbook.Parse([]byte(fourSteps))
	require.NoError(t, err)
	c := Compile(pb, "t/four", 1, template.NewRenderer())
	st := domain.NewState("rerun-3")
	require.NoError(t, domain.Apply(st, &eventv1.Event{EventId: "e1", ExecutionId: "rerun-3", Type: domain.EventPlaybookStarted, Seq: 1,
		PayloadJson: []byte(`{"path":"t/four","version":1,"workload":{},"from_step":"nope"}`)}))
	evs, err := Decide(c, st)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, domain.EventPlaybookFailed, evs[0].GetType())
	require.Contains(t, evs[0].GetError().GetMessage(), `"nope"`)
}
