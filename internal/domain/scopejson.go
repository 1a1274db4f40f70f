package domain

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// ScopeEncoder encodes the scopes of many commands of one step in one decision: what they
// share (execution, workload, ctx, the referenced steps' results and the variables) is
// encoded once, and each command adds only its iteration. A loop issuing a thousand
// iterations thus encodes its workload and results once, not a thousand times.
//
// Its output is byte for byte what json.Marshal gives for the same Scope (the fields in
// their declared order, omitempty kept), so a command's context_json does not depend on
// which of the two produced it. An encoder is used by one goroutine at a time (a decision).
type ScopeEncoder struct {
	head []byte // {"execution_id":…,"workload":…,"ctx":…[,"steps":…] without its closing brace
	tail []byte // [,"vars":…]}

	iterator string // the iterator whose encoded name key holds
	key      []byte
}

// NewScopeEncoder encodes the shared part of s; s.Iter and s.Iterator are ignored.
func NewScopeEncoder(s *Scope) (*ScopeEncoder, error) {
	head, err := json.Marshal(&Scope{ExecutionID: s.ExecutionID, Workload: s.Workload, Ctx: s.Ctx, Steps: s.Steps})
	if err != nil {
		return nil, err
	}
	tail := []byte{'}'}
	if len(s.Variables) > 0 {
		v, err := json.Marshal(s.Variables) // compacted and HTML-escaped, as within a Scope
		if err != nil {
			return nil, err
		}
		tail = append(append([]byte(`,"vars":`), v...), '}')
	}
	return &ScopeEncoder{head: head[:len(head)-1], tail: tail}, nil
}

// Encode returns the scope's JSON with the iteration scope iter bound under iterator (both
// omitted when empty, as in Scope).
func (e *ScopeEncoder) Encode(iter map[string]any, iterator string) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(len(e.head) + len(e.tail) + 64)
	b.Write(e.head)
	if len(iter) > 0 {
		v, err := json.Marshal(iter)
		if err != nil {
			return nil, err
		}
		b.WriteString(`,"iter":`)
		b.Write(v)
	}
	if iterator != "" {
		v, err := json.Marshal(iterator)
		if err != nil {
			return nil, err
		}
		b.WriteString(`,"iterator":`)
		b.Write(v)
	}
	b.Write(e.tail)
	return b.Bytes(), nil
}

// EncodeIteration is Encode of a loop iteration's usual scope, {iterator: item, "_index":
// index, "_total": total}, without building and sorting a map: the keys are written in
// json.Marshal's order (bytewise), so the bytes are the same.
func (e *ScopeEncoder) EncodeIteration(iterator string, item json.RawMessage, index int32, total int) ([]byte, error) {
	if iterator == "" || iterator == "_index" || iterator == "_total" {
		return e.Encode(map[string]any{iterator: item, "_index": index, "_total": total}, iterator)
	}
	if len(item) == 0 {
		item = json.RawMessage("null") // as json.Marshal writes a nil RawMessage
	}
	if e.key == nil || e.iterator != iterator {
		key, err := json.Marshal(iterator)
		if err != nil {
			return nil, err
		}
		e.iterator, e.key = iterator, key
	}
	key := e.key
	var b bytes.Buffer
	b.Grow(len(e.head) + len(e.tail) + 2*len(key) + len(item) + 64)
	b.Write(e.head)
	b.WriteString(`,"iter":{`)
	var err error
	writeIter := func() {
		b.Write(key)
		b.WriteByte(':')
		// json.Marshal compacts a RawMessage and escapes <, >, &, U+2028 and U+2029 in
		// it; without those, compacting alone gives the same bytes.
		if !bytes.ContainsAny(item, "<>&\u2028\u2029") {
			err = json.Compact(&b, item)
			return
		}
		var v []byte
		if v, err = json.Marshal(item); err == nil {
			b.Write(v)
		}
	}
	if iterator < "_index" {
		writeIter()
		b.WriteByte(',')
	}
	b.WriteString(`"_index":`)
	b.WriteString(strconv.FormatInt(int64(index), 10))
	if iterator > "_index" && iterator < "_total" {
		b.WriteByte(',')
		writeIter()
	}
	b.WriteString(`,"_total":`)
	b.WriteString(strconv.Itoa(total))
	if iterator > "_total" {
		b.WriteByte(',')
		writeIter()
	}
	if err != nil {
		return nil, err
	}
	b.WriteString(`},"iterator":`)
	b.Write(key)
	b.Write(e.tail)
	return b.Bytes(), nil
}
