package mesh_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
)

// restRaw sends a REST request and returns the status, the raw body and the headers.
func (c *client) restRaw(method, path string, body any) (int, []byte, http.Header) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(c.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+c.m.HTTPAddr+path, rd)
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp.StatusCode, raw, resp.Header
}

// rows is GET path answered with a JSON list.
func (c *client) rows(path string) ([]map[string]any, http.Header) {
	c.t.Helper()
	code, raw, hdr := c.restRaw(http.MethodGet, path, nil)
	require.Equal(c.t, http.StatusOK, code, "GET %s: %s", path, raw)
	var out []map[string]any
	require.NoError(c.t, json.Unmarshal(raw, &out), string(raw))
	return out, hdr
}

func idsOf(rs []map[string]any) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r["execution_id"].(string))
	}
	return out
}

// wantField requires a 400 whose error names field first.
func wantField(t *testing.T, out map[string]any, field string) {
	t.Helper()
	require.Equal(t, "INVALID_ARGUMENT", out["code"], "%v", out)
	msg, _ := out["error"].(string)
	require.True(t, strings.HasPrefix(msg, field+":"), "error should name %s: %v", field, out)
}

const compatTwo = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: two, path: compat/two, description: second of two}
workflow:
  - step: start
    tool: {kind: noop, result: {v: VERSION}}
`

// TestCompatCatalogRoutes checks POST /api/catalog/list and /api/catalog/resource: NoETL's
// entry shape, the latest version of each playbook by default, every version of one path,
// one version's content and payload by path, catalog_id and "latest", errors naming the
// field, and another tenant seeing none of it.
func TestCompatCatalogRoutes(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	def := newClient(t, m, m.AdminKey)
	acmeKey, _ := def.createKey(map[string]any{"tenant": "acme", "roles": []string{"admin"}})
	acme := newClient(t, m, acmeKey)
	ctx := context.Background()
	for _, doc := range []string{quick, strings.Replace(compatTwo, "VERSION", "1", 1), strings.Replace(compatTwo, "VERSION", "2", 1)} {
		_, err := def.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: doc})
		require.NoError(t, err)
	}

	list := def.wantREST(http.StatusOK, http.MethodPost, "/api/catalog/list", map[string]any{"resource_type": "Playbook", "include_archived": false})
	entries, _ := list["entries"].([]any)
	require.Len(t, entries, 2, "%v", list)
	two := entries[0].(map[string]any) // ordered by path
	require.Equal(t, "compat/two", two["path"])
	require.Equal(t, "2", two["version"])
	require.Equal(t, "compat/two@2", two["catalog_id"])
	require.Equal(t, "Playbook", two["kind"])
	require.Contains(t, two, "content")
	require.Nil(t, two["content"], "lists carry no content")
	require.Contains(t, two, "layout")
	require.Equal(t, map[string]any{"name": "two", "description": "second of two"}, two["meta"])
	require.NotEmpty(t, two["created_at"])
	require.Equal(t, "tests/quick", entries[1].(map[string]any)["path"])

	// No body lists too; path lists every version, newest first; another kind lists none.
	code, raw, _ := def.restRaw(http.MethodPost, "/api/catalog/list", nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	versions := def.wantREST(http.StatusOK, http.MethodPost, "/api/catalog/list", map[string]any{"path": "/compat/two"})["entries"].([]any)
	require.Len(t, versions, 2)
	require.Equal(t, "2", versions[0].(map[string]any)["version"])
	require.Equal(t, "1", versions[1].(map[string]any)["version"])
	require.Empty(t, def.wantREST(http.StatusOK, http.MethodPost, "/api/catalog/list", map[string]any{"resource_type": "Credential"})["entries"])
	wantField(t, def.wantREST(http.StatusBadRequest, http.MethodPost, "/api/catalog/list", map[string]any{"include_archived": "no"}), "include_archived")

	// One entry: the latest by path, a version by catalog_id, "latest" explicitly.
	latest := def.wantREST(http.StatusOK, http.MethodPost, "/api/catalog/resource", map[string]any{"path": "compat/two"})
	require.Equal(t, "2", latest["version"])
	require.Contains(t, latest["content"], "result: {v: 2}")
	payload, _ := latest["payload"].(map[string]any)
	require.Equal(t, "noetl.io/v2", payload["apiVersion"], "payload is the document as JSON: %v", latest)
	first := def.wantREST(http.StatusOK, http.MethodPost, "/api/catalog/resource", map[string]any{"catalog_id": "compat/two@1"})
	require.Equal(t, "1", first["version"])
	require.Contains(t, first["content"], "result: {v: 1}")
	require.Equal(t, "1", def.wantREST(http.StatusOK, http.MethodPost, "/api/catalog/resource", map[string]any{"path": "compat/two", "version": 1})["version"])
	require.Equal(t, "1", def.wantREST(http.StatusOK, http.MethodPost, "/api/catalog/resource", map[string]any{"catalog_id": "compat/two@1", "version": "latest"})["version"],
		`"latest" is no version: the catalog_id's stays`)

	def.wantREST(http.StatusNotFound, http.MethodPost, "/api/catalog/resource", map[string]any{"path": "compat/two", "version": "9"})
	def.wantREST(http.StatusNotFound, http.MethodPost, "/api/catalog/resource", map[string]any{"path": "compat/none"})
	wantField(t, def.wantREST(http.StatusBadRequest, http.MethodPost, "/api/catalog/resource", map[string]any{}), "path")
	wantField(t, def.wantREST(http.StatusBadRequest, http.MethodPost, "/api/catalog/resource", map[string]any{"path": "compat/two", "version": "two"}), "version")
	wantField(t, def.wantREST(http.StatusBadRequest, http.MethodPost, "/api/catalog/resource", map[string]any{"catalog_id": "compat/two@x"}), "catalog_id")
	wantField(t, def.wantREST(http.StatusBadRequest, http.MethodPost, "/api/catalog/resource", map[string]any{"path": "../etc"}), "path")

	// Another tenant: an empty catalog, and not found.
	require.Empty(t, acme.wantREST(http.StatusOK, http.MethodPost, "/api/catalog/list", map[string]any{})["entries"])
	acme.wantREST(http.StatusNotFound, http.MethodPost, "/api/catalog/resource", map[string]any{"path": "compat/two"})
	// Unauthenticated: refused.
	anon := newClient(t, m, "")
	anon.wantREST(http.StatusUnauthorized, http.MethodPost, "/api/catalog/list", map[string]any{})
}

// TestCompatExecutionListAndBatch checks GET /api/executions (NoETL's rows, filters by
// status, path, catalog_id and start time, limit and offset paging and the page token) and
// POST /api/execute/batch (per-item results, one bad item failing alone, duplicates by
// idempotency key, the bound on items, tenant scoping).
func TestCompatExecutionListAndBatch(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	def := newClient(t, m, m.AdminKey)
	acmeKey, _ := def.createKey(map[string]any{"tenant": "acme", "roles": []string{"admin"}})
	acme := newClient(t, m, acmeKey)
	ctx := context.Background()
	for _, doc := range []string{quick, strings.Replace(compatTwo, "VERSION", "1", 1), strings.Replace(compatTwo, "VERSION", "2", 1)} {
		_, err := def.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: doc})
		require.NoError(t, err)
	}
	before := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)

	batch := def.wantREST(http.StatusOK, http.MethodPost, "/api/execute/batch", map[string]any{"executions": []any{
		map[string]any{"path": "tests/quick"},
		map[string]any{"payload": map[string]any{}}, // no path
		map[string]any{"path": "compat/none"},       // no such playbook
		map[string]any{"catalog_id": "compat/two@1", "dedup": map[string]any{"key": "k1"}},
		map[string]any{"path": "compat/two", "version": "1", "idempotency_key": "k1"}, // the same key again
		map[string]any{"path": "/compat/two", "payload": map[string]any{"x": 1}},
		"not an object",
	}})
	require.EqualValues(t, 7, batch["count"], "%v", batch)
	require.EqualValues(t, 3, batch["started"], "%v", batch)
	require.EqualValues(t, 1, batch["duplicates"], "%v", batch)
	require.EqualValues(t, 3, batch["failed"], "%v", batch)
	results := batch["results"].([]any)
	item := func(i int) map[string]any { return results[i].(map[string]any) }
	for i, want := range []string{"started", "error", "error", "started", "duplicate", "started", "error"} {
		require.EqualValues(t, i, item(i)["index"])
		require.Equal(t, want, item(i)["status"], "item %d: %v", i, item(i))
	}
	require.True(t, strings.HasPrefix(item(1)["error"].(string), "executions[1].path:"), "%v", item(1))
	require.Equal(t, "INVALID_ARGUMENT", item(1)["code"])
	require.Equal(t, "NOT_FOUND", item(2)["code"], "%v", item(2))
	require.True(t, strings.HasPrefix(item(6)["error"].(string), "executions[6]:"), "%v", item(6))
	require.Equal(t, item(3)["execution_id"], item(4)["execution_id"], "a duplicate names the first's execution")
	require.Equal(t, "compat/two@1", item(3)["catalog_id"])
	require.Equal(t, "compat/two@2", item(5)["catalog_id"])
	// The key again in a later call: a duplicate of the same execution, which starts nothing.
	again := def.wantREST(http.StatusOK, http.MethodPost, "/api/execute/batch", map[string]any{"executions": []any{
		map[string]any{"path": "compat/two", "version": 1, "idempotency_key": "k1"},
	}})
	require.EqualValues(t, 1, again["duplicates"], "%v", again)
	require.EqualValues(t, 0, again["started"], "%v", again)
	require.Equal(t, item(3)["execution_id"], again["results"].([]any)[0].(map[string]any)["execution_id"])
	var ids []string
	for _, i := range []int{0, 3, 5} {
		id := item(i)["execution_id"].(string)
		ids = append(ids, id)
		waitDone(t, def, id)
	}

	// Over the bound, refused whole; an empty body or no list, refused naming the field.
	many := make([]any, 1001)
	for i := range many {
		many[i] = map[string]any{"path": "tests/quick"}
	}
	wantField(t, def.wantREST(http.StatusBadRequest, http.MethodPost, "/api/execute/batch", map[string]any{"executions": many}), "executions")
	wantField(t, def.wantREST(http.StatusBadRequest, http.MethodPost, "/api/execute/batch", map[string]any{}), "executions")
	wantField(t, def.wantREST(http.StatusBadRequest, http.MethodPost, "/api/execute/batch", map[string]any{"executions": "x"}), "executions")

	// Another tenant's batch does not find this tenant's playbooks.
	other := acme.wantREST(http.StatusOK, http.MethodPost, "/api/execute/batch", map[string]any{"executions": []any{map[string]any{"path": "tests/quick"}}})
	require.EqualValues(t, 1, other["failed"])
	require.Equal(t, "NOT_FOUND", other["results"].([]any)[0].(map[string]any)["code"])

	// The list: every one, newest first (by start time; a batch starts its items at once,
	// in no set order), in NoETL's row shape.
	all, _ := def.rows("/api/executions")
	require.Len(t, all, 3)
	require.ElementsMatch(t, ids, idsOf(all))
	for i := 1; i < len(all); i++ {
		prev, err := time.Parse(time.RFC3339Nano, all[i-1]["started_at"].(string))
		require.NoError(t, err)
		cur, err := time.Parse(time.RFC3339Nano, all[i]["started_at"].(string))
		require.NoError(t, err)
		require.False(t, cur.After(prev), "newest first")
	}
	order := idsOf(all)
	// of lists the ids of the set, in the list's order.
	of := func(set ...string) []string {
		var out []string
		for _, id := range order {
			for _, s := range set {
				if s == id {
					out = append(out, id)
				}
			}
		}
		return out
	}
	for _, row := range all {
		if row["execution_id"] != ids[2] {
			continue
		}
		require.Equal(t, "compat/two", row["path"])
		require.Equal(t, "2", row["version"])
		require.Equal(t, "compat/two@2", row["catalog_id"])
		require.Equal(t, "COMPLETED", row["status"])
		require.NotEmpty(t, row["started_at"])
		require.NotEmpty(t, row["completed_at"])
		require.Greater(t, row["event_count"].(float64), float64(3))
	}
	for query, want := range map[string][]string{
		"?path=compat/two":                           of(ids[1], ids[2]),
		"?path=/compat/two&status=completed":         of(ids[1], ids[2]),
		"?catalog_id=compat/two@1":                   {ids[1]},
		"?status=RUNNING":                            nil,
		"?status=EXECUTION_STATUS_COMPLETED&limit=1": order[:1],
		"?limit=1&offset=1":                          order[1:2],
		"?offset=2":                                  order[2:],
		"?started_after=" + url.QueryEscape(before):  order,
		"?started_before=" + url.QueryEscape(before): nil,
	} {
		got, _ := def.rows("/api/executions" + query)
		require.Equal(t, want, idsOf(got), query)
	}
	// The page token: limit without offset hands the next page's token in a header.
	page1, hdr := def.rows("/api/executions?limit=2")
	require.Equal(t, order[:2], idsOf(page1))
	token := hdr.Get("X-Next-Page-Token")
	require.NotEmpty(t, token)
	page2, hdr := def.rows("/api/executions?limit=2&page_token=" + url.QueryEscape(token))
	require.Equal(t, order[2:], idsOf(page2))
	require.Empty(t, hdr.Get("X-Next-Page-Token"))

	for query, field := range map[string]string{
		"?status=DONE":           "status",
		"?limit=-1":              "limit",
		"?limit=501":             "limit",
		"?offset=x":              "offset",
		"?offset=10001":          "offset",
		"?started_after=today":   "started_after",
		"?started_before=1":      "started_before",
		"?catalog_id=compat@two": "catalog_id",
		"?path=..":               "path",
	} {
		wantField(t, def.wantREST(http.StatusBadRequest, http.MethodGet, "/api/executions"+query, nil), field)
	}
	none, _ := acme.rows("/api/executions")
	require.Empty(t, none, "another tenant lists none of them")
}

// TestCompatResultResolve checks GET /api/result/resolve: a result held by reference comes
// back as its payload, only to its tenant, and a bad or missing ref is refused naming ref.
func TestCompatResultResolve(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	def := newClient(t, m, m.AdminKey)
	acmeKey, _ := def.createKey(map[string]any{"tenant": "acme", "roles": []string{"admin"}})
	acme := newClient(t, m, acmeKey)
	ctx := context.Background()
	reg, err := def.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: big, path: compat/big}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        result = {"blob": "x" * 100000, "n": 7}
`})
	require.NoError(t, err)
	started, err := def.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath()})
	require.NoError(t, err)
	x := waitDone(t, def, started.GetExecutionId())
	uri := x.GetSteps()["start"].GetResultRef().GetUri()
	require.True(t, strings.HasPrefix(uri, "noetl://"), "the result is held by reference: %v", x.GetSteps()["start"])

	code, raw, _ := def.restRaw(http.MethodGet, "/api/result/resolve?ref="+url.QueryEscape(uri), nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	var payload map[string]any
	require.NoError(t, json.Unmarshal(raw, &payload))
	require.Len(t, payload["blob"], 100000)
	require.EqualValues(t, 7, payload["n"])
	code, raw, _ = def.restRaw(http.MethodGet, "/api/result/resolve?pointer=/n&ref="+url.QueryEscape(uri), nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	require.Equal(t, "7", strings.TrimSpace(string(raw)))

	acme.wantREST(http.StatusNotFound, http.MethodGet, "/api/result/resolve?ref="+url.QueryEscape(uri), nil)
	wantField(t, def.wantREST(http.StatusBadRequest, http.MethodGet, "/api/result/resolve", nil), "ref")
	wantField(t, def.wantREST(http.StatusBadRequest, http.MethodGet, "/api/result/resolve?ref="+url.QueryEscape("noetl://results/a b"), nil), "ref")
	wantField(t, def.wantREST(http.StatusBadRequest, http.MethodGet, "/api/result/resolve?ref=x&limit=-2", nil), "limit")
	def.wantREST(http.StatusNotFound, http.MethodGet, "/api/result/resolve?ref="+url.QueryEscape(fmt.Sprintf("noetl://results/default/%s/nothing", started.GetExecutionId())), nil)
}
