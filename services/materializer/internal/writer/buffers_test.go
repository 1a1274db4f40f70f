package writer

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"unsafe"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/testkit"
)

// TestKeptBufferHoldsWhatItIsHandedAndReusesItself: hold copies a foreign buffer's bytes
// into the kept one, hands the kept one back as it is while it has room, grows (and keeps
// the larger buffer) when it has not, and lets a buffer beyond maxKept go.
func TestKeptBufferHoldsWhatItIsHandedAndReusesItself(t *testing.T) {
	var k keptBuffer
	got := k.hold([]byte("abc"), 1000)
	require.Equal(t, "abc", string(got))
	require.GreaterOrEqual(t, cap(got), 1003)
	require.Equal(t, unsafe.SliceData(got), unsafe.SliceData(k.b), "the grown buffer is kept")

	kept := append(got, "def"...)
	again := k.hold(kept, 500)
	require.Equal(t, unsafe.SliceData(kept), unsafe.SliceData(again), "the kept buffer with room is handed back as it is")
	require.Equal(t, "abcdef", string(again))

	foreign := []byte("xy")
	moved := k.hold(foreign, 10)
	require.Equal(t, "xy", string(moved))
	require.Equal(t, unsafe.SliceData(k.b), unsafe.SliceData(moved), "a foreign buffer moves into the kept one")

	// pgx grows the kept buffer itself (an append past its capacity): the copy holds the
	// same bytes at the same offsets, and moving it back changes none of them.
	grownByPgx := append(k.b[:cap(k.b)], 'z')[:3]
	copy(grownByPgx, "xyz")
	back := k.hold(grownByPgx, 1)
	require.Equal(t, "xyz", string(back))
	require.Equal(t, unsafe.SliceData(k.b), unsafe.SliceData(back))

	before := unsafe.SliceData(k.b)
	huge := k.hold(nil, maxKept+1)
	require.GreaterOrEqual(t, cap(huge), maxKept+1)
	require.Equal(t, before, unsafe.SliceData(k.b), "a buffer past maxKept is not kept")
}

// TestKeepWireMovesPendingOutputAndSendsNothing: sent between other messages, keepWire
// adds no byte to what the frontend writes, and the messages before it are kept; after a
// flush the kept buffer serves the next messages again without growing.
func TestKeepWireMovesPendingOutputAndSendsNothing(t *testing.T) {
	messages := func(f *pgproto3.Frontend, between func()) {
		f.Send(&pgproto3.Query{String: "BEGIN"})
		between()
		f.SendBind(&pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{bytes.Repeat([]byte("b"), 5000)}})
		f.SendExecute(&pgproto3.Execute{})
		f.SendSync(&pgproto3.Sync{})
	}
	var want bytes.Buffer
	plain := pgproto3.NewFrontend(bytes.NewReader(nil), &want)
	messages(plain, func() {})
	require.NoError(t, plain.Flush())

	var k keptBuffer
	for round := range 3 {
		var got bytes.Buffer
		f := pgproto3.NewFrontend(bytes.NewReader(nil), &got)
		messages(f, func() { f.Send(keepWire{k: &k, need: 6000}) })
		require.NoError(t, f.Flush())
		require.Equal(t, want.Bytes(), got.Bytes(), "round %d", round)
		if round == 0 {
			require.GreaterOrEqual(t, cap(k.b), 6000)
		}
	}
}

// TestCommitsReuseTheirConnectionsBuffers: a writer's commits of a few hundred events
// encode their statements into buffers their connection keeps, which the next commit of
// the same size uses again without growing them, and the events go into the log whole.
func TestCommitsReuseTheirConnectionsBuffers(t *testing.T) {
	ctx := context.Background()
	db, err := pgxext.Open(ctx, testkit.StartMigratedPostgres(t), 1) // one connection: every commit's
	require.NoError(t, err)
	t.Cleanup(db.Close)
	w := &Writer{DB: db}
	_, err = w.Commit(ctx, []*eventv1.Event{ev("r", "r-start", domain.EventPlaybookStarted)}, nil)
	require.NoError(t, err)
	const width = 300
	batch := func(i int) []*eventv1.Event {
		evs := make([]*eventv1.Event, width)
		for k := range evs {
			e := ev("r", fmt.Sprintf("r-done-%d-%d", i, k), domain.EventCommandCompleted)
			e.Step, e.CommandId = "fan", fmt.Sprintf("r-cmd-%d-%d", i, k)
			e.PayloadJson = bytes.Repeat([]byte("x"), 200)
			evs[k] = e
		}
		return evs
	}
	caps := func() (*connBuffers, [2]int) {
		c, err := w.DB.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
		b, ok := c.Conn().PgConn().CustomData()[buffersKey].(*connBuffers)
		require.True(t, ok, "the connection keeps buffers")
		return b, [2]int{cap(b.params.b), cap(b.wire.b)}
	}
	for i := range 6 {
		_, err := w.Commit(ctx, batch(i), nil)
		require.NoError(t, err)
	}
	kept, warm := caps()
	require.Greater(t, warm[0], width*200, "the parameters of a commit fit the kept buffer")
	require.Greater(t, warm[1], width*200, "its messages fit the kept write buffer")
	for i := 6; i < 12; i++ {
		_, err := w.Commit(ctx, batch(i), nil)
		require.NoError(t, err)
	}
	again, after := caps()
	require.Same(t, kept, again)
	require.Equal(t, warm, after, "commits of the same size grew no kept buffer")

	var rows, bodyBytes int
	require.NoError(t, w.DB.QueryRow(ctx, `SELECT count(*), coalesce(sum(octet_length(body)), 0)::int FROM noetl.event WHERE execution_id = 'r' AND type = $1`,
		domain.EventCommandCompleted).Scan(&rows, &bodyBytes))
	require.Equal(t, 12*width, rows)
	require.Greater(t, bodyBytes, 12*width*200, "every body went in whole")
}
