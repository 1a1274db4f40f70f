package notice

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// carryingNotice is a notice as the materializer sends it: the batch's events aboard.
func carryingNotice(seq int64, terminal bool, events int) *eventv1.CommitNotice {
	n := &eventv1.CommitNotice{ExecutionId: "e1", Tenant: "t", Seq: seq, Terminal: terminal, NeedsDecision: true}
	for i := range events {
		n.Events = append(n.Events, &eventv1.Event{
			EventId: "ev" + strings.Repeat("x", i), ExecutionId: "e1", Tenant: "t", Seq: seq - int64(events-1-i),
			Type: "call.done", Step: "fetch", PayloadJson: []byte(`{"result":{"rows":[1,2,3],"status":"ok"}}`),
			CommitTime: timestamppb.Now(), ProduceTime: timestamppb.Now(),
		})
	}
	return n
}

func TestNoticeHeadReadsWhatUnmarshalReads(t *testing.T) {
	t.Parallel()
	for _, n := range []*eventv1.CommitNotice{
		{},
		{ExecutionId: "e1", Seq: 1},
		{Terminal: true},
		carryingNotice(7, false, 3),
		carryingNotice(1<<40, true, 20),
		{ExecutionId: "e1", Seq: -1, Terminal: true}, // a negative seq is a ten-byte varint
		{ExecutionId: "e1", Seq: 4, Terminal: true, LastEventId: "e-end"},
		withLast(carryingNotice(12, true, 5), "ev-last"),
	} {
		b, err := proto.Marshal(n)
		require.NoError(t, err)
		var full eventv1.CommitNotice
		require.NoError(t, proto.Unmarshal(b, &full))
		seq, terminal, lastID, err := Head(b)
		require.NoError(t, err)
		require.Equal(t, full.GetSeq(), seq)
		require.Equal(t, full.GetTerminal(), terminal)
		require.Equal(t, full.GetLastEventId(), lastID)
	}
}

func withLast(n *eventv1.CommitNotice, id string) *eventv1.CommitNotice {
	n.LastEventId = id
	return n
}

func TestNoticeHeadLastFieldWinsAndUnknownFieldsAreSkipped(t *testing.T) {
	t.Parallel()
	b, err := proto.Marshal(&eventv1.CommitNotice{Seq: 3, Terminal: true})
	require.NoError(t, err)
	b = protowire.AppendTag(b, 99, protowire.BytesType) // a field this build does not know
	b = protowire.AppendBytes(b, []byte("later"))
	b = protowire.AppendTag(b, noticeSeqField, protowire.VarintType)
	b = protowire.AppendVarint(b, 9)
	b = protowire.AppendTag(b, noticeTerminalField, protowire.VarintType)
	b = protowire.AppendVarint(b, 0)
	var full eventv1.CommitNotice
	require.NoError(t, proto.Unmarshal(b, &full))
	seq, terminal, _, err := Head(b)
	require.NoError(t, err)
	require.Equal(t, int64(9), seq)
	require.Equal(t, full.GetSeq(), seq)
	require.False(t, terminal)
	require.Equal(t, full.GetTerminal(), terminal)
}

func TestNoticeHeadRefusesMalformedBytes(t *testing.T) {
	t.Parallel()
	b, err := proto.Marshal(carryingNotice(5, true, 2))
	require.NoError(t, err)
	for name, bad := range map[string][]byte{
		"truncated":        b[:len(b)-3],
		"bad tag":          {0x00},
		"truncated varint": {0x18, 0xff},
	} {
		_, _, _, err := Head(bad)
		require.Error(t, err, name)
		require.Error(t, proto.Unmarshal(bad, &eventv1.CommitNotice{}), name)
	}
}

// BenchmarkNoticeHead compares a waiter's read of a notice carrying 20 events: the
// whole message (what WaitExecution did) against the two fields it uses.
func BenchmarkNoticeHead(b *testing.B) {
	data, err := proto.Marshal(carryingNotice(100, false, 20))
	require.NoError(b, err)
	b.Run("unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var n eventv1.CommitNotice
			if err := proto.Unmarshal(data, &n); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fields", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, _, err := Head(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
