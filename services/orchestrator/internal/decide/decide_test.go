package decide

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/internal/playbook/template"
)

const threeSteps = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: three, path: t/three}
workload: {x: 1}
workflow:
  - step: start
    tool: {kind: noop}
    next: [{step: middle}]
  - step: middle
    tool: {kind: noop}
    next: {arcs: [{step: end, when: "{{ middle.ok }}"}]}
  - step: end
    tool: {kind: noop}
`

// worker simulates a worker's events for a command.
func worker(cmd *eventv1.Event, result string) []*eventv1.Event {
	mk := func(typ string) *eventv1.Event {
		return &eventv1.Event{EventId: domain.EventID(cmd.GetCommandId(), typ), ExecutionId: cmd.GetExecutionId(), Tenant: cmd.GetTenant(), Type: typ, Step: cmd.GetStep(), CommandId: cmd.GetCommandId()}
	}
	done := mk(domain.EventCallDone)
	done.ResultJson = []byte(result)
	return []*eventv1.Event{mk(domain.EventCommandStarted), done, mk(domain.EventCommandCompleted)}
}

func TestDecideGoldenThreeStepRun(t *testing.T) {
	pb, err := playbook.Parse([]byte(threeSteps))
	require.NoError(t, err)
	c := Compile(pb, "t/three", 1, template.NewRenderer())
	st := domain.NewState("exec-1")
	var log []string
	apply := func(evs ...*eventv1.Event) {
		for _, ev := range evs {
			ev = proto.Clone(ev).(*eventv1.Event)
			ev.Seq = st.GetSeq() + 1
			require.NoError(t, domain.Apply(st, ev))
			log = append(log, label(ev))
		}
	}
	apply(&eventv1.Event{EventId: domain.EventID("exec-1", domain.EventPlaybookStarted), ExecutionId: "exec-1", Tenant: "t", Type: domain.EventPlaybookStarted, PayloadJson: []byte(`{"path":"t/three","version":1,"workload":{"x":1}}`)})
	results := map[string]string{"start": `{"a":1}`, "middle": `{"ok":true}`, "end": `{"done":1}`}
	for range 10 {
		evs, err := Decide(c, st)
		require.NoError(t, err)
		again, err := Decide(c, st)
		require.NoError(t, err)
		require.Equal(t, ids(evs), ids(again), "decide must be deterministic")
		if len(evs) == 0 {
			break
		}
		apply(evs...)
		for _, ev := range evs {
			if ev.GetType() == domain.EventCommandIssued {
				require.Equal(t, domain.CommandID("exec-1", ev.GetStep(), 1, -1, 1), ev.GetCommandId())
				apply(worker(ev, results[ev.GetStep()])...)
			}
		}
	}
	// step.exit of a step comes after the events its routing emitted.
	want := []string{"playbook.started:"}
	prev := ""
	for _, s := range []string{"start", "middle", "end"} {
		want = append(want, "command.issued+enter:"+s) // a step of one command: one event enters it
		if prev != "" {
			want = append(want, "step.exit:"+prev)
		}
		want = append(want, "command.started:"+s, "call.done:"+s, "command.completed:"+s)
		prev = s
	}
	want = append(want, "step.exit:end", "playbook.completed:")
	require.Equal(t, want, log)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, st.GetStatus())
	require.JSONEq(t, `{"done":1}`, string(st.GetResultJson()))
}

func TestDecideFalseConditionSkipsTarget(t *testing.T) {
	pb, err := playbook.Parse([]byte(threeSteps))
	require.NoError(t, err)
	c := Compile(pb, "t/three", 1, template.NewRenderer())
	st := domain.NewState("e")
	seq := int64(0)
	add := func(evs ...*eventv1.Event) {
		for _, ev := range evs {
			seq++
			ev.Seq = seq
			require.NoError(t, domain.Apply(st, ev))
		}
	}
	add(&eventv1.Event{EventId: "s", ExecutionId: "e", Type: domain.EventPlaybookStarted, PayloadJson: []byte(`{"workload":{}}`)})
	for _, step := range []string{"start", "middle"} {
		evs, err := Decide(c, st)
		require.NoError(t, err)
		add(evs...)
		for _, ev := range evs {
			if ev.GetType() == domain.EventCommandIssued {
				add(worker(ev, `{"ok":false}`)...)
			}
		}
		require.Equal(t, eventv1.StepStatus_STEP_STATUS_COMPLETED, st.GetSteps()[step].GetStatus())
	}
	evs, err := Decide(c, st)
	require.NoError(t, err)
	var types []string
	for _, ev := range evs {
		types = append(types, ev.GetType()+":"+ev.GetStep())
	}
	require.Equal(t, []string{"step.skipped:end", "step.exit:middle", "playbook.completed:"}, types)
}

func ids(evs []*eventv1.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.GetEventId())
	}
	return out
}
