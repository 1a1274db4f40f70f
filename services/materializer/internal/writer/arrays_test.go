package writer

import (
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

// TestArraysEncodeAsPgxWould: the writer's arrays (and a row's body) are the bytes pgx
// writes for the same values, empty arrays, empty elements and multi-byte text included,
// arraySize says how many that is, and a registered array type still encodes every other
// value with pgx's own codec.
func TestArraysEncodeAsPgxWould(t *testing.T) {
	texts := [][]string{nil, {}, {""}, {"a", "", "étape-été", "x\x00y"}}
	byteas := [][][]byte{{}, {{}}, {{1, 2, 3}, {}, []byte("body")}}
	ints := [][]int64{{}, {0}, {1, -1, 1 << 62, -(1 << 62)}}
	plain := pgtype.NewMap()
	ours := pgtype.NewMap()
	for _, oid := range []uint32{pgtype.TextArrayOID, pgtype.ByteaArrayOID, pgtype.Int8ArrayOID, pgtype.ByteaOID} {
		typ, ok := ours.TypeForOID(oid)
		require.True(t, ok)
		ours.RegisterType(&pgtype.Type{Name: typ.Name, OID: oid, Codec: arrayCodec{Codec: typ.Codec, bufs: &connBuffers{}}})
	}
	check := func(oid uint32, pgxValue, ourValue any) {
		t.Helper()
		want, err := plain.Encode(oid, pgtype.BinaryFormatCode, pgxValue, nil)
		require.NoError(t, err)
		got, err := ours.Encode(oid, pgtype.BinaryFormatCode, ourValue, nil)
		require.NoError(t, err)
		require.Equal(t, want, got, "%T %v", ourValue, pgxValue)
		require.Equal(t, len(want), arraySize(ourValue), "the size the kept buffer is grown by (buffers.go) is the size written")
		again, err := ours.Encode(oid, pgtype.BinaryFormatCode, pgxValue, nil)
		require.NoError(t, err)
		require.Equal(t, want, again, "pgx's own values keep pgx's codec")
	}
	for _, v := range texts {
		if v == nil {
			continue // a nil slice is NULL to pgx; the writer never queues one
		}
		check(pgtype.TextArrayOID, v, textArray(v))
	}
	for _, v := range byteas {
		check(pgtype.ByteaArrayOID, v, byteaArray(v))
	}
	for _, v := range ints {
		check(pgtype.Int8ArrayOID, v, int8Array(v))
	}
	for _, v := range [][]byte{{0}, []byte("a body"), make([]byte, 70_000)} {
		check(pgtype.ByteaOID, v, byteaValue(v))
	}
}
