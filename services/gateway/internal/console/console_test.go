package console

import (
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
)

// catalog answers GetPlaybook from a map of contents by path.
type catalog struct {
	apiv1.CatalogServiceClient
	content map[string]string
}

func (c catalog) GetPlaybook(_ context.Context, req *apiv1.GetPlaybookRequest, _ ...grpc.CallOption) (*apiv1.GetPlaybookResponse, error) {
	s, ok := c.content[req.GetPath()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "playbook %s: not found", req.GetPath())
	}
	return &apiv1.GetPlaybookResponse{Playbook: &apiv1.Playbook{Path: req.GetPath(), Version: max(req.GetVersion(), 1), Content: s}}, nil
}

func newTestConsole() *Console {
	return New(Config{
		Catalog: catalog{content: map[string]string{
			"tests/g":   "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: g, path: tests/g}\nworkflow:\n  - step: start\n    tool: {kind: noop}\n    next: [end]\n  - step: end\n    tool: {kind: noop}\n",
			"tests/bad": "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: bad}\nworkflow:\n  - step: nostart\n",
		}},
		Error: func(w http.ResponseWriter, _ *http.Request, err error) {
			st := status.Convert(err)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(map[codes.Code]int{codes.InvalidArgument: 400, codes.NotFound: 404, codes.FailedPrecondition: 400}[st.Code()])
			_ = json.NewEncoder(w).Encode(map[string]any{"code": st.Code(), "message": st.Message()})
		},
	})
}

func get(t *testing.T, h http.Handler, target string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestConsoleServesItsAssetsWithAStrictPolicy(t *testing.T) {
	t.Parallel()
	c := newTestConsole()
	for _, tc := range []struct{ path, ctype string }{
		{"/ui/", "text/html"},
		{"/ui/index.html", "text/html"},
		{"/ui/app.css", "text/css"},
		{"/ui/js/app.js", "text/javascript"},
		{"/ui/favicon.svg", "image/svg+xml"},
	} {
		w := get(t, c, tc.path)
		require.Equal(t, http.StatusOK, w.Code, tc.path)
		require.Contains(t, w.Header().Get("Content-Type"), tc.ctype, tc.path)
		require.Equal(t, CSP, w.Header().Get("Content-Security-Policy"), tc.path)
		require.Equal(t, "nosniff", w.Header().Get("X-Content-Type-Options"))
		require.Equal(t, "DENY", w.Header().Get("X-Frame-Options"))
		require.Equal(t, "no-referrer", w.Header().Get("Referrer-Policy"))
		etag := w.Header().Get("ETag")
		require.NotEmpty(t, etag)
		require.Equal(t, http.StatusNotModified, get(t, c, tc.path, "If-None-Match", etag).Code, tc.path)
	}
	for _, p := range []string{"/ui/nope.js", "/ui/../go.mod", "/ui/js/"} {
		require.Equal(t, http.StatusNotFound, get(t, c, p).Code, p)
	}
	r := httptest.NewRequest(http.MethodPost, "/ui/", nil)
	w := httptest.NewRecorder()
	c.ServeHTTP(w, r)
	require.Equal(t, http.StatusMethodNotAllowed, w.Code)
}

// The policy forbids inline script and style: no page may carry any, nor an event handler
// attribute, nor build HTML from strings.
func TestAssetsHaveNoInlineScriptOrHTMLStrings(t *testing.T) {
	t.Parallel()
	ui, err := fs.Sub(assets, "ui")
	require.NoError(t, err)
	inline := regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]|\son[a-z]+=|<style|style=`)
	sinks := regexp.MustCompile(`\.innerHTML|\.outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function`)
	n := 0
	require.NoError(t, fs.WalkDir(ui, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(ui, p)
		if err != nil {
			return err
		}
		switch {
		case strings.HasSuffix(p, ".html"):
			require.NotRegexp(t, inline, string(b), p)
		case strings.HasSuffix(p, ".js"):
			n++
			require.NotRegexp(t, sinks, string(b), p)
		}
		return nil
	}))
	require.Greater(t, n, 5)
}

func TestGraphRoute(t *testing.T) {
	t.Parallel()
	c := newTestConsole()
	w := get(t, c, GraphRoute+"?path=tests/g&version=2")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, CSP, w.Header().Get("Content-Security-Policy"))
	require.Equal(t, "no-store", w.Header().Get("Cache-Control"))
	var g Graph
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &g))
	require.Equal(t, "tests/g", g.Path)
	require.EqualValues(t, 2, g.Version)
	require.Len(t, g.Nodes, 2)
	require.Len(t, g.Edges, 1)
	// A second read of the same content comes from the cache, with its own version.
	w = get(t, c, GraphRoute+"?path=tests/g&version=5")
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &g))
	require.EqualValues(t, 5, g.Version)

	for _, tc := range []struct {
		query string
		code  int
		msg   string
	}{
		{"", 400, "path: required"},
		{"?path=tests/g&version=x", 400, "version: must be a non-negative integer"},
		{"?path=tests/none", 404, "playbook tests/none: not found"},
		{"?path=tests/bad", 400, "playbook tests/bad version 1: "},
	} {
		w := get(t, c, GraphRoute+tc.query)
		require.Equal(t, tc.code, w.Code, tc.query)
		var body struct{ Message string }
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
		require.Contains(t, body.Message, tc.msg, tc.query)
	}
}
