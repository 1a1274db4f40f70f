package domain

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// group is a commands.issued of iterations [from, to) of step s in epoch, each command
// with a render context of pad bytes.
func group(s string, epoch, from, to int32, pad int) *eventv1.Event {
	ev := &eventv1.Event{EventId: IssuedGroupID(CommandID("x", s, epoch, from, 1), CommandID("x", s, epoch, to-1, 1)), ExecutionId: "x", Tenant: "t", Type: EventCommandsIssued, Step: s,
		Attempt: 1, CauseEventId: "enter", Iteration: &eventv1.Iteration{Epoch: epoch, Index: from}, Producer: "orchestrator"}
	for i := from; i < to; i++ {
		ev.Commands = append(ev.Commands, &eventv1.Command{CommandId: CommandID("x", s, epoch, i, 1), Step: s, Attempt: 1, IssuedEventId: ev.EventId,
			Iteration: &eventv1.Iteration{Epoch: epoch, Index: i}, ContextJson: make([]byte, pad)})
	}
	return ev
}

// A commands.issued folds as its commands' command.issued events would, one by one: the
// loop's issued count, and with it the iterations decided next, are the same either way.
func TestCommandsIssuedFoldsAsItsCommandsOneByOne(t *testing.T) {
	grouped, single := newFolder(t), newFolder(t)
	for _, f := range []*folder{grouped, single} {
		f.add(&eventv1.Event{Type: EventStepEnter, Step: "s", PayloadJson: enterByRef(10)})
	}
	g := group("s", 1, 0, 6, 8)
	grouped.add(g)
	for _, c := range g.GetCommands() {
		single.add(&eventv1.Event{Type: EventCommandIssued, Step: "s", CommandId: c.GetCommandId(), Iteration: c.GetIteration(), Attempt: 1, Command: c})
	}
	require.Equal(t, int32(6), grouped.st.GetSteps()["s"].GetLoop().GetIssued())
	require.Equal(t, int32(6), single.st.GetSteps()["s"].GetLoop().GetIssued())
	// Commands of an older epoch (a late group) count for nothing.
	grouped.add(group("s", 0, 6, 8, 0))
	require.Equal(t, int32(6), grouped.st.GetSteps()["s"].GetLoop().GetIssued())
	for i := int32(0); i < 6; i++ {
		grouped.iterationDone("s", 1, i)
	}
	require.Equal(t, int32(6), grouped.st.GetSteps()["s"].GetLoop().GetDone())
}

// Two decisions taken on different states (a lost notice, a replica taking over) can issue
// overlapping ranges of a loop's iterations: their groups are different events, both
// committed, and the iterations they share count once, in either order.
func TestOverlappingGroupsCountTheirIterationsOnce(t *testing.T) {
	short, long := group("s", 1, 4, 10, 0), group("s", 1, 4, 20, 0)
	require.NotEqual(t, short.GetEventId(), long.GetEventId())
	require.Equal(t, IssuedGroupID(CommandID("x", "s", 1, 4, 1), CommandID("x", "s", 1, 9, 1)), short.GetEventId())
	for _, order := range [][]*eventv1.Event{{short, long}, {long, short}} {
		f := newFolder(t)
		f.add(&eventv1.Event{Type: EventStepEnter, Step: "s", PayloadJson: enterByRef(30)})
		f.add(group("s", 1, 0, 4, 0))
		for _, g := range order {
			f.add(proto.Clone(g).(*eventv1.Event))
		}
		require.Equal(t, int32(20), f.st.GetSteps()["s"].GetLoop().GetIssued())
	}
}

// A single iteration's command.issued of one decision and a group of another that holds
// the same iteration count it once, whichever was logged first.
func TestASingleIssueAndAGroupThatShareAnIterationCountItOnce(t *testing.T) {
	single := func() *eventv1.Event {
		it := &eventv1.Iteration{Epoch: 1, Index: 4}
		return &eventv1.Event{Type: EventCommandIssued, Step: "s", CommandId: CommandID("x", "s", 1, 4, 1), Iteration: it}
	}
	for _, order := range [][]*eventv1.Event{{single(), group("s", 1, 4, 9, 0)}, {group("s", 1, 4, 9, 0), single()}} {
		f := newFolder(t)
		f.add(&eventv1.Event{Type: EventStepEnter, Step: "s", PayloadJson: enterByRef(30)})
		f.add(group("s", 1, 0, 4, 0))
		for _, ev := range order {
			f.add(ev)
		}
		require.Equal(t, int32(9), f.st.GetSteps()["s"].GetLoop().GetIssued())
	}
}

// iterationDone folds the outcome of one loop iteration issued before.
func (f *folder) iterationDone(step string, epoch, i int32) {
	it := &eventv1.Iteration{Epoch: epoch, Index: i}
	cmd := CommandID("x", step, epoch, i, 1)
	f.add(&eventv1.Event{Type: EventCommandCompleted, Step: step, CommandId: cmd, Iteration: it, ResultJson: []byte(`1`)})
}

func TestIssuedCommands(t *testing.T) {
	g := group("s", 2, 3, 6, 0)
	one := &eventv1.Event{Type: EventCommandIssued, Command: &eventv1.Command{CommandId: "c"}}
	require.Equal(t, []*eventv1.Command{one.GetCommand()}, IssuedCommands(one))
	require.Equal(t, g.GetCommands(), IssuedCommands(g))
	require.Nil(t, IssuedCommands(&eventv1.Event{Type: EventCommandIssued}))
	require.Nil(t, IssuedCommands(&eventv1.Event{Type: EventCommandCompleted}))
	require.True(t, IsIssue(EventCommandsIssued) && IsIssue(EventCommandIssued) && !IsIssue(EventStepEnter))
	require.True(t, IsDecisionOutput(EventCommandsIssued))
}

// What a notice carries of a group is what the fold reads of it: its commands' ids,
// attempts and iterations, not what the workers run.
func TestFoldCopyOfAGroupKeepsWhatTheFoldReads(t *testing.T) {
	g := group("s", 1, 0, 100, 2000)
	c := FoldCopy(g)
	require.Len(t, c.GetCommands(), 100)
	require.Less(t, proto.Size(c), proto.Size(g)/20)
	for k, x := range c.GetCommands() {
		require.Equal(t, g.GetCommands()[k].GetCommandId(), x.GetCommandId())
		require.True(t, proto.Equal(g.GetCommands()[k].GetIteration(), x.GetIteration()))
		require.Equal(t, int32(1), x.GetAttempt())
		require.Empty(t, x.GetContextJson())
	}
	require.Len(t, g.GetCommands()[0].GetContextJson(), 2000, "the original keeps its commands")
	a, b := newFolder(t), newFolder(t)
	for _, f := range []*folder{a, b} {
		f.add(&eventv1.Event{Type: EventStepEnter, Step: "s", PayloadJson: enterByRef(100)})
	}
	a.add(proto.Clone(g).(*eventv1.Event))
	b.add(c)
	require.True(t, proto.Equal(a.st, b.st), "a fold of the copy is a fold of the event")
}
