package decide

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
)

// assembleLoopResults plays the engine for one completed loop: it reads the log after the
// loop's step.enter, joins the iterations' results in index order (the last call.done of
// an index wins) and returns the list and a reference to it under the id derived from the
// step.enter.
func assembleLoopResults(t require.TestingT, log []*eventv1.Event, n LoopResults) ([]byte, *eventv1.ResultRef) {
	parts := make([][]byte, n.Total)
	for _, ev := range log {
		if ev.GetSeq() <= n.EnterSeq {
			continue
		}
		i, ok := domain.IsIterationResult(ev, n.Step, n.Epoch, n.Total)
		if !ok {
			continue
		}
		b, err := domain.IterationResult(ev)
		require.NoError(t, err)
		parts[i] = b
	}
	var body strings.Builder
	body.WriteByte('[')
	for i, p := range parts {
		if i > 0 {
			body.WriteByte(',')
		}
		if len(p) == 0 {
			p = []byte("null")
		}
		body.Write(p)
	}
	body.WriteByte(']')
	ref := &eventv1.ResultRef{Uri: "noetl://results/t/x/" + domain.LoopResultsID(n.EnterEventID), Size: int64(body.Len()), ContentType: "application/json", Sha256: "digest", ExtractedJson: domain.LoopResultsExtracted(n.Total)}
	return []byte(body.String()), ref
}

const loopResultsBook = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: l, path: t/p}
workflow:
  - step: start
    loop: {in: "{{ workload.items }}", iterator: it, spec: {mode: parallel, max_in_flight: 3}}
    tool: {kind: noop}
    next:
      - step: after
        set: {ctx.n: "{{ start.length }}"}
  - step: after
    tool: {kind: python, code: "def main(rows): return len(rows)"}
    input: {rows: "{{ start }}"}
`

// A loop whose list of results is too large for the state completes by reference: the
// decision that routes it refuses to guess without the list's reference, and with it the
// step.exit carries the reference, the next step's scope holds it, and arcs read its
// summary.
func TestLoopResultsOverTheBudgetCompleteByReference(t *testing.T) {
	s := newSim(t, loopResultsBook, `{"items":[0,1,2,3,4,5,6,7]}`)
	big := func(i int32) []byte {
		return []byte(`{"i":` + itoa(i) + `,"pad":"` + strings.Repeat("x", 10<<10) + `"}`)
	}
	pending := s.decide()
	for len(pending) > 0 {
		cmd := pending[len(pending)-1] // out of order
		pending = pending[:len(pending)-1]
		mk := func(typ string) *eventv1.Event {
			return &eventv1.Event{EventId: domain.EventID(cmd.GetCommandId(), typ), ExecutionId: "x", Type: typ, Step: cmd.GetStep(), CommandId: cmd.GetCommandId(), Iteration: cmd.GetIteration()}
		}
		done := mk(domain.EventCallDone)
		done.ResultJson = big(cmd.GetIteration().GetIndex())
		s.apply(mk(domain.EventCommandStarted), done, mk(domain.EventCommandCompleted))
		if len(pending) == 0 && s.st.GetSteps()["start"].GetStatus() == eventv1.StepStatus_STEP_STATUS_RUNNING {
			pending = s.decide()
		}
	}
	start := s.st.GetSteps()["start"]
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_COMPLETED, start.GetStatus())
	require.True(t, start.GetLoop().GetResultsOmitted())
	needs := NeededLoopResults(s.st)
	require.Equal(t, []LoopResults{{Step: "start", Epoch: 1, EnterEventID: start.GetEnterEventId(), EnterSeq: 2, Total: 8}}, needs)

	_, err := Decide(s.c, s.st)
	require.ErrorIs(t, err, ErrLoopResultsMissing)

	body, ref := assembleLoopResults(t, s.log, needs[0])
	var list []map[string]any
	require.NoError(t, json.Unmarshal(body, &list))
	require.Len(t, list, 8)
	for i, v := range list {
		require.Equal(t, float64(i), v["i"])
	}
	in := Inputs{LoopResults: map[string]*eventv1.ResultRef{needs[0].EnterEventID: ref}}
	evs, err := DecideWith(s.c, s.st, in)
	require.NoError(t, err)
	again, err := DecideWith(s.c, s.st, in)
	require.NoError(t, err)
	require.Equal(t, len(evs), len(again))
	for i := range evs {
		require.True(t, proto.Equal(evs[i], again[i]), "decide is deterministic")
		require.Less(t, proto.Size(evs[i]), 8<<10, "%s stays small", evs[i].GetType())
	}
	var exit, issued, ctx *eventv1.Event
	for _, ev := range evs {
		switch ev.GetType() {
		case domain.EventStepExit:
			exit = ev
		case domain.EventCommandIssued:
			issued = ev
		case domain.EventCtxUpdated:
			ctx = ev
		}
	}
	require.NotNil(t, exit)
	require.Equal(t, "start", exit.GetStep())
	require.True(t, proto.Equal(ref, exit.GetResultRef()))
	require.NotNil(t, ctx)
	require.JSONEq(t, `{"values":{"n":8}}`, string(ctx.GetPayloadJson()))
	require.NotNil(t, issued)
	var sc domain.Scope
	require.NoError(t, json.Unmarshal(issued.GetCommand().GetContextJson(), &sc))
	require.Equal(t, ref.GetUri(), sc.Steps["start"].Ref.URI)
	require.Empty(t, sc.Steps["start"].Result)

	s.apply(evs...)
	require.Empty(t, NeededLoopResults(s.st))
	require.True(t, proto.Equal(ref, s.st.GetSteps()["start"].GetResultRef()))
	// Later decisions read the reference from the state.
	s.complete(issued)
	final, err := Decide(s.c, s.st)
	require.NoError(t, err)
	require.Equal(t, domain.EventPlaybookCompleted, final[len(final)-1].GetType())
}

// A loop that is the playbook's leaf gives the execution its list by reference.
func TestLeafLoopResultsByReferenceAreTheExecutionResult(t *testing.T) {
	s := newSim(t, `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: l, path: t/p}
workflow:
  - step: start
    loop: {in: "{{ workload.items }}", iterator: it}
    tool: {kind: noop}
`, `{"items":[0,1,2,3,4,5,6,7]}`)
	for i := 0; i < 8; i++ {
		cmds := s.decide()
		require.Len(t, cmds, 1)
		cmd := cmds[0]
		mk := func(typ string) *eventv1.Event {
			return &eventv1.Event{EventId: domain.EventID(cmd.GetCommandId(), typ), ExecutionId: "x", Type: typ, Step: cmd.GetStep(), CommandId: cmd.GetCommandId(), Iteration: cmd.GetIteration()}
		}
		done := mk(domain.EventCallDone)
		done.ResultRef = &eventv1.ResultRef{Uri: "noetl://results/t/x/" + cmd.GetCommandId(), Size: 100 << 10, ExtractedJson: []byte(`{"pad":{"_summary":"string","length":102400}}`)}
		if i%2 == 0 {
			done.ResultRef, done.ResultJson = nil, []byte(`"`+strings.Repeat("y", 20<<10)+`"`)
		}
		s.apply(mk(domain.EventCommandStarted), done, mk(domain.EventCommandCompleted))
	}
	needs := NeededLoopResults(s.st)
	require.Len(t, needs, 1)
	body, ref := assembleLoopResults(t, s.log, needs[0])
	var list []any
	require.NoError(t, json.Unmarshal(body, &list))
	require.Len(t, list, 8)
	require.Equal(t, "noetl://results/t/x/"+domain.CommandID("x", "start", 1, 1, 1), list[1].(map[string]any)["_ref"])
	evs, err := DecideWith(s.c, s.st, Inputs{LoopResults: map[string]*eventv1.ResultRef{needs[0].EnterEventID: ref}})
	require.NoError(t, err)
	last := evs[len(evs)-1]
	require.Equal(t, domain.EventPlaybookCompleted, last.GetType())
	require.True(t, proto.Equal(ref, last.GetResultRef()))
}

func itoa(i int32) string { b, _ := json.Marshal(i); return string(b) }
