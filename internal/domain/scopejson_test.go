package domain

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestScopeEncoderMatchesMarshal: the shared-prefix encoder gives json.Marshal's bytes for
// scopes with and without steps, iteration, iterator and variables, HTML-sensitive text
// included.
func TestScopeEncoderMatchesMarshal(t *testing.T) {
	steps := map[string]StepResult{
		"b": {Status: "completed", Result: json.RawMessage(`{"x": 1, "s": "<a&b>"}`)},
		"a": {Ref: &RefView{URI: "noetl://r/1", Size: 3, ContentType: "application/json", SHA256: "ab"}},
	}
	scopes := []*Scope{
		{ExecutionID: "e1"},
		{ExecutionID: "e1", Workload: map[string]any{"n": json.Number("3"), "html": "<script>"}, Ctx: map[string]any{"k": []any{"v", 2.5}}},
		{ExecutionID: "e1", Steps: steps, Iter: map[string]any{"i": json.RawMessage(`{"id": 7}`), "_index": int32(0), "_total": 3}, Iterator: "i"},
		{ExecutionID: "e1", Steps: map[string]StepResult{}, Iter: map[string]any{}, Variables: json.RawMessage(`{"v": "<&>"}`)},
		{ExecutionID: "e\"2", Workload: map[string]any{}, Iterator: "it<", Variables: json.RawMessage(`{"a":1}`), Iter: map[string]any{"it<": nil}},
	}
	for i, s := range scopes {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := NewScopeEncoder(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := enc.Encode(s.Iter, s.Iterator)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("scope %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

// TestScopeEncoderIterationMatchesMarshal: the map-free iteration encoding gives the bytes of
// the general one for iterator names sorting before, between and after _index and _total,
// the reserved names themselves, and items needing compaction or HTML escaping.
func TestScopeEncoderIterationMatchesMarshal(t *testing.T) {
	enc, err := NewScopeEncoder(&Scope{ExecutionID: "e", Workload: map[string]any{"n": 1}, Variables: json.RawMessage(`{"v":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	items := []json.RawMessage{json.RawMessage(`{"b": 1, "a": "<x>"}`), json.RawMessage(`7`), nil, json.RawMessage(`"s\u0026"`), json.RawMessage("[\"a\u2028b\", 1]"), json.RawMessage(`{"k": "a&b"}`), json.RawMessage(` [ 1 , 2 ] `)}
	for _, iterator := range []string{"item", "Item", "_a", "_index", "_j", "_total", "_z", "0", "x\"y"} {
		for _, item := range items {
			want, err := enc.Encode(map[string]any{iterator: item, "_index": int32(3), "_total": 12}, iterator)
			if err != nil {
				t.Fatal(err)
			}
			got, err := enc.EncodeIteration(iterator, item, 3, 12)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("iterator %q item %s:\n got %s\nwant %s", iterator, item, got, want)
			}
		}
	}
	if _, err := enc.EncodeIteration("i", json.RawMessage(`{bad`), 0, 1); err == nil {
		t.Error("an item that is not JSON was encoded")
	}
}
