package consume

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/testkit"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// One subscription routes an execution's cancellation to each of its running commands,
// and to no other execution's; a command that stopped watching is not cancelled.
func TestCancellationsReachTheExecutionsCommands(t *testing.T) {
	nc, err := nats.Connect(testkit.StartNATS(t))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c := newCancels()
	stop, err := c.subscribe(nc)
	require.NoError(t, err)
	t.Cleanup(stop)
	require.NoError(t, nc.Flush())

	a1, cancelA1 := context.WithCancelCause(context.Background())
	a2, cancelA2 := context.WithCancelCause(context.Background())
	b, cancelB := context.WithCancelCause(context.Background())
	done, cancelDone := context.WithCancelCause(context.Background())
	defer c.watch("x-a", cancelA1)()
	defer c.watch("x-a", cancelA2)()
	defer c.watch("x-b", cancelB)()
	c.watch("x-a", cancelDone)() // finished before the cancellation

	require.NoError(t, nc.Publish(natsx.CancelSubject("x-a"), nil))
	testkit.WaitFor(t, 10*time.Second, func() error { return errors.Join(notDone(a1), notDone(a2)) })
	require.True(t, errors.Is(context.Cause(a1), tools.ErrExecutionCancelled))
	require.True(t, errors.Is(context.Cause(a2), tools.ErrExecutionCancelled))

	// b's announcement, published after a's, arrives after it: by then b was not cancelled.
	require.NoError(t, b.Err())
	require.NoError(t, done.Err())
	require.NoError(t, nc.Publish(natsx.CancelSubject("x-b"), nil))
	testkit.WaitFor(t, 10*time.Second, func() error { return notDone(b) })
	require.NoError(t, done.Err(), "a command that stopped watching is not cancelled")
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Len(t, c.running, 2, "x-a and x-b still watched; the finished command left no entry")
}

// notDone is an error while ctx has not ended.
func notDone(ctx context.Context) error {
	if ctx.Err() == nil {
		return errors.New("not cancelled yet")
	}
	return nil
}
