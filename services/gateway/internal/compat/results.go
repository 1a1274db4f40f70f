package compat

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
)

// resolveResult handles GET /api/result/resolve?ref=<noetl://results/...>: the stored
// payload itself as the JSON body (for a table, the page {columns, rows, offset,
// total_rows}). The result must be the caller's tenant's (another tenant's is not found),
// and the answer is bounded as GET /v1/results/{id} is (8 MiB; larger results are read a
// part at a time with pointer, or over Flight). pointer (RFC 6901), offset and limit are
// passed on as that route takes them.
func (h *handler) resolveResult(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ref := strings.TrimSpace(q.Get("ref"))
	if ref == "" {
		h.writeError(w, r, status.Error(codes.InvalidArgument, "ref: required (a result reference such as noetl://results/...)"))
		return
	}
	req := &apiv1.GetResultRequest{ResultId: ref, Pointer: q.Get("pointer")}
	for _, f := range []struct {
		name string
		set  func(int64)
	}{{"offset", func(n int64) { req.Offset = n }}, {"limit", func(n int64) { req.Limit = int32(n) }}} {
		v := q.Get(f.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 {
			h.writeError(w, r, status.Errorf(codes.InvalidArgument, "%s: must be a non-negative integer", f.name))
			return
		}
		f.set(n)
	}
	resp, err := h.b.GetResult(r.Context(), req)
	if err != nil {
		// The public API calls the parameter result_id; here it is ref.
		st := status.Convert(err)
		if msg, ok := strings.CutPrefix(st.Message(), "result_id: "); ok {
			err = status.Error(st.Code(), "ref: "+msg)
		}
		h.writeError(w, r, err)
		return
	}
	body := json.RawMessage("null")
	if v := resp.GetValue(); v != nil {
		b, err := protojson.Marshal(v)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		body = b
	}
	writeJSON(w, http.StatusOK, body)
}
