package writer

import (
	"encoding/binary"
	"math"
	"strings"
	"time"
)

// COPY's binary format, written by the writer itself.
//
// A batch of copyMin rows or more goes into the log with COPY. pgx's CopyFrom takes each
// row as a []any and encodes every value through its type map, which boxes each value (an
// allocation per column, nine per row) and looks up an encoding plan per value, and it
// encodes on a goroutine of its own behind a pipe. The log's columns are fixed and of five
// plain types, so the writer encodes the rows itself (copyData), into one buffer, and hands
// it to the connection's COPY as it is (pgconn.CopyFrom). The rows are those an INSERT of
// the same batch writes, column for column: text as its bytes, bigint as 8 big-endian
// bytes, timestamptz as the microseconds since 2000-01-01 UTC in 8, bytea as its bytes.

// sqlCopy copies rows in the order of eventColumns, in binary format (copyData).
var sqlCopy = `COPY noetl.event (` + strings.Join(eventColumns, ", ") + `) FROM STDIN (FORMAT binary)`

// copySignature opens a binary COPY stream: the signature, then no flags and no header
// extension.
var copySignature = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// pgEpochMicros is 2000-01-01 00:00:00 UTC, Postgres's epoch, in microseconds since the
// Unix epoch.
const pgEpochMicros = 946_684_800 * 1_000_000

// copyData encodes r's rows, committed at at, as a binary COPY stream of eventColumns.
func (r *eventRows) copyData(at time.Time) []byte {
	const fixed = 2 + 9*4 + 8 + 8 // field count, a length per column, seq, committed_at
	size := len(copySignature) + 2 + r.bytes + len(r.ex)*fixed
	for k := range r.ex {
		size += len(r.ex[k]) + len(r.ev[k]) + len(r.tn[k]) + len(r.ty[k]) + len(r.st[k]) + len(r.cmd[k])
	}
	b := make([]byte, 0, size)
	b = append(b, copySignature...)
	micros := at.Unix()*1_000_000 + int64(at.Nanosecond()/1_000) - pgEpochMicros
	for k := range r.ex {
		b = binary.BigEndian.AppendUint16(b, uint16(len(eventColumns)))
		b = copyText(b, r.ex[k])
		b = binary.BigEndian.AppendUint32(b, 8)
		b = binary.BigEndian.AppendUint64(b, uint64(r.seq[k]))
		b = copyText(b, r.ev[k])
		b = copyText(b, r.tn[k])
		b = copyText(b, r.ty[k])
		b = copyText(b, r.st[k])
		b = copyText(b, r.cmd[k])
		b = binary.BigEndian.AppendUint32(b, 8)
		b = binary.BigEndian.AppendUint64(b, uint64(micros))
		b = binary.BigEndian.AppendUint32(b, uint32(len(r.body[k])))
		b = append(b, r.body[k]...)
	}
	return binary.BigEndian.AppendUint16(b, math.MaxUint16) // the trailer: a field count of -1
}

// copyText appends s as a column of a binary COPY row: its length, then its bytes.
func copyText(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}
