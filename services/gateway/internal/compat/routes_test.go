package compat

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// pages serves ListExecutions two executions a page, whatever the page size, and records
// the SetExecutionVariables request.
type pages struct {
	Backend
	all []*apiv1.Execution
	set *apiv1.SetExecutionVariablesRequest
}

func (p *pages) ListExecutions(_ context.Context, req *apiv1.ListExecutionsRequest) (*apiv1.ListExecutionsResponse, error) {
	from := 0
	if req.GetPageToken() != "" {
		from, _ = strconv.Atoi(req.GetPageToken())
	}
	to := min(from+2, len(p.all))
	out := &apiv1.ListExecutionsResponse{Executions: p.all[from:to]}
	if to < len(p.all) {
		out.NextPageToken = strconv.Itoa(to)
	}
	return out, nil
}

func (p *pages) SetExecutionVariables(_ context.Context, req *apiv1.SetExecutionVariablesRequest) (*apiv1.SetExecutionVariablesResponse, error) {
	p.set = req
	return &apiv1.SetExecutionVariablesResponse{VariablesSet: int32(len(req.GetVariables()))}, nil
}

func serveRaw(b Backend, method, path, body string) (int, string, http.Header) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	rec := httptest.NewRecorder()
	New(b, nil).ServeHTTP(rec, req)
	return rec.Code, rec.Body.String(), rec.Header()
}

// TestListExecutionsSkipsAndFiltersAcrossPages checks the offset and catalog_id version
// filter, which read the public API's pages past the first.
func TestListExecutionsSkipsAndFiltersAcrossPages(t *testing.T) {
	t.Parallel()
	p := &pages{}
	for i := range 7 {
		p.all = append(p.all, &apiv1.Execution{ExecutionId: "x" + strconv.Itoa(i), Path: "a/b", Version: int64(1 + i%2), Status: eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, LastSeq: 9})
	}
	ids := func(query string) []string {
		code, body, hdr := serveRaw(p, http.MethodGet, "/api/executions"+query, "")
		require.Equal(t, http.StatusOK, code, body)
		var rows []executionRow
		require.NoError(t, json.Unmarshal([]byte(body), &rows))
		var out []string
		for _, r := range rows {
			require.Equal(t, "COMPLETED", r.Status)
			require.EqualValues(t, 9, r.EventCount)
			out = append(out, r.ExecutionID)
		}
		if strings.Contains(query, "offset") || strings.Contains(query, "@") {
			require.Empty(t, hdr.Get(nextPageHeader), "no token where the answer does not end on a page")
		}
		return out
	}
	require.Equal(t, []string{"x0", "x1"}, ids("?limit=2"))
	require.Equal(t, []string{"x3", "x4", "x5"}, ids("?limit=3&offset=3"))
	require.Equal(t, []string{"x1", "x3", "x5"}, ids("?catalog_id=a/b@2"))
	require.Equal(t, []string{"x4", "x6"}, ids("?catalog_id=a/b@1&offset=2"))
	require.Nil(t, ids("?offset=7"))
	code, _, hdr := serveRaw(p, http.MethodGet, "/api/executions?limit=2&page_token=2", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "4", hdr.Get(nextPageHeader))
}

// TestSetVarsReadsNoETLBodies checks the request shapes of POST /api/vars: NoETL's list of
// {var_name, var_value}, an object of values, and one named variable.
func TestSetVarsReadsNoETLBodies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path, body, typ, source string
		want                    map[string]any
	}{
		{"/api/vars/e", `{"variables": [{"var_name": "a", "var_value": 1, "var_type": "computed", "source_step": "s"}, {"var_name": "b", "var_value": [true]}]}`, "computed", "s", map[string]any{"a": 1.0, "b": []any{true}}},
		{"/api/vars/e", `{"variables": {"a": "x", "n": null}, "var_type": "step_result"}`, "step_result", "", map[string]any{"a": "x", "n": nil}},
		{"/api/vars/e/one", `{"var_value": {"k": 2}}`, "", "", map[string]any{"one": map[string]any{"k": 2.0}}},
		{"/api/vars/e/one", `{"value": 3}`, "", "", map[string]any{"one": 3.0}},
	} {
		p := &pages{}
		code, body, _ := serveRaw(p, http.MethodPost, tc.path, tc.body)
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, "e", p.set.GetExecutionId())
		require.Equal(t, tc.typ, p.set.GetType(), tc.body)
		require.Equal(t, tc.source, p.set.GetSourceStep(), tc.body)
		got := map[string]any{}
		for k, v := range p.set.GetVariables() {
			got[k] = v.AsInterface()
		}
		require.Equal(t, tc.want, got, tc.body)
	}
	for body, field := range map[string]string{
		`{"variables": [{"var_name": "a", "var_value": 1}, {"var_name": "a", "var_value": 2}]}`:                                         "variables[1].var_name",
		`{"variables": [{"var_name": "a", "var_value": 1, "source_step": "s"}, {"var_name": "b", "var_value": 2, "source_step": "t"}]}`: "variables[1].source_step",
		`{"variables": 3}`:    "variables",
		`{"variables": null}`: "variables",
		`[]`:                  "body",
	} {
		code, out := serve(t, &pages{}, http.MethodPost, "/api/vars/e", body, 0)
		require.Equal(t, http.StatusBadRequest, code, body)
		require.True(t, strings.HasPrefix(out["error"].(string), field+":"), "%s: %v", body, out)
	}
	code, out := serve(t, &pages{}, http.MethodPost, "/api/vars/e/one", `{}`, 0)
	require.Equal(t, http.StatusBadRequest, code)
	require.True(t, strings.HasPrefix(out["error"].(string), "var_value:"), "%v", out)
}
