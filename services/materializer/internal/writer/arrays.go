package writer

import (
	"encoding/binary"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Arrays encoded by the writer.
//
// A batch of fewer than copyMin rows is inserted with its columns as arrays (unnest), and
// its guards and probes name its events as arrays too. pgx encodes a []string as a text[]
// element by element through an interface (pgtype.ArrayGetter's Index), which boxes each
// element, an allocation per row and column, and looks up an encoding plan for each. The
// writer's large arrays are of three element types, so it passes them as textArray,
// byteaArray and int8Array, which a codec registered on the writer's connections
// (withArrays) writes directly in Postgres's binary array format, the format pgx writes for
// the same values; a value of any other type keeps pgx's own codec. The codec writes them,
// and a row's body (byteaValue), into the connection's kept parameter buffer (buffers.go).

// textArray, byteaArray and int8Array are a text[], a bytea[] and a bigint[] parameter of
// the writer's statements, encoded by arrayCodec; byteaValue is a bytea parameter (a body
// in a row of values, keyed.go), which it copies into the kept buffer (buffers.go).
type (
	textArray  []string
	byteaArray [][]byte
	int8Array  []int64
	byteaValue []byte
)

// buffersKey is where a connection's custom data keeps its *connBuffers.
const buffersKey = "noetl.writer.buffers"

// withArrays registers arrayCodec on c's type map for the writer's array types, once per
// connection, and returns the connection's kept buffers (buffers.go).
func withArrays(c *pgx.Conn) *connBuffers {
	data := c.PgConn().CustomData()
	if b, ok := data[buffersKey].(*connBuffers); ok {
		return b
	}
	b := &connBuffers{}
	m := c.TypeMap()
	for _, oid := range []uint32{pgtype.TextArrayOID, pgtype.ByteaArrayOID, pgtype.Int8ArrayOID, pgtype.ByteaOID} {
		if t, ok := m.TypeForOID(oid); ok {
			m.RegisterType(&pgtype.Type{Name: t.Name, OID: oid, Codec: arrayCodec{Codec: t.Codec, bufs: b}})
		}
	}
	data[buffersKey] = b
	return b
}

// arrayCodec is an array type's codec that encodes the writer's arrays itself, into its
// connection's kept parameter buffer, and leaves everything else to the codec it wraps.
type arrayCodec struct {
	pgtype.Codec
	bufs *connBuffers
}

// PlanEncode implements pgtype.Codec.
func (c arrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if format == pgtype.BinaryFormatCode {
		switch value.(type) {
		case textArray, byteaArray, int8Array, byteaValue:
			return arrayPlan{c.bufs}
		}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

// arrayPlan writes a textArray, byteaArray or int8Array in binary array format, and a
// byteaValue as its bytes.
type arrayPlan struct{ bufs *connBuffers }

// Encode implements pgtype.EncodePlan: it appends the value to buf, which it first moves
// into the connection's kept parameter buffer (connBuffers.params).
func (p arrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	buf = p.bufs.params.hold(buf, arraySize(value))
	switch v := value.(type) {
	case byteaValue:
		buf = append(buf, v...)
	case textArray:
		buf = arrayHeader(buf, pgtype.TextOID, len(v))
		for _, s := range v {
			buf = copyText(buf, s)
		}
	case byteaArray:
		buf = arrayHeader(buf, pgtype.ByteaOID, len(v))
		for _, b := range v {
			buf = binary.BigEndian.AppendUint32(buf, uint32(len(b)))
			buf = append(buf, b...)
		}
	case int8Array:
		buf = arrayHeader(buf, pgtype.Int8OID, len(v))
		for _, n := range v {
			buf = binary.BigEndian.AppendUint32(buf, 8)
			buf = binary.BigEndian.AppendUint64(buf, uint64(n))
		}
	}
	return buf, nil
}

// arrayHeaderSize is the size of an array's header (arrayHeader).
const arrayHeaderSize = 20

// arraySize is the size of value in binary format, as arrayPlan writes it.
func arraySize(value any) int {
	n := arrayHeaderSize
	switch v := value.(type) {
	case byteaValue:
		return len(v)
	case textArray:
		for _, s := range v {
			n += 4 + len(s)
		}
	case byteaArray:
		for _, b := range v {
			n += 4 + len(b)
		}
	case int8Array:
		n += 12 * len(v)
	}
	return n
}

// arrayHeader appends the header of a one-dimensional array of n elements of type elem,
// none null, indexed from 1 (an empty one too, as pgx writes it).
func arrayHeader(buf []byte, elem uint32, n int) []byte {
	buf = binary.BigEndian.AppendUint32(buf, 1)
	buf = binary.BigEndian.AppendUint32(buf, 0)
	buf = binary.BigEndian.AppendUint32(buf, elem)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	return binary.BigEndian.AppendUint32(buf, 1)
}
