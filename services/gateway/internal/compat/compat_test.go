package compat

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
)

// fake records the start request and fails with err when set.
type fake struct {
	Backend // unimplemented methods panic
	err     error
	start   *apiv1.StartExecutionRequest
}

func (f *fake) StartExecution(_ context.Context, req *apiv1.StartExecutionRequest) (*apiv1.StartExecutionResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	f.start = req
	return &apiv1.StartExecutionResponse{ExecutionId: "e1", Version: 4}, nil
}

func (f *fake) GetExecution(context.Context, *apiv1.GetExecutionRequest) (*apiv1.GetExecutionResponse, error) {
	return nil, f.err
}

func serve(t *testing.T, b Backend, method, path, body string, limit int64) (int, map[string]any) {
	t.Helper()
	h := New(b, nil)
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	rec := httptest.NewRecorder()
	if limit > 0 {
		req.Body = http.MaxBytesReader(rec, req.Body, limit)
	}
	h.ServeHTTP(rec, req)
	var out map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	return rec.Code, out
}

func TestExecuteAcceptsNoETLRequestShapes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		body, path string
		version    int64
		workload   string
	}{
		{`{"path": "a/b", "payload": {"x": 1}}`, "a/b", 0, `{"x":1}`},
		{`{"catalog_id": "a/b@3", "args": {"x": 2}}`, "a/b", 3, `{"x":2}`},
		{`{"catalog_id": "a/b@3", "version": "5", "parameters": {}}`, "a/b", 5, `{}`},
		{`{"path": "a/b", "version": 2, "workload": {"y": [1]}}`, "a/b", 2, `{"y":[1]}`},
		{`{"path": "a/b", "version": "latest", "payload": null}`, "a/b", 0, ``},
		{`{"path": "a/b", "labels": {"team": "data"}}`, "a/b", 0, ``},
		{`{"path": "a/b", "metadata": {"team": "data"}}`, "a/b", 0, ``},
		{`{"path": "a/b", "metadata": {"team": "ops", "env": "prod"}, "labels": {"team": "data"}}`, "a/b", 0, ``},
	}
	for _, tc := range cases {
		f := &fake{}
		code, out := serve(t, f, http.MethodPost, "/api/execute", tc.body, 0)
		require.Equal(t, http.StatusOK, code, tc.body)
		require.Equal(t, map[string]any{"execution_id": "e1", "status": "RUNNING", "path": tc.path, "version": "4", "catalog_id": tc.path + "@4"}, out)
		require.Equal(t, tc.path, f.start.GetPath())
		require.Equal(t, tc.version, f.start.GetVersion(), tc.body)
		switch {
		case strings.Contains(tc.body, "env"):
			require.Equal(t, map[string]string{"team": "data", "env": "prod"}, f.start.GetLabels(), "labels win a key metadata gives too")
		case strings.Contains(tc.body, "labels"), strings.Contains(tc.body, "metadata"):
			require.Equal(t, map[string]string{"team": "data"}, f.start.GetLabels(), tc.body)
		default:
			require.Empty(t, f.start.GetLabels(), tc.body)
		}
		if tc.workload == "" {
			require.Nil(t, f.start.GetWorkload())
		} else {
			got, err := json.Marshal(f.start.GetWorkload().AsMap())
			require.NoError(t, err)
			require.JSONEq(t, tc.workload, string(got))
		}
	}
	for body, field := range map[string]string{
		`{"payload": {}}`:                          "path:",
		`{"path": "a", "payload": {}, "args": {}}`: "args:",
		`{"path": "a", "payload": [1]}`:            "payload:",
		`{"path": "a", "version": "two"}`:          "version:",
		`{"catalog_id": "a@x"}`:                    "catalog_id:",
		`{"path": 7}`:                              "path:",
		`{"path": "a", "labels": {"n": 1}}`:        "labels:",
		`{"path": "a", "metadata": ["x"]}`:         "metadata:",
		`{"path": "a", "payload": {"x": 1}`:        "body:",
		``:                                         "body:",
	} {
		code, out := serve(t, &fake{}, http.MethodPost, "/api/execute", body, 0)
		require.Equal(t, http.StatusBadRequest, code, body)
		require.Equal(t, "INVALID_ARGUMENT", out["code"], body)
		require.True(t, strings.HasPrefix(out["error"].(string), field), "%s: %v", body, out["error"])
	}
}

func TestErrorsMapToHTTPStatusesAndMaskTheUnexpected(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		code int
		name string
		msg  string
	}{
		{status.Error(codes.NotFound, "execution x not found"), 404, "NOT_FOUND", "execution x not found"},
		{status.Error(codes.FailedPrecondition, "already done"), 409, "FAILED_PRECONDITION", "already done"},
		{status.Error(codes.ResourceExhausted, "busy"), 429, "RESOURCE_EXHAUSTED", "busy"},
		{status.Error(codes.Unauthenticated, "who"), 401, "UNAUTHENTICATED", "who"},
		{status.Error(codes.PermissionDenied, "no"), 403, "PERMISSION_DENIED", "no"},
		{status.Error(codes.Internal, "pq: password=hunter2"), 500, "INTERNAL", "internal error"},
		{status.Error(codes.Unavailable, "dial 10.0.0.7"), 500, "INTERNAL", "internal error"},
		{errors.New("boom at /etc/secret"), 500, "INTERNAL", "internal error"},
	}
	for _, tc := range cases {
		code, out := serve(t, &fake{err: tc.err}, http.MethodGet, "/api/executions/x/status", "", 0)
		require.Equal(t, tc.code, code, tc.err.Error())
		require.Equal(t, map[string]any{"error": tc.msg, "code": tc.name}, out)
	}
	code, out := serve(t, &fake{}, http.MethodPost, "/api/execute", `{"path": "a", "payload": {"x": "`+strings.Repeat("y", 100)+`"}}`, 64)
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
	require.Contains(t, out["error"], "64 bytes")
	code, out = serve(t, &fake{}, http.MethodGet, "/api/nothing/here", "", 0)
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, "NOT_FOUND", out["code"])
}

func TestPlaybookContentDecodesBase64YAMLOnly(t *testing.T) {
	t.Parallel()
	yaml := "apiVersion: noetl.io/v2\nkind: Playbook\n"
	b64 := base64.StdEncoding.EncodeToString([]byte(yaml))
	require.Equal(t, yaml, playbookContent(yaml))
	require.Equal(t, yaml, playbookContent(b64))
	require.Equal(t, yaml, playbookContent(b64[:20]+"\n"+b64[20:]), "wrapped base64")
	require.Equal(t, yaml, playbookContent(base64.RawStdEncoding.EncodeToString([]byte(yaml))))
	notPlaybook := base64.StdEncoding.EncodeToString([]byte("kind: Playbook"))
	require.Equal(t, notPlaybook, playbookContent(notPlaybook), "base64 of something else is left for the parser to reject")
	require.Equal(t, "", playbookContent(""))
	require.Equal(t, "abcd", playbookContent("abcd"))
}
