package writer

import (
	"encoding/binary"
	"io"
	"math"
	"strings"
	"time"
)

// COPY's binary format, written by the writer itself.
//
// A batch of copyMin rows or more, or whose bodies reach copyBytes, goes into the log with
// COPY. pgx's CopyFrom takes each row as a []any and encodes every value through its type
// map, which boxes each value (an allocation per column, nine per row) and looks up an
// encoding plan per value, and it encodes on a goroutine of its own behind a pipe, into a
// buffer grown by doubling. The log's columns are fixed and of five plain types, so the
// writer streams the rows itself (copyStream) to the connection's COPY (pgconn.CopyFrom,
// which reads it 64 KiB at a time into a pooled buffer): each row's few fixed bytes are
// written into a small reused buffer and its body is read from where it already is, so no
// buffer holds the batch, however large its bodies. The rows are those an INSERT of the
// same batch writes, column for column: text as its bytes, bigint as 8 big-endian bytes,
// timestamptz as the microseconds since 2000-01-01 UTC in 8, bytea as its bytes.

// sqlCopy copies rows in the order of eventColumns, in binary format (copyStream).
var sqlCopy = `COPY noetl.event (` + strings.Join(eventColumns, ", ") + `) FROM STDIN (FORMAT binary)`

// copySignature opens a binary COPY stream: the signature, then no flags and no header
// extension.
var copySignature = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// copyTrailer ends a binary COPY stream: a field count of -1.
var copyTrailer = binary.BigEndian.AppendUint16(nil, math.MaxUint16)

// pgEpochMicros is 2000-01-01 00:00:00 UTC, Postgres's epoch, in microseconds since the
// Unix epoch.
const pgEpochMicros = 946_684_800 * 1_000_000

// copyStream reads as the binary COPY stream of its rows, committed at one time.
type copyStream struct {
	rows   *eventRows
	micros int64  // the commit time, in Postgres's microseconds
	next   int    // the row whose fixed part comes next; -1 before the signature
	piece  []byte // what is left of the piece being read
	body   bool   // piece is the body of row next-1
	fixed  []byte // row next-1's fixed part, reused from row to row
	done   bool   // the trailer was handed out
}

// copyRowsOf is the binary COPY stream of r's rows, committed at at.
func copyRowsOf(r *eventRows, at time.Time) *copyStream {
	return &copyStream{rows: r, micros: at.Unix()*1_000_000 + int64(at.Nanosecond()/1_000) - pgEpochMicros, next: -1}
}

// Read implements io.Reader.
func (s *copyStream) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(s.piece) == 0 && !s.advance() {
			if n == 0 {
				return 0, io.EOF
			}
			break
		}
		c := copy(p[n:], s.piece)
		s.piece, n = s.piece[c:], n+c
	}
	return n, nil
}

// advance makes piece the stream's next piece, and reports false at its end: the
// signature, then each row's fixed part (its columns up to the body's length) and body,
// then the trailer.
func (s *copyStream) advance() bool {
	r := s.rows
	switch {
	case s.next < 0:
		s.piece, s.next = copySignature, 0
	case s.next > 0 && !s.body:
		s.piece, s.body = r.body[s.next-1], true
	case s.next < len(r.ex):
		k := s.next
		b := binary.BigEndian.AppendUint16(s.fixed[:0], uint16(len(eventColumns)))
		b = copyText(b, r.ex[k])
		b = binary.BigEndian.AppendUint32(b, 8)
		b = binary.BigEndian.AppendUint64(b, uint64(r.seq[k]))
		b = copyText(b, r.ev[k])
		b = copyText(b, r.tn[k])
		b = copyText(b, r.ty[k])
		b = copyText(b, r.st[k])
		b = copyText(b, r.cmd[k])
		b = binary.BigEndian.AppendUint32(b, 8)
		b = binary.BigEndian.AppendUint64(b, uint64(s.micros))
		b = binary.BigEndian.AppendUint32(b, uint32(len(r.body[k])))
		s.fixed, s.piece, s.body, s.next = b, b, false, k+1
	case !s.done:
		s.piece, s.done = copyTrailer, true
	default:
		return false
	}
	return true
}

// copyText appends s as a column of a binary COPY row: its length, then its bytes.
func copyText(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}
