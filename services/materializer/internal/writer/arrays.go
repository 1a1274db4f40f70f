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
// the same values; a value of any other type keeps pgx's own codec.

// textArray, byteaArray and int8Array are a text[], a bytea[] and a bigint[] parameter of
// the writer's statements, encoded by arrayCodec.
type (
	textArray  []string
	byteaArray [][]byte
	int8Array  []int64
)

// arraysKey marks, in a connection's custom data, that its type map has arrayCodec.
const arraysKey = "noetl.writer.arrays"

// withArrays registers arrayCodec on c's type map for the writer's array types, once per
// connection.
func withArrays(c *pgx.Conn) {
	data := c.PgConn().CustomData()
	if data[arraysKey] != nil {
		return
	}
	m := c.TypeMap()
	for _, oid := range []uint32{pgtype.TextArrayOID, pgtype.ByteaArrayOID, pgtype.Int8ArrayOID} {
		if t, ok := m.TypeForOID(oid); ok {
			m.RegisterType(&pgtype.Type{Name: t.Name, OID: oid, Codec: arrayCodec{t.Codec}})
		}
	}
	data[arraysKey] = true
}

// arrayCodec is an array type's codec that encodes the writer's arrays itself and leaves
// everything else to the codec it wraps.
type arrayCodec struct{ pgtype.Codec }

// PlanEncode implements pgtype.Codec.
func (c arrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if format == pgtype.BinaryFormatCode {
		switch value.(type) {
		case textArray, byteaArray, int8Array:
			return arrayPlan{}
		}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

// arrayPlan writes a textArray, byteaArray or int8Array in binary array format.
type arrayPlan struct{}

// Encode implements pgtype.EncodePlan.
func (arrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	switch v := value.(type) {
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

// arrayHeader appends the header of a one-dimensional array of n elements of type elem,
// none null, indexed from 1 (an empty one too, as pgx writes it).
func arrayHeader(buf []byte, elem uint32, n int) []byte {
	buf = binary.BigEndian.AppendUint32(buf, 1)
	buf = binary.BigEndian.AppendUint32(buf, 0)
	buf = binary.BigEndian.AppendUint32(buf, elem)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	return binary.BigEndian.AppendUint32(buf, 1)
}
