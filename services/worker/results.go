package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	"github.com/noetl/noetl/internal/domain"
)

// maxExtractedBytes bounds the extracted summary carried by a ResultRef.
const maxExtractedBytes = 4 << 10

// putChunk is the size of one chunk streamed to the resultstore.
const putChunk = 256 << 10

// offload stores a result too large to travel inline and returns its reference. The
// result id is the command id, so a re-run of the command overwrites the same entry.
func (w *Worker) offload(ctx context.Context, cmd *eventv1.Command, result any, body []byte) (*eventv1.ResultRef, error) {
	extracted := extract(result, cmd.GetOutputSelect())
	stream, err := w.results.PutResult(ctx)
	if err != nil {
		return nil, err
	}
	header := &rsv1.PutResultHeader{
		Tenant: cmd.GetTenant(), ExecutionId: cmd.GetExecutionId(), Step: cmd.GetStep(),
		ResultId: cmd.GetCommandId(), ContentType: "application/json", ExtractedJson: extracted,
	}
	first := true
	for off := 0; off < len(body) || first; off += putChunk {
		end := min(off+putChunk, len(body))
		req := &rsv1.PutResultRequest{Chunk: body[off:end]}
		if first {
			req.Header = header
			first = false
		}
		if err := stream.Send(req); err != nil {
			return nil, err
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, err
	}
	return resp.GetRef(), nil
}

// extract builds the bounded summary of a result: the output_select fields when the step
// names them, else a structural summary (scalars kept, long strings, arrays and deep
// objects summarised), at most maxExtractedBytes.
func extract(v any, selectFields []string) []byte {
	m, isMap := v.(map[string]any)
	out := map[string]any{}
	if isMap && len(selectFields) > 0 {
		for _, f := range selectFields {
			if x, ok := m[f]; ok {
				out[f] = summarise(x, 2)
			}
		}
	} else if isMap {
		for k, x := range m {
			out[k] = summarise(x, 2)
		}
	} else {
		out["_summary"] = summarise(v, 1)
	}
	b, _ := json.Marshal(out)
	if len(b) <= maxExtractedBytes {
		return b
	}
	// Too big: keep keys in name order while they fit.
	keys := make([]string, 0, len(out))
	for k := range out {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	kept := map[string]any{}
	for _, k := range keys {
		kept[k] = out[k]
		if b, _ := json.Marshal(kept); len(b) > maxExtractedBytes {
			delete(kept, k)
		}
	}
	b, _ = json.Marshal(kept)
	return b
}

// summarise keeps small values and replaces large ones by a marker saying what they were.
func summarise(v any, depth int) any {
	switch x := v.(type) {
	case string:
		if len(x) <= 256 {
			return x
		}
		return map[string]any{"_summary": "string", "length": len(x)}
	case []any:
		if b, _ := json.Marshal(x); len(b) <= 256 {
			return x
		}
		return map[string]any{"_summary": "array", "length": len(x)}
	case map[string]any:
		if b, _ := json.Marshal(x); len(b) <= 256 {
			return x
		}
		if depth <= 0 {
			return map[string]any{"_summary": "object", "keys": len(x)}
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = summarise(e, depth-1)
		}
		return out
	default:
		return v
	}
}

// fetch reads a stored result and decodes it.
func (w *Worker) fetch(ctx context.Context, tenant, uri string) ([]byte, error) {
	stream, err := w.results.GetResult(ctx, &rsv1.GetResultRequest{Tenant: tenant, Uri: uri})
	if err != nil {
		return nil, err
	}
	var data []byte
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return data, nil
		}
		if err != nil {
			return nil, err
		}
		data = append(data, m.GetChunk()...)
	}
}

var pathPattern = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*`)

// resolveRefs replaces, in the scope, each referenced result whose summary cannot answer
// the paths the command's templates read with the full stored payload. Paths into the
// summary (`{{ s.count }}`) and the reference itself (`{{ s._ref }}`) need no fetch.
func (w *Worker) resolveRefs(ctx context.Context, cmd *eventv1.Command, scope *domain.Scope) error {
	var texts []string
	collect := func(b []byte) {
		if len(b) > 0 {
			texts = append(texts, string(b))
		}
	}
	collect(cmd.GetInputJson())
	for _, t := range cmd.GetTools() {
		var cfg map[string]any
		if json.Unmarshal(t.GetConfigJson(), &cfg) == nil {
			delete(cfg, "code")
			b, _ := json.Marshal(cfg)
			collect(b)
		}
	}
	for name, r := range scope.Steps {
		if r.Ref == nil || !needsPayload(name, r.Ref.Extracted, texts) {
			continue
		}
		body, err := w.fetch(ctx, cmd.GetTenant(), r.Ref.URI)
		if err != nil {
			return fmt.Errorf("step %s: load result of %s (%s): %w", cmd.GetStep(), name, r.Ref.URI, err)
		}
		scope.Steps[name] = domain.StepResult{Status: r.Status, Result: body}
	}
	return nil
}

// needsPayload reports whether a template path into step name goes beyond its summary.
func needsPayload(name string, extracted []byte, texts []string) bool {
	var summary map[string]any
	_ = json.Unmarshal(extracted, &summary)
	for _, text := range texts {
		for _, block := range templateBlocks(text) {
			for _, p := range pathPattern.FindAllString(block, -1) {
				segs := strings.Split(p, ".")
				if segs[0] != name {
					continue
				}
				segs = segs[1:]
				if len(segs) > 0 && segs[0] == "data" {
					if _, own := summary["data"]; !own {
						segs = segs[1:]
					}
				}
				if len(segs) == 0 {
					return true // the whole value
				}
				if strings.HasPrefix(segs[0], "_") {
					continue
				}
				v, ok := summary[segs[0]]
				if !ok {
					return true
				}
				if m, ok := v.(map[string]any); ok && m["_summary"] != nil {
					return true
				}
			}
		}
	}
	return false
}

// templateBlocks returns the bodies of {{ }} and {% %} blocks in a text.
func templateBlocks(s string) []string {
	var out []string
	for {
		i := strings.Index(s, "{{")
		j := strings.Index(s, "{%")
		if i < 0 || (j >= 0 && j < i) {
			i = j
		}
		if i < 0 {
			return out
		}
		end := strings.Index(s[i+2:], "}}")
		if e2 := strings.Index(s[i+2:], "%}"); end < 0 || (e2 >= 0 && e2 < end) {
			end = e2
		}
		if end < 0 {
			return append(out, s[i+2:])
		}
		out = append(out, s[i+2:i+2+end])
		s = s[i+2+end+2:]
	}
}
