package tabular

import (
	"encoding/json"
	"io"
	"strconv"
	"testing"
)

// BenchmarkWriteJSONSmall is a typical step result, a few fields inline.
func BenchmarkWriteJSONSmall(b *testing.B) {
	v := map[string]any{"status": "ok", "count": int64(3), "step": "fetch_page", "done": true, "items": []any{"a", "b", "c"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := WriteJSON(io.Discard, v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteJSONRows is a larger result: 1,000 records of four fields.
func BenchmarkWriteJSONRows(b *testing.B) {
	rows := make([]any, 1000)
	for i := range rows {
		rows[i] = map[string]any{"id": int64(i), "name": "row name", "score": 0.5, "tag": "x<y"}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := WriteJSON(io.Discard, rows); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteJSONNumbers is a decoded result as the worker holds it: 1,000 records whose
// numbers are json.Number (domain.DecodeJSON).
func BenchmarkWriteJSONNumbers(b *testing.B) {
	rows := make([]any, 1000)
	for i := range rows {
		rows[i] = map[string]any{"id": json.Number(strconv.Itoa(i)), "price": json.Number("12.50"), "qty": json.Number("-3e2")}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := WriteJSON(io.Discard, rows); err != nil {
			b.Fatal(err)
		}
	}
}
