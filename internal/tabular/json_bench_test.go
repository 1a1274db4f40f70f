package tabular

import (
	"io"
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
