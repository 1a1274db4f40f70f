package writer

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
)

// TestCopiedRowsHoldEveryColumnAsAnInsertWould: a batch large enough to copy is written by
// the writer's own binary COPY stream (copydata.go), and every column of every row reads
// back as the batch's INSERT would have written it: seq, ids, tenant, type, step, command,
// the commit time to the microsecond, and the body, whatever its size or its text.
func TestCopiedRowsHoldEveryColumnAsAnInsertWould(t *testing.T) {
	ctx := context.Background()
	w := newWriter(t)
	at := time.Date(2026, 12, 7, 12, 34, 56, 123_456_789, time.UTC)
	w.Now = func() time.Time { return at }
	_, err := w.Commit(ctx, []*eventv1.Event{ev("c", "c0", domain.EventPlaybookStarted)}, nil)
	require.NoError(t, err)
	copies := w.copies.Load()

	batch := make([]*eventv1.Event, copyMin+3)
	for k := range batch {
		e := ev("c", fmt.Sprintf("c-done-%d", k), domain.EventCommandCompleted)
		e.Step = fmt.Sprintf("étape-%d", k%3)
		if k%2 == 0 {
			e.CommandId = fmt.Sprintf("c-cmd-%d", k)
		}
		e.PayloadJson = []byte(`{"result":"` + strings.Repeat("r", k*97) + `"}`)
		batch[k] = e
	}
	res, err := w.Commit(ctx, batch, nil)
	require.NoError(t, err)
	require.Equal(t, len(batch), res.Committed)
	require.Equal(t, copies+1, w.copies.Load(), "the batch went in with COPY")

	got := rowsAfter(t, w, "c", 1)
	require.Len(t, got, len(batch))
	for k, x := range got {
		e := batch[k]
		require.Equal(t, []any{int64(k + 2), e.GetEventId(), "t1", domain.EventCommandCompleted, e.GetStep(), e.GetCommandId()},
			[]any{x.seq, x.id, x.tenant, x.typ, x.step, x.cmd}, "row %d", k)
		require.True(t, x.at.Equal(at.Truncate(time.Microsecond)), "row %d committed at %v, not %v", k, x.at, at)
		require.True(t, x.at.Equal(e.GetCommitTime().AsTime()), "row %d: the commit time its notice carries", k)
		stored := &eventv1.Event{}
		require.NoError(t, proto.Unmarshal(x.body, stored), "row %d", k)
		require.Equal(t, e.GetEventId(), stored.GetEventId(), "row %d", k)
		require.Equal(t, e.GetPayloadJson(), stored.GetPayloadJson(), "row %d", k)
	}
	_, last := logOf(t, w, "c")
	require.Equal(t, int64(len(batch)+1), last, "the projection follows the copied rows")
}

// TestCopyStreamReadsAlikeInAnyPieces: the stream is the same bytes however the connection
// reads it (one byte at a time, in halves, all at once), opens with COPY's signature, ends
// with its trailer, and holds each row's body whole.
func TestCopyStreamReadsAlikeInAnyPieces(t *testing.T) {
	var r eventRows
	for k := range 5 {
		e := ev("s", fmt.Sprintf("s-%d", k), domain.EventCommandCompleted)
		e.PayloadJson = []byte(strings.Repeat("b", k*1000))
		require.NoError(t, r.add(e, nil, 0, int64(k+1)))
	}
	at := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	all, err := io.ReadAll(copyRowsOf(&r, at))
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(all, copySignature))
	require.True(t, bytes.HasSuffix(all, copyTrailer))
	for _, body := range r.body {
		require.True(t, bytes.Contains(all, binary.BigEndian.AppendUint32(nil, uint32(len(body)))), "a row's body length")
		require.True(t, bytes.Contains(all, body), "a row's body")
	}
	require.NoError(t, iotest.TestReader(copyRowsOf(&r, at), all))
	var empty eventRows
	none, err := io.ReadAll(copyRowsOf(&empty, at))
	require.NoError(t, err)
	require.Equal(t, append(append([]byte{}, copySignature...), copyTrailer...), none, "no rows: the signature and the trailer")
}
