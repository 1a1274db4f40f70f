package tabular

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/csv"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// WriteIPC writes the table to w as an Arrow IPC stream and returns the rows written.
func WriteIPC(w io.Writer, t *Table, batchRows int) (int64, error) {
	iw := ipc.NewWriter(w, ipc.WithSchema(t.Schema()))
	var rows int64
	err := t.Batches(nil, batchRows, func(rec arrow.RecordBatch) error {
		rows += rec.NumRows()
		return iw.Write(rec)
	})
	if cerr := iw.Close(); err == nil {
		err = cerr
	}
	return rows, err
}

// column writes the JSON form of one cell.
type column struct {
	arr  arrow.Array
	json bool
}

func (c *column) append(buf []byte, i int) ([]byte, error) {
	if c.arr.IsNull(i) {
		return append(buf, "null"...), nil
	}
	switch a := c.arr.(type) {
	case *array.Int64:
		return strconv.AppendInt(buf, a.Value(i), 10), nil
	case *array.Float64:
		b, err := json.Marshal(a.Value(i))
		return append(buf, b...), err
	case *array.Boolean:
		return strconv.AppendBool(buf, a.Value(i)), nil
	case *array.String:
		if c.json {
			return append(buf, a.Value(i)...), nil
		}
		b, err := json.Marshal(a.Value(i))
		return append(buf, b...), err
	}
	return buf, fmt.Errorf("tabular: column type %s is not supported", c.arr.DataType())
}

// rowWriter writes the rows of record batches as JSON records or lists.
type rowWriter struct {
	schema  *arrow.Schema
	objects bool
	order   []int // field indexes in key order (objects) or column order (lists)
	keys    [][]byte
	isJSON  []bool
	buf     []byte
}

func newRowWriter(schema *arrow.Schema, objects bool) *rowWriter {
	n := schema.NumFields()
	rw := &rowWriter{schema: schema, objects: objects, order: make([]int, n), keys: make([][]byte, n), isJSON: make([]bool, n)}
	for i, f := range schema.Fields() {
		rw.order[i] = i
		rw.keys[i], _ = json.Marshal(f.Name)
		rw.isJSON[i] = f.Metadata.FindKey(MetaJSON) >= 0
	}
	if objects {
		// json.Marshal writes map keys sorted.
		sort.SliceStable(rw.order, func(a, b int) bool { return schema.Field(rw.order[a]).Name < schema.Field(rw.order[b]).Name })
	}
	return rw
}

// write appends row i of rec.
func (rw *rowWriter) write(w *bufio.Writer, rec arrow.RecordBatch, i int) error {
	buf := rw.buf[:0]
	open, end := byte('['), byte(']')
	if rw.objects {
		open, end = '{', '}'
	}
	buf = append(buf, open)
	for n, f := range rw.order {
		if n > 0 {
			buf = append(buf, ',')
		}
		if rw.objects {
			buf = append(buf, rw.keys[f]...)
			buf = append(buf, ':')
		}
		c := column{arr: rec.Column(f), json: rw.isJSON[f]}
		var err error
		if buf, err = c.append(buf, i); err != nil {
			return err
		}
	}
	buf = append(buf, end)
	rw.buf = buf
	_, err := w.Write(buf)
	return err
}

// ToJSON reads an Arrow IPC stream written by WriteIPC and writes the original JSON value
// to w; it returns the rows read. Memory stays bounded by one record batch.
func ToJSON(r io.Reader, w io.Writer) (int64, error) {
	rdr, err := ipc.NewReader(r, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return 0, err
	}
	defer rdr.Release()
	return RecordsToJSON(rdr, w)
}

// RecordsToJSON is ToJSON over any record reader (an IPC stream, a Flight DoGet stream)
// whose schema carries the metadata WriteIPC records.
func RecordsToJSON(rdr array.RecordReader, w io.Writer) (int64, error) {
	schema := rdr.Schema()
	shape, ok := schema.Metadata().GetValue(MetaShape)
	if !ok {
		return 0, ErrNotTabular
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	rows := int64(0)
	writeRows := func(objects bool) error {
		rw := newRowWriter(schema, objects)
		if err := bw.WriteByte('['); err != nil {
			return err
		}
		for rdr.Next() {
			rec := rdr.RecordBatch()
			for i := 0; i < int(rec.NumRows()); i++ {
				if rows > 0 {
					if err := bw.WriteByte(','); err != nil {
						return err
					}
				}
				if err := rw.write(bw, rec, i); err != nil {
					return err
				}
				rows++
			}
		}
		if err := rdr.Err(); err != nil {
			return err
		}
		return bw.WriteByte(']')
	}
	switch shape {
	case ShapeRecords:
		if err := writeRows(true); err != nil {
			return rows, err
		}
	case ShapeObjects, ShapeLists:
		env := map[string]json.RawMessage{}
		if e, ok := schema.Metadata().GetValue(MetaEnvelope); ok {
			if err := json.Unmarshal([]byte(e), &env); err != nil {
				return 0, fmt.Errorf("tabular: envelope: %w", err)
			}
		}
		names := make([]string, schema.NumFields())
		for i, f := range schema.Fields() {
			names[i] = f.Name
		}
		env["columns"], _ = json.Marshal(names)
		env["rows"] = nil
		keys := make([]string, 0, len(env))
		for k := range env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		_ = bw.WriteByte('{')
		for n, k := range keys {
			if n > 0 {
				_ = bw.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			_, _ = bw.Write(kb)
			_ = bw.WriteByte(':')
			if k == "rows" {
				if err := writeRows(shape == ShapeObjects); err != nil {
					return rows, err
				}
				continue
			}
			_, _ = bw.Write(env[k])
		}
		_ = bw.WriteByte('}')
	default:
		return 0, fmt.Errorf("tabular: unknown shape %q", shape)
	}
	return rows, bw.Flush()
}

// Page reads an Arrow IPC stream and returns, as JSON, the page object
// {"columns": [...], "offset": o, "rows": [records], "total_rows": n} with at most limit
// rows starting at offset; it reads the whole stream to count the rows.
func Page(r io.Reader, offset, limit int64) ([]byte, int64, error) {
	rdr, err := ipc.NewReader(r, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return nil, 0, err
	}
	defer rdr.Release()
	schema := rdr.Schema()
	var out bufWriter
	bw := bufio.NewWriter(&out)
	names := make([]string, schema.NumFields())
	for i, f := range schema.Fields() {
		names[i] = f.Name
	}
	cols, _ := json.Marshal(names)
	fmt.Fprintf(bw, `{"columns":%s,"offset":%d,"rows":[`, cols, offset)
	rw := newRowWriter(schema, true)
	var total, written int64
	for rdr.Next() {
		rec := rdr.RecordBatch()
		n := rec.NumRows()
		for i := max(offset-total, 0); i < n && written < limit; i++ {
			if written > 0 {
				_ = bw.WriteByte(',')
			}
			if err := rw.write(bw, rec, int(i)); err != nil {
				return nil, 0, err
			}
			written++
		}
		total += n
	}
	if err := rdr.Err(); err != nil {
		return nil, 0, err
	}
	fmt.Fprintf(bw, `],"total_rows":%d}`, total)
	if err := bw.Flush(); err != nil {
		return nil, 0, err
	}
	return out.b, total, nil
}

// bufWriter collects bytes.
type bufWriter struct{ b []byte }

func (w *bufWriter) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

// WriteCSV reads an Arrow IPC stream and writes it as CSV with a header line.
func WriteCSV(r io.Reader, w io.Writer) (int64, error) {
	rdr, err := ipc.NewReader(r, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return 0, err
	}
	defer rdr.Release()
	return RecordsToCSV(rdr, w)
}

// RecordsToCSV is WriteCSV over any record reader.
func RecordsToCSV(rdr array.RecordReader, w io.Writer) (int64, error) {
	cw := csv.NewWriter(w, rdr.Schema(), csv.WithHeader(true), csv.WithNullWriter(""))
	var rows int64
	for rdr.Next() {
		rec := rdr.RecordBatch()
		if err := cw.Write(rec); err != nil {
			return rows, err
		}
		rows += rec.NumRows()
	}
	if err := rdr.Err(); err != nil {
		return rows, err
	}
	return rows, cw.Flush()
}
