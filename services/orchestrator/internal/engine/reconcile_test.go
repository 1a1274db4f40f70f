package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/commandbus"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/testkit"
)

// The reconciler publishes again only the open commands the stream no longer holds: a
// queued command alone or in a pack (found through the pack's first command) is left
// alone; a command inside a pack whose first command is no longer open is published again
// (at-least-once, as documented in commandbus).
func TestLostCommandsLeavesQueuedCommandsAndPacksAlone(t *testing.T) {
	ctx := context.Background()
	_, js := testkit.StartJetStream(t)
	commands, err := js.Stream(ctx, natsx.StreamCommands)
	require.NoError(t, err)
	cmd := func(exec string, i int) *eventv1.Command {
		return &eventv1.Command{CommandId: fmt.Sprintf("%s-%d", exec, i), ExecutionId: exec, Pool: "shared", Step: "s"}
	}
	x := []*eventv1.Command{cmd("x", 0), cmd("x", 1), cmd("x", 2)} // one pack
	y := cmd("y", 0)                                               // alone
	msgs, err := commandbus.Messages(append(append([]*eventv1.Command{}, x...), y), nil, 4, nil)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	require.NoError(t, natsx.PublishAll(ctx, js, msgs))
	never := cmd("z", 0) // committed, its publish lost

	lost, err := lostCommands(ctx, commands, []*eventv1.Command{x[0], x[1], x[2], y, never}, 4)
	require.NoError(t, err)
	require.Equal(t, []*eventv1.Command{never}, lost)

	lost, err = lostCommands(ctx, commands, []*eventv1.Command{x[1], x[2]}, 4)
	require.NoError(t, err)
	require.Equal(t, []*eventv1.Command{x[1], x[2]}, lost, "the pack's first command ended: its others are not found")
}
