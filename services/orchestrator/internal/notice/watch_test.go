package notice

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/testkit"
)

// watchOf starts a NATS server and a Watch of the execution exec on it, and returns the
// connection, the Watch and what publishes a notice (on its own execution's subject) and
// flushes it.
func watchOf(t *testing.T, exec string) (*nats.Conn, *Watch, func(*eventv1.CommitNotice)) {
	t.Helper()
	nc, err := nats.Connect(testkit.StartNATS(t))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	w, err := Subscribe(nc, exec)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	return nc, w, func(n *eventv1.CommitNotice) {
		t.Helper()
		b, err := proto.Marshal(n)
		require.NoError(t, err)
		require.NoError(t, nc.Publish(natsx.CommittedSubject(n.GetExecutionId(), 16), b))
		require.NoError(t, nc.Flush())
	}
}

// A Watch reports the highest seq over every notice so far and stays terminal once a
// terminal notice arrived, whatever order notices come in and however many arrive
// between two Nexts; another execution's notices do not wake it; Next ends with its
// context; Known reports the same fold without waiting.
func TestWatchFoldsTheNoticesOfItsExecution(t *testing.T) {
	nc, w, send := watchOf(t, "e1")
	publish := func(exec string, seq int64, terminal bool) {
		t.Helper()
		send(&eventv1.CommitNotice{ExecutionId: exec, Seq: seq, Terminal: terminal})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Nothing yet: Next waits, and ends with its context.
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	_, _, err := w.Next(short)
	stop()
	require.ErrorIs(t, err, context.DeadlineExceeded)

	publish("e1", 3, false)
	seq, terminal, err := w.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), seq)
	require.False(t, terminal)

	// Several before the next Next, out of order, the terminal one first: one answer
	// holding the highest seq, terminal.
	publish("e1", 9, true)
	publish("e1", 7, false)
	publish("e2", 50, false) // another execution's
	testkit.WaitFor(t, 10*time.Second, func() error {
		seq, terminal, err := w.Next(ctx)
		if err != nil {
			return err
		}
		if seq != 9 || !terminal {
			return fmt.Errorf("seq %d terminal %v", seq, terminal)
		}
		return nil
	})
	// A malformed notice says the log grew: it wakes Next without moving seq.
	require.NoError(t, nc.Publish(natsx.CommittedSubject("e1", 16), []byte{0xff}))
	require.NoError(t, nc.Flush())
	seq, terminal, err = w.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(9), seq)
	require.True(t, terminal)
	// Known says the same without waiting, though no notice arrived since that Next: a
	// start that waits on from its own Next sees an end that Next already folded.
	seq, terminal = w.Known()
	require.Equal(t, int64(9), seq)
	require.True(t, terminal)
	_, _, ok := w.End()
	require.False(t, ok, "the terminal notice named no last event")
}

// End reports the head the first terminal notice named: its seq and the id of its last
// event, which a later terminal notice (a re-sent one) does not change.
func TestWatchEndIsTheFirstTerminalNoticesHead(t *testing.T) {
	_, w, publish := watchOf(t, "e1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	publish(&eventv1.CommitNotice{ExecutionId: "e1", Seq: 3, LastEventId: "e3"})
	_, _, err := w.Next(ctx)
	require.NoError(t, err)
	_, _, ok := w.End()
	require.False(t, ok, "not ended yet")

	publish(&eventv1.CommitNotice{ExecutionId: "e1", Seq: 5, Terminal: true, LastEventId: "e5"})
	publish(&eventv1.CommitNotice{ExecutionId: "e1", Seq: 5, Terminal: true, LastEventId: "other"})
	testkit.WaitFor(t, 10*time.Second, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.arrived != 3 {
			return fmt.Errorf("%d notices arrived", w.arrived)
		}
		return nil
	})
	seq, id, ok := w.End()
	require.True(t, ok)
	require.EqualValues(t, 5, seq)
	require.Equal(t, "e5", id)
}

// A Watch from SubscribeEnd wakes on the execution's notices on NOETL_COMMITTED (its
// start, a commit that asks for a decision, its end) and not on the notice of a step
// decided inside its commit, which only watchers of every step read.
func TestSubscribeEndSkipsTheNoticesOfStepsDecidedInline(t *testing.T) {
	nc, err := nats.Connect(testkit.StartNATS(t))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	w, err := SubscribeEnd(nc, "e1")
	require.NoError(t, err)
	t.Cleanup(w.Close)
	publish := func(subject string, seq int64, terminal bool) {
		t.Helper()
		b, err := proto.Marshal(&eventv1.CommitNotice{ExecutionId: "e1", Seq: seq, Terminal: terminal, LastEventId: fmt.Sprint("ev", seq)})
		require.NoError(t, err)
		require.NoError(t, nc.Publish(subject, b))
		require.NoError(t, nc.Flush())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	publish(natsx.CommittedSubject("e1", 16), 2, false) // the start's
	seq, terminal, err := w.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), seq)
	require.False(t, terminal)

	// Steps decided inside their commits: no wake-up, the seq stays.
	for s := int64(6); s <= 18; s += 4 {
		publish(natsx.AdvancedSubject("e1", 16), s, false)
	}
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	_, _, err = w.Next(short)
	stop()
	require.ErrorIs(t, err, context.DeadlineExceeded, "an advanced notice woke the wait")
	seq, _ = w.Known()
	require.Equal(t, int64(2), seq)

	publish(natsx.CommittedSubject("e1", 16), 21, true) // the end
	seq, terminal, err = w.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(21), seq)
	require.True(t, terminal)
	endSeq, endID, ok := w.End()
	require.True(t, ok)
	require.Equal(t, int64(21), endSeq)
	require.Equal(t, "ev21", endID)
}
