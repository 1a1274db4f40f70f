package decide

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/internal/playbook/template"
)

// sim drives decide against a folded state, playing the worker for issued commands.
type sim struct {
	t   testing.TB
	c   *Compiled
	st  *sbv1.ExecutionState
	log []*eventv1.Event
	// idx is kept as the engine keeps its cached states' (every folded event noted), and
	// checked against the walk before every decision.
	idx ActiveIndex
}

func newSim(t testing.TB, src string, workload string) *sim {
	t.Helper()
	pb, err := playbook.Parse([]byte(src))
	require.NoError(t, err)
	s := &sim{t: t, c: Compile(pb, "t/p", 1, template.NewRenderer()), st: domain.NewState("x")}
	s.apply(&eventv1.Event{EventId: "start", ExecutionId: "x", Type: domain.EventPlaybookStarted, PayloadJson: []byte(`{"path":"t/p","version":1,"workload":` + workload + `}`)})
	return s
}

func (s *sim) apply(evs ...*eventv1.Event) {
	for _, ev := range evs {
		ev = proto.Clone(ev).(*eventv1.Event)
		ev.Seq = s.st.GetSeq() + 1
		require.NoError(s.t, domain.Apply(s.st, ev))
		s.idx.Folded(s.st, ev)
		s.log = append(s.log, ev)
	}
}

// decide runs one decision, applies it, and returns the commands it issued.
func (s *sim) decide() []*eventv1.Event {
	requireSameAsUnfiltered(s.t, s.c, s.st, Inputs{})
	requireSameActive(s.t, ActiveOf(s.st), s.idx.Of(s.st))
	evs, err := Decide(s.c, s.st)
	require.NoError(s.t, err)
	s.apply(evs...)
	var cmds []*eventv1.Event
	for _, ev := range expanded(evs) {
		if ev.GetType() == domain.EventCommandIssued {
			cmds = append(cmds, ev)
		}
	}
	return cmds
}

// complete plays the worker for one command, echoing its iteration item as the result.
func (s *sim) complete(cmd *eventv1.Event) {
	var sc domain.Scope
	require.NoError(s.t, json.Unmarshal(cmd.GetCommand().GetContextJson(), &sc))
	res, _ := json.Marshal(map[string]any{"item": sc.Iter[sc.Iterator], "index": sc.Iter["_index"]})
	mk := func(typ string) *eventv1.Event {
		return &eventv1.Event{EventId: domain.EventID(cmd.GetCommandId(), typ), ExecutionId: "x", Type: typ, Step: cmd.GetStep(), CommandId: cmd.GetCommandId(), Iteration: cmd.GetIteration()}
	}
	done := mk(domain.EventCallDone)
	done.ResultJson = res
	s.apply(mk(domain.EventCommandStarted), done, mk(domain.EventCommandCompleted))
}

// expanded is evs with each commands.issued as its command.issued events (expandIssued):
// the commands a test playing the workers runs, one by one.
func expanded(evs []*eventv1.Event) []*eventv1.Event {
	var out []*eventv1.Event
	for _, ev := range evs {
		out = append(out, expandIssued(ev)...)
	}
	return out
}

// expandIssued returns a commands.issued as one command.issued per command, with the
// group's seq, step and cause and the command's id, attempt and iteration; any other
// event alone.
func expandIssued(ev *eventv1.Event) []*eventv1.Event {
	if ev.GetType() != domain.EventCommandsIssued {
		return []*eventv1.Event{ev}
	}
	out := make([]*eventv1.Event, len(ev.GetCommands()))
	for i, c := range ev.GetCommands() {
		out[i] = &eventv1.Event{EventId: domain.EventID(c.GetCommandId(), domain.EventCommandIssued), ExecutionId: ev.GetExecutionId(), Seq: ev.GetSeq(),
			Type: domain.EventCommandIssued, Step: ev.GetStep(), CommandId: c.GetCommandId(), Iteration: c.GetIteration(), Attempt: c.GetAttempt(),
			CauseEventId: ev.GetCauseEventId(), Command: c}
	}
	return out
}

// labels is evs as labels (label).
func labels(evs []*eventv1.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = label(ev)
	}
	return out
}

// types is the log as labels.
func (s *sim) types() []string {
	var out []string
	for _, ev := range s.log {
		out = append(out, label(ev))
	}
	return out
}

// label is ev as type:step, a command.issued that enters its step as
// "command.issued+enter:step".
func label(ev *eventv1.Event) string {
	typ := ev.GetType()
	if typ == domain.EventCommandIssued && domain.Enters(ev) {
		typ += "+enter"
	}
	return typ + ":" + ev.GetStep()
}

const loopBook = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: l, path: t/p}
workflow:
  - step: start
    loop: {in: "{{ workload.items }}", iterator: it, spec: {mode: %s, max_in_flight: 2}}
    tool: {kind: noop}
    next: [{step: after, when: "{{ event.name == 'loop.done' }}"}]
  - step: after
    tool: {kind: noop}
`

func TestSequentialLoopRunsOneIterationAtATime(t *testing.T) {
	s := newSim(t, fmt.Sprintf(loopBook, "sequential"), `{"items":["a","b","c"]}`)
	for i := 0; i < 3; i++ {
		cmds := s.decide()
		require.Len(t, cmds, 1, "iteration %d", i)
		require.Equal(t, int32(i), cmds[0].GetIteration().GetIndex())
		require.Equal(t, domain.CommandID("x", "start", 1, int32(i), 1), cmds[0].GetCommandId())
		s.complete(cmds[0])
	}
	cmds := s.decide()
	require.Len(t, cmds, 1)
	require.Equal(t, "after", cmds[0].GetStep())
	require.JSONEq(t, `[{"item":"a","index":0},{"item":"b","index":1},{"item":"c","index":2}]`, string(s.st.GetSteps()["start"].GetResultJson()))
}

func TestParallelLoopRespectsMaxInFlightAndCollectsByIndex(t *testing.T) {
	s := newSim(t, fmt.Sprintf(loopBook, "parallel"), `{"items":[1,2,3,4,5]}`)
	first := s.decide()
	require.Len(t, first, 2)
	// Complete out of order: the second iteration first.
	s.complete(first[1])
	more := s.decide()
	require.Len(t, more, 1)
	require.Equal(t, int32(2), more[0].GetIteration().GetIndex())
	s.complete(first[0])
	s.complete(more[0])
	rest := s.decide()
	require.Len(t, rest, 2)
	for _, c := range rest {
		s.complete(c)
	}
	after := s.decide()
	require.Len(t, after, 1)
	require.Equal(t, "after", after[0].GetStep())
	require.JSONEq(t, `[{"item":1,"index":0},{"item":2,"index":1},{"item":3,"index":2},{"item":4,"index":3},{"item":5,"index":4}]`, string(s.st.GetSteps()["start"].GetResultJson()))
}

func TestParallelLoopIssuesItsIterationsInGroups(t *testing.T) {
	s := newSim(t, fanSrc, `{"n":600}`)
	evs, err := Decide(s.c, s.st)
	require.NoError(t, err)
	again, err := Decide(s.c, s.st)
	require.NoError(t, err)
	require.Equal(t, ids(evs), ids(again), "groups are decided alike every time")
	// step.enter, then the 600 iterations in groups of maxIssuedGroup, in order.
	require.Equal(t, []string{"step.enter:start", "commands.issued:start", "commands.issued:start", "commands.issued:start"}, labels(evs))
	next := int32(0)
	for _, ev := range evs[1:] {
		cmds := ev.GetCommands()
		require.NotEmpty(t, cmds)
		require.LessOrEqual(t, len(cmds), maxIssuedGroup)
		require.Equal(t, domain.IssuedGroupID(cmds[0].GetCommandId(), cmds[len(cmds)-1].GetCommandId()), ev.GetEventId(), "a group's id derives from its first and last commands'")
		require.Equal(t, evs[0].GetEventId(), ev.GetCauseEventId())
		require.Empty(t, ev.GetCommandId())
		require.Equal(t, cmds[0].GetIteration().GetIndex(), ev.GetIteration().GetIndex())
		for _, c := range cmds {
			require.Equal(t, next, c.GetIteration().GetIndex())
			require.Equal(t, domain.CommandID("x", "start", 1, next, 1), c.GetCommandId())
			require.Equal(t, ev.GetEventId(), c.GetIssuedEventId(), "a command names the group that issued it")
			next++
		}
	}
	require.Equal(t, int32(600), next)
	s.apply(evs...)
	require.Equal(t, int32(600), s.st.GetSteps()["start"].GetLoop().GetIssued(), "the fold counts every command of every group")
	require.Empty(t, NeededCollections(s.st))
	again, err = Decide(s.c, s.st)
	require.NoError(t, err)
	require.Empty(t, again, "nothing is issued twice")
}

func TestIssuedGroupsAreBoundedInBytes(t *testing.T) {
	// Commands of about 20 KB each (their tool's arguments): a group holds what fits in
	// maxIssuedGroupBytes, not maxIssuedGroup of them.
	s := newSim(t, fmt.Sprintf(`
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: l, path: t/p}
workflow:
  - step: start
    loop: {in: "{{ range(20) | list }}", iterator: it, spec: {mode: parallel}}
    tool: {kind: noop, args: {pad: %q}}
`, strings.Repeat("x", 20<<10)), `{}`)
	evs, err := Decide(s.c, s.st)
	require.NoError(t, err)
	total, groups := 0, 0
	for _, ev := range evs {
		if ev.GetType() != domain.EventCommandsIssued {
			continue
		}
		size := 0
		for _, c := range ev.GetCommands() {
			size += proto.Size(c)
		}
		require.Greater(t, proto.Size(ev.GetCommands()[0]), 20<<10)
		require.LessOrEqual(t, size, maxIssuedGroupBytes)
		total, groups = total+len(ev.GetCommands()), groups+1
	}
	require.Equal(t, 20, total)
	require.Equal(t, 4, groups, "six commands of 20 KB to a group of 128 KB")
}

func TestATopUpOfOneIsACommandIssued(t *testing.T) {
	s := newSim(t, fmt.Sprintf(loopBook, "parallel"), `{"items":[1,2,3]}`)
	evs, err := Decide(s.c, s.st)
	require.NoError(t, err)
	require.Equal(t, []string{"step.enter:start", "commands.issued:start"}, labels(evs), "two at once (max_in_flight 2): a group")
	s.apply(evs...)
	cmds := expanded(evs[1:])
	s.complete(cmds[0])
	evs, err = Decide(s.c, s.st)
	require.NoError(t, err)
	require.Equal(t, []string{"command.issued:start"}, labels(evs), "one more: a command.issued of its own")
	require.Equal(t, domain.EventID(evs[0].GetCommandId(), domain.EventCommandIssued), evs[0].GetCommand().GetIssuedEventId())
}

func TestEmptyLoopCompletesAtOnce(t *testing.T) {
	s := newSim(t, fmt.Sprintf(loopBook, "sequential"), `{"items":[]}`)
	cmds := s.decide()
	require.Len(t, cmds, 1)
	require.Equal(t, "after", cmds[0].GetStep())
	require.Equal(t, []string{"playbook.started:", "step.enter:start", "command.issued+enter:after", "step.exit:start"}, s.types())
	require.JSONEq(t, `[]`, string(s.st.GetSteps()["start"].GetResultJson()))
}

func TestLoopOverANonListFailsNamingTheStep(t *testing.T) {
	s := newSim(t, fmt.Sprintf(loopBook, "sequential"), `{"items":"nope"}`)
	evs, err := Decide(s.c, s.st)
	require.NoError(t, err)
	last := evs[len(evs)-1]
	require.Equal(t, domain.EventPlaybookFailed, last.GetType())
	require.Contains(t, last.GetError().GetMessage(), `"start"`)
	require.Contains(t, last.GetError().GetMessage(), "loop.in must render to a list")
}

func TestLateEventsOfAnOldEpochAreIgnored(t *testing.T) {
	st := domain.NewState("x")
	seq := int64(0)
	add := func(ev *eventv1.Event) {
		seq++
		ev.Seq = seq
		require.NoError(t, domain.Apply(st, ev))
	}
	add(&eventv1.Event{Type: domain.EventPlaybookStarted, PayloadJson: []byte(`{"workload":{}}`)})
	add(&eventv1.Event{Type: domain.EventStepEnter, Step: "s", PayloadJson: []byte(`{"epoch":2,"loop":{"items":[1],"iterator":"i"}}`)})
	add(&eventv1.Event{Type: domain.EventCommandCompleted, Step: "s", Iteration: &eventv1.Iteration{Epoch: 1, Index: 0}})
	require.Equal(t, int32(0), st.GetSteps()["s"].GetLoop().GetDone())
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_RUNNING, st.GetSteps()["s"].GetStatus())
	add(&eventv1.Event{Type: domain.EventCommandCompleted, Step: "s", Iteration: &eventv1.Iteration{Epoch: 2, Index: 0}})
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_COMPLETED, st.GetSteps()["s"].GetStatus())
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func TestOversizedLoopCollectionFailsInsteadOfStalling(t *testing.T) {
	// A collection over MaxLoopCollectionBytes: 33 strings of 1 MiB.
	item := `"` + strings.Repeat("x", 1<<20) + `"`
	items := make([]string, MaxLoopCollectionBytes>>20+1)
	for i := range items {
		items[i] = item
	}
	s := newSim(t, sprintf(loopBook, "parallel"), `{"items":[`+strings.Join(items, ",")+`]}`)
	evs, err := Decide(s.c, s.st)
	require.NoError(t, err)
	last := evs[len(evs)-1]
	require.Equal(t, domain.EventPlaybookFailed, last.GetType())
	require.Contains(t, last.GetError().GetMessage(), "exceeds")
}
