package tabular

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(s), &v))
	return v
}

func roundTrip(t require.TestingT, v any, batchRows int) (string, int64) {
	tb, ok := Detect(v)
	require.True(t, ok, "tabular")
	var ipcBuf bytes.Buffer
	n, err := WriteIPC(&ipcBuf, tb, batchRows)
	require.NoError(t, err)
	require.EqualValues(t, tb.Rows(), n)
	var out bytes.Buffer
	rows, err := ToJSON(&ipcBuf, &out)
	require.NoError(t, err)
	require.Equal(t, n, rows)
	return out.String(), rows
}

func TestTablesRoundTripToTheSameJSON(t *testing.T) {
	for name, src := range map[string]string{
		"records":       `[{"id":1,"name":"a<b>","score":1.5,"ok":true,"tags":["x"]},{"id":2,"name":null,"score":2,"ok":false,"tags":{"k":1}}]`,
		"table_objects": `{"columns":["id","v"],"command":"SELECT 2","row_count":2,"rows":[{"id":1,"v":"x"},{"id":2,"v":"y"}],"statements":1}`,
		"table_lists":   `{"columns":["b","a"],"rows":[[1,"x"],[2.25,null],[3,"z"]]}`,
		"mixed kinds":   `[{"v":1},{"v":"1"},{"v":[1]},{"v":null}]`,
		"all null":      `[{"v":null},{"v":null}]`,
		"negative zero": `[{"v":-0.0},{"v":1}]`,
	} {
		t.Run(name, func(t *testing.T) {
			v := decode(t, src)
			want, _ := json.Marshal(v)
			for _, batch := range []int{1, 2, 1000} {
				got, _ := roundTrip(t, v, batch)
				require.JSONEq(t, string(want), got)
				require.Equal(t, string(want), got, "byte-identical to json.Marshal")
			}
		})
	}
}

func TestNegativeIntegersStayIntegers(t *testing.T) {
	tb, ok := Detect(decode(t, `[{"v":-3},{"v":2}]`))
	require.True(t, ok)
	require.Equal(t, "int64", tb.Schema().Field(0).Type.String())
}

func TestDetectRefusesWhatIsNotATable(t *testing.T) {
	for _, src := range []string{`[]`, `[1,2]`, `[{"a":1},2]`, `{"rows":[]}`, `{"columns":["a"],"rows":[[1,2]]}`,
		`{"columns":["a","a"],"rows":[[1,2]]}`, `{"columns":["a"],"rows":[{"b":1}]}`, `{"columns":["a"],"rows":[{"a":1},[1]]}`, `"x"`, `{"a":1}`} {
		_, ok := Detect(decode(t, src))
		require.False(t, ok, src)
	}
}

func TestPagesAndCSV(t *testing.T) {
	var rows []any
	for i := 0; i < 25; i++ {
		rows = append(rows, map[string]any{"id": float64(i), "s": strings.Repeat("x", i%3)})
	}
	tb, ok := Detect(any(rows))
	require.True(t, ok)
	var b bytes.Buffer
	_, err := WriteIPC(&b, tb, 7)
	require.NoError(t, err)
	data := b.Bytes()

	page, total, err := Page(bytes.NewReader(data), 5, 10)
	require.NoError(t, err)
	require.EqualValues(t, 25, total)
	var p struct {
		Columns []string         `json:"columns"`
		Offset  int              `json:"offset"`
		Rows    []map[string]any `json:"rows"`
		Total   int              `json:"total_rows"`
	}
	require.NoError(t, json.Unmarshal(page, &p))
	require.Equal(t, []string{"id", "s"}, p.Columns)
	require.Len(t, p.Rows, 10)
	require.EqualValues(t, 5, p.Rows[0]["id"])
	require.EqualValues(t, 14, p.Rows[9]["id"])
	require.Equal(t, 25, p.Total)

	page, _, err = Page(bytes.NewReader(data), 24, 10)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(page, &p))
	require.Len(t, p.Rows, 1)

	var csvOut bytes.Buffer
	n, err := WriteCSV(bytes.NewReader(data), &csvOut)
	require.NoError(t, err)
	require.EqualValues(t, 25, n)
	lines := strings.Split(strings.TrimSpace(csvOut.String()), "\n")
	require.Len(t, lines, 26)
	require.Equal(t, "id,s", lines[0])
	require.Equal(t, "2,xx", lines[3])
}

func TestNotTabularStreamsAreRefused(t *testing.T) {
	_, err := ToJSON(strings.NewReader("not arrow"), &bytes.Buffer{})
	require.Error(t, err)
}

// jsonValue generates decoded JSON values.
func jsonValue(depth int) *rapid.Generator[any] {
	return rapid.Custom(func(t *rapid.T) any {
		k := rapid.IntRange(0, 6).Draw(t, "kind")
		if depth <= 0 && k >= 5 {
			k = 3
		}
		switch k {
		case 0:
			return nil
		case 1:
			return rapid.Bool().Draw(t, "b")
		case 2:
			return float64(rapid.Int64Range(-1<<53, 1<<53).Draw(t, "i"))
		case 3:
			return rapid.String().Draw(t, "s")
		case 4:
			return rapid.Float64().Draw(t, "f")
		case 5:
			return rapid.SliceOfN(jsonValue(depth-1), 0, 4).Draw(t, "l")
		default:
			return rapid.MapOfN(rapid.StringN(0, 5, -1), jsonValue(depth-1), 0, 4).Draw(t, "m")
		}
	})
}

func TestWriteJSONMatchesMarshal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := jsonValue(3).Draw(t, "v")
		want, err := json.Marshal(v)
		if err != nil {
			t.Skip("not marshalable")
		}
		var b bytes.Buffer
		n, err := WriteJSON(&b, v)
		require.NoError(t, err)
		require.Equal(t, string(want), b.String())
		require.EqualValues(t, len(want), n)
	})
}

func TestWriteStringInPiecesMatchesMarshal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// Bytes, not only valid UTF-8: invalid sequences, U+2028 and <>& escape as a whole.
		parts := rapid.SliceOf(rapid.SampledFrom([]string{"a", "é", "€", "𝄞", "\u2028", "<", "&", "\"", "\\", "\n", "\x00", "\xe2\x80", "\xff", "\x80"})).Draw(t, "parts")
		s := strings.Join(parts, "")
		want, _ := json.Marshal(s)
		var b bytes.Buffer
		bw := bufio.NewWriter(&b)
		require.NoError(t, writeString(bw, s, rapid.IntRange(1, 8).Draw(t, "piece")))
		require.NoError(t, bw.Flush())
		require.Equal(t, string(want), b.String())
	})
}

func TestRecordsRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cols := rapid.SliceOfNDistinct(rapid.StringN(1, 4, -1), 1, 4, func(s string) string { return s }).Draw(t, "cols")
		n := rapid.IntRange(1, 30).Draw(t, "rows")
		rows := make([]any, n)
		for i := range rows {
			m := map[string]any{}
			for _, c := range cols {
				m[c] = jsonValue(1).Draw(t, "cell")
			}
			rows[i] = m
		}
		want, err := json.Marshal(rows)
		if err != nil {
			t.Skip("not marshalable")
		}
		got, _ := roundTrip(t, any(rows), rapid.IntRange(1, 8).Draw(t, "batch"))
		require.Equal(t, string(want), got)
	})
}

// A writer that failed part-way goes back to the pool: the next call must not see its
// unflushed bytes or its error.
func TestWriteJSONAfterAFailedWrite(t *testing.T) {
	big := map[string]any{"s": strings.Repeat("x", 200<<10)}
	for range 4 {
		_, err := WriteJSON(failingWriter{}, big)
		require.ErrorIs(t, err, errFailing)
		var b bytes.Buffer
		n, err := WriteJSON(&b, map[string]any{"a": "b<", "k": []any{int64(1), true, nil}})
		require.NoError(t, err)
		require.Equal(t, `{"a":"b\u003c","k":[1,true,null]}`, b.String())
		require.EqualValues(t, b.Len(), n)
	}
}

var errFailing = errors.New("failing writer")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errFailing }

func TestWriteJSONASCIIKeysAndStringsMatchMarshal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ascii := func(label string) string {
			return string(rapid.SliceOfN(rapid.ByteRange(0, 0x80), 0, 12).Draw(t, label))
		}
		v := map[string]any{ascii("k1"): ascii("v1"), ascii("k2"): []any{ascii("v2")}}
		want, err := json.Marshal(v)
		require.NoError(t, err)
		var b bytes.Buffer
		_, err = WriteJSON(&b, v)
		require.NoError(t, err)
		require.Equal(t, string(want), b.String())
	})
}

func TestWriteJSONNumbersMatchMarshal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		parts := rapid.SliceOfN(rapid.SampledFrom([]string{"-", "+", ".", "e", "E", "0", "1", "9", "00", " ", "x"}), 0, 8).Draw(t, "parts")
		n := json.Number(strings.Join(parts, ""))
		want, wantErr := json.Marshal([]any{n})
		var b bytes.Buffer
		_, err := WriteJSON(&b, []any{n})
		if wantErr != nil {
			require.Error(t, err, "%q", n)
			return
		}
		require.NoError(t, err, "%q", n)
		require.Equal(t, string(want), b.String())
	})
}
