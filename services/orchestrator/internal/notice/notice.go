// Package notice reads the materializer's commit notices as the orchestrator's waiters need
// them (WaitExecution, a variables write waiting for its own commit): how far the log of an
// execution has grown and whether it ended, and where it ended, without decoding the events
// a notice carries.
package notice

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// The CommitNotice fields a waiter reads, by number from the generated descriptor.
var (
	noticeSeqField      = noticeField("seq")
	noticeTerminalField = noticeField("terminal")
	noticeLastIDField   = noticeField("last_event_id")
)

func noticeField(name protoreflect.Name) protowire.Number {
	return (&eventv1.CommitNotice{}).ProtoReflect().Descriptor().Fields().ByName(name).Number()
}

// Head reads only seq, terminal and last_event_id (the id of the event at seq, "" when
// the notice does not say) from a marshalled CommitNotice, skipping the rest unparsed: a
// notice can carry up to the notice budget of events, and a waiter needs none of them. As
// proto.Unmarshal does, the last occurrence of a field wins and a field of an unexpected
// wire type is passed over; bytes that are not a well-formed message are an error.
func Head(b []byte) (seq int64, terminal bool, lastID string, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, false, "", protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType && (num == noticeSeqField || num == noticeTerminalField):
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, false, "", protowire.ParseError(n)
			}
			b = b[n:]
			if num == noticeSeqField {
				seq = int64(v)
			} else {
				terminal = v != 0
			}
		case typ == protowire.BytesType && num == noticeLastIDField:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, false, "", protowire.ParseError(n)
			}
			lastID, b = string(v), b[n:]
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return 0, false, "", protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return seq, terminal, lastID, nil
}
