package mesh_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/platform/auth"
)

// lines returns the log lines decoded, those that are JSON objects.
func (l *lockedBuffer) lines() []map[string]any {
	var out []map[string]any
	for line := range strings.SplitSeq(l.String(), "\n") {
		m := map[string]any{}
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

func startEdgeMesh(t *testing.T) (*mesh.Mesh, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	m := startAuthMesh(t, mesh.Config{Log: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	return m, logs
}

// edgeWritten is what a refused request could have written: the executions in Postgres and
// the messages NOETL_EVENTS ever took.
func edgeWritten(t *testing.T, m *mesh.Mesh) (executions int, events uint64) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, m.PostgresURL)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM noetl.execution`).Scan(&executions))
	nc, err := nats.Connect(m.NATSURL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	s, err := js.Stream(ctx, "NOETL_EVENTS")
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	return executions, info.State.LastSeq
}

// edgeReason is the reason of an error's NoETL ErrorInfo.
func edgeReason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// edgeRESTDetail is the first detail of a REST error body with the given type.
func edgeRESTDetail(body map[string]any, typ string) map[string]any {
	ds, _ := body["details"].([]any)
	for _, d := range ds {
		if m, _ := d.(map[string]any); m["@type"] == "type.googleapis.com/"+typ {
			return m
		}
	}
	return nil
}

// edgeRaw sends a REST request with a raw path and body and returns the status, the decoded
// body and the headers.
func edgeRaw(t *testing.T, m *mesh.Mesh, key, method, path string, body []byte) (int, map[string]any, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+m.HTTPAddr+path, bytes.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := map[string]any{}
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, resp.Header
}

// requireNoInternals fails when a message names the mesh's internals.
func requireNoInternals(t *testing.T, msg string) {
	t.Helper()
	for _, s := range []string{"noetl.events", "noetl.committed", "NOETL_", "nats", "publish", "256 KiB", "262144"} {
		require.NotContains(t, msg, s)
	}
}

// Issue 12, item 5: a 5 MB start answered InvalidArgument naming an internal NATS subject
// and the 256 KiB publish limit, past a gRPC receive cap of 8 MiB. Now every oversized
// request is RESOURCE_EXHAUSTED naming the public limit (HTTP 413), before anything is
// published: the gRPC receive cap is the REST body cap (2 MiB), and a workload that fits
// it but not the engine is refused against the public workload limit (192 KiB), the
// request's at the gateway and the playbook's merged with it at the orchestrator.
func TestOversizedRequestsAreRefusedBeforeAnythingIsPublished(t *testing.T) {
	m, logs := startEdgeMesh(t)
	c := newClient(t, m, m.AdminKey)
	ctx := context.Background()
	_, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: sized, path: tests/sized}
workload: {blob: ""}
workflow:
  - step: start
    tool: {kind: noop, result: {n: "{{ workload.blob | length }}"}}
`})
	require.NoError(t, err)
	_, err = c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: heavy, path: tests/heavy}\nworkload: {base: " +
		strings.Repeat("y", 150<<10) + "}\nworkflow:\n  - step: start\n    tool: {kind: noop}\n"})
	require.NoError(t, err)
	executions, events := edgeWritten(t, m)

	blob := func(n int) *structpb.Struct {
		s, err := structpb.NewStruct(map[string]any{"blob": strings.Repeat("x", n)})
		require.NoError(t, err)
		return s
	}
	t.Run("a 5 MB gRPC start is refused by the transport at the body cap", func(t *testing.T) {
		_, err := c.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "tests/sized", Workload: blob(5_000_000)})
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), "2097152", "names the limit")
		requireNoInternals(t, status.Convert(err).Message())
	})
	t.Run("a 5 MB REST start is refused before it is read", func(t *testing.T) {
		body, err := json.Marshal(map[string]any{"path": "tests/sized", "workload": map[string]any{"blob": strings.Repeat("x", 5_000_000)}})
		require.NoError(t, err)
		code, out, _ := edgeRaw(t, m, m.AdminKey, http.MethodPost, "/v1/executions", body)
		require.Equal(t, http.StatusRequestEntityTooLarge, code, "%v", out)
		require.Equal(t, float64(codes.ResourceExhausted), out["code"])
		require.Equal(t, "BODY_TOO_LARGE", edgeRESTDetail(out, "google.rpc.ErrorInfo")["reason"])
		require.Contains(t, out["message"], "exceeds the limit of 2097152 bytes")
	})
	t.Run("a 1 MB workload fits the body cap but not the public workload limit", func(t *testing.T) {
		w, err := json.Marshal(map[string]any{"blob": strings.Repeat("x", 1<<20)})
		require.NoError(t, err)
		want := fmt.Sprintf("workload: %d bytes exceeds the limit of 196608 bytes", len(w))
		_, err = c.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "tests/sized", Workload: blob(1 << 20)})
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
		require.Equal(t, want, status.Convert(err).Message())
		require.Equal(t, "WORKLOAD_TOO_LARGE", edgeReason(err))
		for _, route := range []string{"/v1/executions", "/api/execute"} {
			code, out, _ := c.rest(http.MethodPost, route, map[string]any{"path": "tests/sized", "workload": map[string]any{"blob": strings.Repeat("x", 1<<20)}})
			require.Equal(t, http.StatusRequestEntityTooLarge, code, "%s: %v", route, out)
			msg := fmt.Sprint(out["message"], out["error"])
			require.Contains(t, msg, want, route)
			requireNoInternals(t, msg)
		}
	})
	t.Run("the playbook's workload merged with a small request's is held to the same limit", func(t *testing.T) {
		_, err := c.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "tests/heavy", Workload: blob(60 << 10)})
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
		require.Equal(t, "WORKLOAD_TOO_LARGE", edgeReason(err))
		require.Regexp(t, `^workload: \d+ bytes \(the playbook's workload merged with the request's, as JSON\) exceeds the limit of 196608 bytes$`, status.Convert(err).Message())
		requireNoInternals(t, status.Convert(err).Message())
		code, out, _ := c.rest(http.MethodPost, "/v1/executions", map[string]any{"path": "tests/heavy", "workload": map[string]any{"blob": strings.Repeat("x", 60<<10)}})
		require.Equal(t, http.StatusRequestEntityTooLarge, code, "%v", out)
	})
	t.Run("a playbook over the content limit is refused naming it", func(t *testing.T) {
		_, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: strings.Repeat("#", 1<<20+1)})
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
		require.Equal(t, "content: 1048577 bytes exceeds the limit of 1048576 bytes", status.Convert(err).Message())
		require.Equal(t, "CONTENT_TOO_LARGE", edgeReason(err))
	})

	gotExecutions, gotEvents := edgeWritten(t, m)
	require.Equal(t, executions, gotExecutions, "no refused start created an execution")
	require.Equal(t, events, gotEvents, "no refused start published an event")
	for _, l := range logs.lines() {
		require.NotEqual(t, "internal error", l["msg"], "no refusal was an internal error: %v", l)
	}

	// Within the limit, a workload runs: the limit is what the engine carries.
	started, err := c.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "tests/sized", Workload: blob(180 << 10)})
	require.NoError(t, err)
	done, err := c.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: started.GetExecutionId(), Timeout: durationpb.New(60 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, done.GetExecution().GetStatus(), "%v", done.GetExecution().GetError())
	require.Equal(t, float64(180<<10), done.GetExecution().GetResult().GetStructValue().GetFields()["n"].GetNumberValue())
}

// Issue 12, item 8: 900 wrong API keys from one address were all answered 401, none
// refused. Now failed authentication is throttled per client address (and per key id):
// past the burst (20 by default) attempts are refused with 429 and Retry-After before any
// key is checked, a valid one included, and every failure is an audit line with the
// address, the key id and the method, never the key.
func TestFailedAuthenticationIsThrottled(t *testing.T) {
	m, logs := startEdgeMesh(t)
	admin := newClient(t, m, m.AdminKey)
	ctx := context.Background()

	// An authorization failure is audited with the caller's key id and tenant.
	viewerKey, viewerID := admin.createKey(map[string]any{"roles": []string{"viewer"}})
	viewer := newClient(t, m, viewerKey)
	viewer.wantREST(http.StatusForbidden, http.MethodGet, "/v1/apikeys", nil)

	const attempts, burst = 900, 20
	keys := make([]string, attempts)
	for i := range keys {
		k, _, _, err := auth.NewAPIKey()
		require.NoError(t, err)
		keys[i] = k
	}
	client := &http.Client{}
	began := time.Now()
	var unauthorized, throttled int
	for i, key := range keys {
		req, err := http.NewRequest(http.MethodGet, "http://"+m.HTTPAddr+"/v1/playbooks", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.NotContains(t, string(raw), key[len(key)-20:], "the key is never echoed")
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			unauthorized++
		case http.StatusTooManyRequests:
			throttled++
			require.Regexp(t, `^[1-9][0-9]*$`, resp.Header.Get("Retry-After"))
			var out map[string]any
			require.NoError(t, json.Unmarshal(raw, &out))
			require.Equal(t, "TOO_MANY_AUTH_FAILURES", edgeRESTDetail(out, "google.rpc.ErrorInfo")["reason"], "%s", raw)
			require.Contains(t, out["message"], "too many failed attempts for address 127.0.0.1")
		default:
			require.Failf(t, "unexpected status", "attempt %d: %d %s", i, resp.StatusCode, raw)
		}
		if i < burst {
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "attempt %d is within the burst", i)
		}
	}
	// The bucket refills 10 a minute: at most one more failure per 6 s the flood took.
	allowed := burst + 1 + int(time.Since(began)/(6*time.Second))
	require.LessOrEqual(t, unauthorized, allowed)
	require.Equal(t, attempts, unauthorized+throttled)
	require.Greater(t, throttled, attempts/2)

	// From the throttled address, a valid key is refused too, on every transport, until the
	// bucket refills.
	code, out, hdr := admin.rest(http.MethodGet, "/v1/playbooks", nil)
	require.Equal(t, http.StatusTooManyRequests, code, "%v", out)
	require.NotEmpty(t, hdr.Get("Retry-After"))
	code, _, hdr = admin.rest(http.MethodGet, "/api/executions/01930000-0000-7000-8000-000000000000", nil)
	require.Equal(t, http.StatusTooManyRequests, code)
	require.NotEmpty(t, hdr.Get("Retry-After"))
	_, err := admin.cat.ListPlaybooks(ctx, &apiv1.ListPlaybooksRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	require.Equal(t, "TOO_MANY_AUTH_FAILURES", edgeReason(err))
	anon := newClient(t, m, "")
	_, err = anon.cat.ListPlaybooks(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+keys[0]), &apiv1.ListPlaybooksRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "gRPC callers from the address are throttled too")

	// The audit trail: every failure and refusal, with the address, the key id and the
	// method; no key anywhere in the logs.
	var failed, refused, denied int
	ids := map[string]bool{}
	for _, l := range logs.lines() {
		if l["audit"] != true {
			continue
		}
		require.Equal(t, "WARN", l["level"])
		require.Equal(t, "127.0.0.1", l["address"], "%v", l)
		require.NotEmpty(t, l["method"], "%v", l)
		switch l["outcome"] {
		case "unauthenticated":
			failed++
			ids[fmt.Sprint(l["key_id"])] = true
		case "throttled":
			refused++
		case "denied":
			denied++
			require.Equal(t, viewerID, l["key_id"])
			require.Equal(t, "default", l["tenant"])
			require.Equal(t, "/noetl.api.v1.AdminService/ListApiKeys", l["method"])
		}
	}
	require.Equal(t, unauthorized, failed)
	require.GreaterOrEqual(t, refused, throttled+3)
	require.Equal(t, 1, denied)
	for _, key := range keys[:burst] {
		id, _, ok := auth.ParseAPIKey(key)
		require.True(t, ok)
		require.True(t, ids[id], "the key id of each failed attempt is logged")
	}
	all := logs.String()
	for _, key := range append(keys, m.AdminKey, viewerKey) {
		require.NotContains(t, all, key[len(key)-20:], "no secret in the logs")
	}
}

// Issue 12, item 9: GET /v1/results/%00 answered 500 (the NUL reached Postgres). Now every
// id a request names is checked at the gateway (400 / InvalidArgument naming the field)
// before anything is looked up.
func TestIDsAreValidatedAtTheEdge(t *testing.T) {
	m, logs := startEdgeMesh(t)
	c := newClient(t, m, m.AdminKey)
	ctx := context.Background()

	for _, tc := range []struct{ method, path, body, field string }{
		{http.MethodGet, "/v1/results/%00", "", "result_id"},
		{http.MethodGet, "/v1/results/%2500", "", "result_id"},
		{http.MethodGet, "/v1/results/%00/flight", "", "result_id"},
		{http.MethodGet, "/v1/executions/%00", "", "execution_id"},
		{http.MethodGet, "/v1/executions/not-an-id", "", "execution_id"},
		{http.MethodGet, "/v1/executions/%00:wait", "", "execution_id"},
		{http.MethodGet, "/v1/executions/%00/events", "", "execution_id"},
		{http.MethodGet, "/v1/executions/%00/events:watch", "", "execution_id"},
		{http.MethodPost, "/v1/executions/%00:cancel", "{}", "execution_id"},
		{http.MethodGet, "/v1/executions?path=a%00b", "", "path"},
		{http.MethodGet, "/v1/playbooks/a%00b", "", "path"},
		{http.MethodPost, "/v1/executions", `{"path": "a\u0000b"}`, "path"},
		{http.MethodPost, "/v1/executions", `{"path": "tests/x", "idempotencyKey": "k\u0000"}`, "idempotency_key"},
		{http.MethodPost, "/v1/apikeys/%00:revoke", "{}", "id"},
		{http.MethodPost, "/v1/apikeys", `{"roles": ["viewer"], "name": "n\u0000"}`, "name"},
		{http.MethodDelete, "/v1/credentials/%00", "", "name"},
	} {
		code, out, _ := edgeRaw(t, m, m.AdminKey, tc.method, tc.path, []byte(tc.body))
		require.Equal(t, http.StatusBadRequest, code, "%s %s: %v", tc.method, tc.path, out)
		msg := fmt.Sprint(out["message"])
		require.True(t, strings.HasPrefix(msg, tc.field+": "), "%s %s: %q names the field", tc.method, tc.path, msg)
		require.NotContains(t, msg, "correlation id")
		violations, _ := edgeRESTDetail(out, "google.rpc.BadRequest")["fieldViolations"].([]any)
		require.Len(t, violations, 1, "%s %s: %v", tc.method, tc.path, out)
		require.Equal(t, tc.field, violations[0].(map[string]any)["field"])
	}
	for _, path := range []string{"/api/executions/%00", "/api/executions/%00/status"} {
		code, out, _ := edgeRaw(t, m, m.AdminKey, http.MethodGet, path, nil)
		require.Equal(t, http.StatusBadRequest, code, "%s: %v", path, out)
		require.True(t, strings.HasPrefix(fmt.Sprint(out["error"]), "execution_id: "), "%v", out)
	}

	res := apiv1.NewResultServiceClient(c.conn)
	for name, call := range map[string]func() error{
		"result_id": func() error {
			_, err := res.GetResult(ctx, &apiv1.GetResultRequest{ResultId: "\x00"})
			return err
		},
		"execution_id": func() error {
			_, err := c.exe.GetExecution(ctx, &apiv1.GetExecutionRequest{ExecutionId: "x'; drop table noetl.event; --"})
			return err
		},
		"path": func() error {
			_, err := c.cat.GetPlaybook(ctx, &apiv1.GetPlaybookRequest{Path: "../../etc/passwd"})
			return err
		},
		"id": func() error {
			_, err := c.admin.RevokeApiKey(ctx, &apiv1.RevokeApiKeyRequest{Id: strings.Repeat("k", 5000)})
			return err
		},
		"reason": func() error {
			_, err := c.exe.CancelExecution(ctx, &apiv1.CancelExecutionRequest{ExecutionId: "01930000-0000-7000-8000-000000000000", Reason: "\x00"})
			return err
		},
	} {
		err := call()
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", name, err)
		require.True(t, strings.HasPrefix(status.Convert(err).Message(), name+": "), "%s: %v", name, err)
	}

	// A well-formed id that names nothing is still NotFound, and nothing above was an
	// internal error.
	c.wantREST(http.StatusNotFound, http.MethodGet, "/v1/executions/01930000-0000-7000-8000-000000000000", nil)
	c.wantREST(http.StatusNotFound, http.MethodGet, "/v1/results/c0000000000000000000000000", nil)
	for _, l := range logs.lines() {
		require.NotEqual(t, "internal error", l["msg"], "%v", l)
		require.NotEqual(t, "error naming internals masked", l["msg"], "%v", l)
	}
}
