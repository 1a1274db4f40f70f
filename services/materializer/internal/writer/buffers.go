package writer

import (
	"errors"
	"unsafe"

	"github.com/jackc/pgx/v5"
)

// Buffers a connection keeps from commit to commit.
//
// pgx encodes a statement's parameters into a buffer of the connection's, then copies them
// into the Bind message in the connection's write buffer. Both start small, grow by
// appending, and are dropped once a statement has used them (pgx keeps a parameter buffer
// of at most 256 bytes and a write buffer of at most 1 KiB). A commit that inserts a few
// hundred events sends a few hundred kilobytes in one Bind, so each commit allocated its
// parameters' and its message's size several times over while the buffers grew, about
// 4.5 MB for one 1,000-wide fan-out; and a young process, whose heap has not yet grown to
// that, paid a page fault per fresh page (1,250 faults of about 12 us each per fan-out on the
// development VM, most of them here).
//
// So each of the writer's connections keeps two buffers (connBuffers), sized for the
// largest commit it sent, and hands them to pgx through its own interfaces: the arrays'
// encoder (arrayPlan) moves the parameters encoded so far into the kept parameter buffer
// before it appends an array, and a message that encodes as nothing (keepWire), sent before
// a commit's statements, moves the connection's pending output into the kept write buffer,
// grown to what the statements need. pgx appends to the buffer it is handed and, like any
// append, goes on with the buffer returned; when it later drops one, the connection still
// holds it for the next commit.
//
// What holds:
//   - A kept buffer is only ever used by its connection, which one goroutine drives at a
//     time, and only as pgx's own buffer would be: the bytes pgx had appended are copied
//     into it first, and nothing is written past them.
//   - The parameter buffer is overwritten only while a statement's parameters are being
//     encoded: pgx copies each statement's parameters into the write buffer before it
//     encodes the next statement's. If pgx grew the buffer itself in between (a value of
//     its own encoding), what it grew holds the same bytes at the same offsets, so moving
//     it back overwrites nothing with anything else.
//   - A kept buffer never exceeds maxKept: a larger need is met once, then let go.

// maxKept bounds a kept buffer; an INSERT carries less than copyBytes of bodies.
const maxKept = 4 << 20

// connBuffers are the buffers one connection keeps (withArrays).
type connBuffers struct {
	params, wire keptBuffer
}

// keptBuffer is a buffer kept from commit to commit.
type keptBuffer struct{ b []byte }

// hold returns buf's bytes in the kept buffer, with room for need more: buf itself when it
// is the kept buffer with room enough; a copy into the kept buffer when that has room; else
// a copy into a larger buffer, kept from then on unless larger than maxKept.
func (k *keptBuffer) hold(buf []byte, need int) []byte {
	size := len(buf) + need
	kept := cap(k.b) > 0 && unsafe.SliceData(buf) == unsafe.SliceData(k.b)
	if size <= cap(k.b) {
		if kept {
			return buf
		}
		return append(k.b[:0], buf...)
	}
	grown := make([]byte, len(buf), size+size/4)
	copy(grown, buf)
	if cap(grown) <= maxKept {
		k.b = grown[:0]
	}
	return grown
}

// keepWire is a frontend message that encodes as nothing: sent on a connection
// (pgproto3.Frontend.Send) before statements, it moves the connection's pending output into
// the kept write buffer with room for need bytes more.
type keepWire struct {
	k    *keptBuffer
	need int
}

// Frontend implements pgproto3.FrontendMessage.
func (keepWire) Frontend() {}

// Decode implements pgproto3.Message; the message is never received.
func (keepWire) Decode([]byte) error {
	return errors.New("writer: keepWire is not a message to decode")
}

// Encode implements pgproto3.Message: it appends nothing.
func (m keepWire) Encode(dst []byte) ([]byte, error) { return m.k.hold(dst, m.need), nil }

// holdWire makes c's write buffer its kept one, with room for need bytes more.
func holdWire(c *pgx.Conn, need int) {
	c.PgConn().Frontend().Send(keepWire{k: &withArrays(c).wire, need: need})
}

// wireSize estimates the size of the Bind messages of b's queries: their arguments'
// encoded sizes and some framing. An estimate short of the truth costs pgx a grown buffer,
// not an error.
func wireSize(b *pgx.Batch) int {
	n := 0
	for _, q := range b.QueuedQueries {
		n += 64
		for _, a := range q.Arguments {
			switch v := a.(type) {
			case textArray, byteaArray, int8Array, byteaValue:
				n += 4 + arraySize(v)
			case string:
				n += 4 + len(v)
			case []byte:
				n += 4 + len(v)
			default:
				n += 16
			}
		}
	}
	return n
}
