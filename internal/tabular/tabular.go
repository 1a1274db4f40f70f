// Package tabular moves tabular results between their JSON form and Apache Arrow.
//
// A result is tabular when it is a list of records ([{col: v}, ...]) or a table object
// with "columns" (names) and "rows" (records or lists), as the postgres tool returns.
// Such results are stored as an Arrow IPC stream whose schema metadata records the
// original shape, so that ToJSON gives back exactly the bytes json.Marshal gave for the
// original value: a missing key in a record comes back as null, which is the one
// difference.
//
// Column types are inferred from the values: booleans, integers (int64), numbers with
// a fraction (float64, integers in the same column widen to float64), strings; a column
// that mixes kinds or holds objects or lists is stored as utf8 JSON text and marked
// with the field metadata "noetl.json".
package tabular

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// ContentType is the MIME type of a stored Arrow IPC stream.
const ContentType = "application/vnd.apache.arrow.stream"

// Shapes of tabular JSON values, recorded in the schema metadata under MetaShape.
const (
	// ShapeRecords is a list of records: [{"a": 1}, ...].
	ShapeRecords = "records"
	// ShapeObjects is a table object whose rows are records: {"columns": [...], "rows": [{...}]}.
	ShapeObjects = "table_objects"
	// ShapeLists is a table object whose rows are lists: {"columns": [...], "rows": [[...]]}.
	ShapeLists = "table_lists"
)

// Schema metadata keys.
const (
	// MetaShape holds the shape of the original JSON value.
	MetaShape = "noetl.shape"
	// MetaEnvelope holds, as JSON, the other keys of a table object.
	MetaEnvelope = "noetl.envelope"
	// MetaJSON marks a utf8 field whose values are JSON text.
	MetaJSON = "noetl.json"
)

// DefaultBatchRows is how many rows go into one record batch.
const DefaultBatchRows = 16384

// Table is a tabular view of a JSON value.
type Table struct {
	// Shape is one of ShapeRecords, ShapeObjects, ShapeLists.
	Shape string
	// Columns are the column names in order.
	Columns []string
	// Envelope holds the other keys of a table object (nil for records).
	Envelope map[string]any

	rows   []any
	schema *arrow.Schema
}

// Detect returns the tabular view of v, or false when v is not tabular (or has no rows).
func Detect(v any) (*Table, bool) {
	switch x := v.(type) {
	case []any:
		if len(x) == 0 {
			return nil, false
		}
		seen := map[string]bool{}
		for _, r := range x {
			m, ok := r.(map[string]any)
			if !ok {
				return nil, false
			}
			for k := range m {
				seen[k] = true
			}
		}
		cols := make([]string, 0, len(seen))
		for k := range seen {
			cols = append(cols, k)
		}
		sort.Strings(cols)
		return &Table{Shape: ShapeRecords, Columns: cols, rows: x}, true
	case map[string]any:
		rows, ok := x["rows"].([]any)
		if !ok || len(rows) == 0 {
			return nil, false
		}
		rawCols, ok := x["columns"].([]any)
		if !ok || len(rawCols) == 0 {
			return nil, false
		}
		cols := make([]string, len(rawCols))
		dup := map[string]bool{}
		for i, c := range rawCols {
			s, ok := c.(string)
			if !ok || dup[s] {
				return nil, false
			}
			dup[s] = true
			cols[i] = s
		}
		shape := ""
		for _, r := range rows {
			switch rv := r.(type) {
			case map[string]any:
				if shape == ShapeLists {
					return nil, false
				}
				shape = ShapeObjects
				for k := range rv {
					if !dup[k] {
						return nil, false
					}
				}
			case []any:
				if shape == ShapeObjects || len(rv) != len(cols) {
					return nil, false
				}
				shape = ShapeLists
			default:
				return nil, false
			}
		}
		env := make(map[string]any, len(x))
		for k, e := range x {
			if k != "rows" && k != "columns" {
				env[k] = e
			}
		}
		return &Table{Shape: shape, Columns: cols, Envelope: env, rows: rows}, true
	}
	return nil, false
}

// Rows is the number of rows.
func (t *Table) Rows() int { return len(t.rows) }

// cell returns the value of column c in row r (nil when missing).
func (t *Table) cell(r, c int) any {
	switch row := t.rows[r].(type) {
	case map[string]any:
		return row[t.Columns[c]]
	case []any:
		return row[c]
	}
	return nil
}

// kind classes of a column's values.
const (
	kNull = 1 << iota
	kBool
	kInt
	kFloat
	kString
	kOther
)

func kindOf(v any) int {
	switch x := v.(type) {
	case nil:
		return kNull
	case bool:
		return kBool
	case int, int32, int64:
		return kInt
	case float64:
		// -0 stays a float: as an integer it would come back as 0.
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 && !(x == 0 && math.Signbit(x)) {
			return kInt
		}
		return kFloat
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return kInt
		}
		if _, err := x.Float64(); err == nil {
			return kFloat
		}
		return kOther
	case string:
		return kString
	}
	return kOther
}

// Schema infers the Arrow schema of the table (cached).
func (t *Table) Schema() *arrow.Schema {
	if t.schema != nil {
		return t.schema
	}
	fields := make([]arrow.Field, len(t.Columns))
	for c, name := range t.Columns {
		kinds := 0
		for r := range t.rows {
			kinds |= kindOf(t.cell(r, c))
		}
		f := arrow.Field{Name: name, Nullable: true}
		switch kinds &^ kNull {
		case kBool:
			f.Type = arrow.FixedWidthTypes.Boolean
		case kInt:
			f.Type = arrow.PrimitiveTypes.Int64
		case kFloat, kInt | kFloat:
			f.Type = arrow.PrimitiveTypes.Float64
		case kString, 0:
			f.Type = arrow.BinaryTypes.String
		default:
			f.Type = arrow.BinaryTypes.String
			f.Metadata = arrow.NewMetadata([]string{MetaJSON}, []string{"true"})
		}
		fields[c] = f
	}
	keys, vals := []string{MetaShape}, []string{t.Shape}
	if t.Envelope != nil {
		env, _ := json.Marshal(t.Envelope)
		keys, vals = append(keys, MetaEnvelope), append(vals, string(env))
	}
	md := arrow.NewMetadata(keys, vals)
	t.schema = arrow.NewSchema(fields, &md)
	return t.schema
}

// Batches builds the table as record batches of at most batchRows rows (zero:
// DefaultBatchRows) and calls fn with each; fn must not keep the batch after returning.
func (t *Table) Batches(mem memory.Allocator, batchRows int, fn func(arrow.RecordBatch) error) error {
	if batchRows <= 0 {
		batchRows = DefaultBatchRows
	}
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	schema := t.Schema()
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	for start := 0; start < len(t.rows); start += batchRows {
		end := min(start+batchRows, len(t.rows))
		for c, f := range schema.Fields() {
			if err := t.appendColumn(b.Field(c), f, c, start, end); err != nil {
				return err
			}
		}
		rec := b.NewRecordBatch()
		err := fn(rec)
		rec.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

func (t *Table) appendColumn(fb array.Builder, f arrow.Field, c, start, end int) error {
	isJSON := f.Metadata.FindKey(MetaJSON) >= 0
	for r := start; r < end; r++ {
		v := t.cell(r, c)
		if v == nil {
			fb.AppendNull()
			continue
		}
		switch b := fb.(type) {
		case *array.BooleanBuilder:
			b.Append(v.(bool))
		case *array.Int64Builder:
			n, err := toInt64(v)
			if err != nil {
				return fmt.Errorf("column %s row %d: %w", f.Name, r, err)
			}
			b.Append(n)
		case *array.Float64Builder:
			n, err := toFloat64(v)
			if err != nil {
				return fmt.Errorf("column %s row %d: %w", f.Name, r, err)
			}
			b.Append(n)
		case *array.StringBuilder:
			if s, ok := v.(string); ok && !isJSON {
				b.Append(s)
				continue
			}
			j, err := json.Marshal(v)
			if err != nil {
				return fmt.Errorf("column %s row %d: %w", f.Name, r, err)
			}
			b.Append(string(j))
		default:
			return fmt.Errorf("column %s: unsupported builder %T", f.Name, fb)
		}
	}
	return nil
}

func toInt64(v any) (int64, error) {
	switch x := v.(type) {
	case int:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case float64:
		return int64(x), nil
	case json.Number:
		return x.Int64()
	}
	return 0, fmt.Errorf("%T is not an integer", v)
}

func toFloat64(v any) (float64, error) {
	switch x := v.(type) {
	case int:
		return float64(x), nil
	case int32:
		return float64(x), nil
	case int64:
		return float64(x), nil
	case float64:
		return x, nil
	case json.Number:
		return x.Float64()
	}
	return 0, fmt.Errorf("%T is not a number", v)
}

// SchemaJSON describes a schema as JSON text: [{"name": ..., "type": ...}].
func SchemaJSON(s *arrow.Schema) string {
	type col struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}
	cols := make([]col, 0, s.NumFields())
	for _, f := range s.Fields() {
		typ := f.Type.String()
		if f.Metadata.FindKey(MetaJSON) >= 0 {
			typ = "json"
		}
		cols = append(cols, col{Name: f.Name, Type: typ})
	}
	b, _ := json.Marshal(cols)
	return string(b)
}

// ErrNotTabular is returned when a stream's schema carries no NoETL shape.
var ErrNotTabular = errors.New("tabular: the Arrow stream has no noetl.shape metadata")
