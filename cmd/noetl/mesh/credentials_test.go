package mesh_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/testkit"
)

// call sends a JSON request to the gateway's REST listener and returns the status and the
// raw body.
func (h *harness) call(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string: // sent as is
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, "http://"+h.m.HTTPAddr+path, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.m.AdminKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

// callJSON is call decoding the body into a map, requiring the status want.
func (h *harness) callJSON(t *testing.T, want int, method, path string, body any) map[string]any {
	t.Helper()
	code, raw := h.call(t, method, path, body)
	require.Equal(t, want, code, "%s %s: %s", method, path, raw)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	return out
}

func TestCredentialsAreEncryptedAtRestAndNeverReturned(t *testing.T) {
	h := start(t, false)
	ctx := context.Background()
	const secret = "s3cr3t-hunter2-value"

	put := h.callJSON(t, http.StatusOK, http.MethodPost, "/v1/credentials", map[string]any{
		"name": "pg_local", "type": "postgres", "data": map[string]any{"user": "noetl", "password": secret, "port": 5432},
	})
	require.Equal(t, "pg_local", put["credential"].(map[string]any)["name"])
	require.NotContains(t, fmt.Sprint(put), secret)

	// Listing shows names, types and times, never data: over REST and gRPC.
	code, raw := h.call(t, http.MethodGet, "/v1/credentials", nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	require.NotContains(t, string(raw), secret)
	require.NotContains(t, string(raw), "noetl", "no data field leaks into the list")
	conn, err := h.m.Dial()
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	creds := apiv1.NewCredentialServiceClient(conn)
	list, err := creds.ListCredentials(ctx, &apiv1.ListCredentialsRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetCredentials(), 1)
	c := list.GetCredentials()[0]
	require.Equal(t, "pg_local", c.GetName())
	require.Equal(t, "postgres", c.GetType())
	require.NotNil(t, c.GetUpdateTime())

	// At rest: no plaintext column, and no byte of the row holds the secret.
	db, err := pgx.Connect(ctx, h.m.PostgresURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	var sealed []byte
	var plain *string
	var row string
	require.NoError(t, db.QueryRow(ctx, `SELECT c.ciphertext, c.data::text, c::text FROM noetl.credential c WHERE name = 'pg_local'`).Scan(&sealed, &plain, &row))
	require.Nil(t, plain)
	require.NotEmpty(t, sealed)
	require.False(t, bytes.Contains(sealed, []byte(secret)))
	require.NotContains(t, row, secret)
	require.NotContains(t, row, fmt.Sprintf("%x", secret))

	// A worker resolves it through the orchestrator's internal service.
	oc, err := h.m.DialInternal(h.m.OrchestratorAddr, "worker")
	require.NoError(t, err)
	t.Cleanup(func() { _ = oc.Close() })
	internal := orchv1.NewCredentialServiceClient(oc)
	res, err := internal.ResolveCredential(ctx, &orchv1.ResolveCredentialRequest{Tenant: "default", Name: "pg_local", ExecutionId: "test"})
	require.NoError(t, err)
	require.Equal(t, "postgres", res.GetType())
	require.JSONEq(t, `{"user": "noetl", "password": "`+secret+`", "port": 5432}`, string(res.GetDataJson()))
	// The ciphertext is bound to its row: moved under another name it does not open.
	_, err = db.Exec(ctx, `INSERT INTO noetl.credential (tenant, name, type, ciphertext) VALUES ('default', 'copied', 'postgres', $1)`, sealed)
	require.NoError(t, err)
	_, err = internal.ResolveCredential(ctx, &orchv1.ResolveCredentialRequest{Tenant: "default", Name: "copied"})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.NotContains(t, err.Error(), secret)

	// Names are validated at the gateway, naming the field.
	for _, bad := range []string{"", "has space", "a/b", strings.Repeat("x", 129)} {
		body := h.callJSON(t, http.StatusBadRequest, http.MethodPost, "/v1/credentials", map[string]any{"name": bad, "type": "t", "data": map[string]any{"k": secret}})
		require.Contains(t, body["message"], "name:", bad)
		require.NotContains(t, fmt.Sprint(body), secret)
		_, err := creds.PutCredential(ctx, &apiv1.PutCredentialRequest{Name: bad})
		require.Equal(t, codes.InvalidArgument, status.Code(err))
	}
	body := h.callJSON(t, http.StatusBadRequest, http.MethodPost, "/v1/credentials", map[string]any{"name": "nodata", "type": "t"})
	require.Contains(t, body["message"], "data:")
	// A malformed body is refused without quoting it (decoders quote the offending token).
	for _, path := range []string{"/v1/credentials", "/api/credentials"} {
		code, raw := h.call(t, http.MethodPost, path, `{"name": "x", "data": {"password": `+secret+`}}`)
		require.Equal(t, http.StatusBadRequest, code, path)
		require.NotContains(t, string(raw), secret, path)
		code, raw = h.call(t, http.MethodPost, path, `{"name": "x", "data": "`+secret+`"}`)
		require.Equal(t, http.StatusBadRequest, code, path)
		require.NotContains(t, string(raw), secret, path)
	}

	// Replacing keeps one row; deleting removes it.
	h.callJSON(t, http.StatusOK, http.MethodPost, "/v1/credentials", map[string]any{"name": "pg_local", "type": "postgres", "data": map[string]any{"password": "rotated"}})
	res, err = internal.ResolveCredential(ctx, &orchv1.ResolveCredentialRequest{Name: "pg_local"})
	require.NoError(t, err)
	require.JSONEq(t, `{"password": "rotated"}`, string(res.GetDataJson()))
	h.callJSON(t, http.StatusOK, http.MethodDelete, "/v1/credentials/pg_local", nil)
	h.callJSON(t, http.StatusNotFound, http.MethodDelete, "/v1/credentials/pg_local", nil)
	_, err = internal.ResolveCredential(ctx, &orchv1.ResolveCredentialRequest{Name: "pg_local"})
	require.Equal(t, codes.NotFound, status.Code(err))

	// The NoETL route stores one the same way.
	got := h.callJSON(t, http.StatusOK, http.MethodPost, "/api/credentials", map[string]any{"name": "api_key", "type": "http_bearer", "data": map[string]any{"token": secret}, "description": "bearer token"})
	require.Equal(t, "api_key", got["name"])
	require.Equal(t, "http_bearer", got["type"])
	require.Equal(t, "created", got["status"])
	require.NotContains(t, fmt.Sprint(got), secret)
	res, err = internal.ResolveCredential(ctx, &orchv1.ResolveCredentialRequest{Name: "api_key"})
	require.NoError(t, err)
	require.JSONEq(t, `{"token": "`+secret+`"}`, string(res.GetDataJson()))
	bad := h.callJSON(t, http.StatusBadRequest, http.MethodPost, "/api/credentials", map[string]any{"name": "x", "data": secret})
	require.Equal(t, "INVALID_ARGUMENT", bad["code"])
	require.Contains(t, bad["error"], "data")
	require.NotContains(t, fmt.Sprint(bad), secret)
}

const compatPlaybook = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: compat, path: tests/compat}
workload: {greeting: hello, who: nobody}
workflow:
  - step: start
    tool:
      kind: python
      input: {who: "{{ workload.who }}"}
      code: |
        result = {"who": who}
    next: [{step: end}]
  - step: end
    tool:
      kind: noop
      result: {message: "{{ workload.greeting }} {{ start.who }}"}
`

const sleepyPlaybook = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: sleepy, path: tests/sleepy}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        import time
        time.sleep(60)
        result = {}
`

func TestNoETLCompatibleRoutes(t *testing.T) {
	h := start(t, false)

	// Register: NoETL clients send base64 YAML; plain text works too.
	reg := h.callJSON(t, http.StatusOK, http.MethodPost, "/api/catalog/register", map[string]any{
		"content": base64.StdEncoding.EncodeToString([]byte(compatPlaybook)), "resource_type": "Playbook",
	})
	require.Equal(t, "success", reg["status"])
	require.Equal(t, "tests/compat", reg["path"])
	require.Equal(t, "1", reg["version"])
	require.Equal(t, "tests/compat@1", reg["catalog_id"])
	require.NotEmpty(t, reg["message"])
	again := h.callJSON(t, http.StatusOK, http.MethodPost, "/api/catalog/register", map[string]any{"content": compatPlaybook})
	require.Equal(t, "1", again["version"], "identical content keeps its version")

	bad := h.callJSON(t, http.StatusBadRequest, http.MethodPost, "/api/catalog/register", map[string]any{"content": "apiVersion: noetl.io/v2\nkind: Playbook\nworkflow: [\n  - step: start\n"})
	require.Equal(t, "INVALID_ARGUMENT", bad["code"])
	require.Contains(t, bad["error"], "line")
	code, raw := h.call(t, http.MethodPost, "/api/catalog/register", nil)
	require.Equal(t, http.StatusBadRequest, code, string(raw))

	// Execute by catalog id, with the payload merged over the workload.
	ex := h.callJSON(t, http.StatusOK, http.MethodPost, "/api/execute", map[string]any{"catalog_id": reg["catalog_id"], "payload": map[string]any{"who": "world"}})
	id, _ := ex["execution_id"].(string)
	require.NotEmpty(t, id)
	require.Equal(t, "RUNNING", ex["status"])
	require.Equal(t, "tests/compat", ex["path"])
	require.Equal(t, "1", ex["version"])

	var st map[string]any
	testkit.WaitFor(t, 60*time.Second, func() error {
		st = h.callJSON(t, http.StatusOK, http.MethodGet, "/api/executions/"+id+"/status", nil)
		if st["completed"] != true {
			return fmt.Errorf("not completed: %v", st)
		}
		return nil
	})
	require.Equal(t, id, st["execution_id"])
	require.Equal(t, "COMPLETED", st["status"])
	require.Equal(t, false, st["failed"])

	x := h.callJSON(t, http.StatusOK, http.MethodGet, "/api/executions/"+id, nil)
	require.Equal(t, id, x["execution_id"])
	require.Equal(t, "tests/compat", x["path"])
	require.Equal(t, "1", x["version"])
	require.Equal(t, "COMPLETED", x["status"])
	require.NotEmpty(t, x["started_at"])
	require.NotEmpty(t, x["completed_at"])
	require.Nil(t, x["error"])
	require.Equal(t, map[string]any{"message": "hello world"}, x["result"])
	events := x["events"].([]any)
	require.NotEmpty(t, events)
	var steps []string
	for i, e := range events {
		ev := e.(map[string]any)
		require.Equal(t, float64(i+1), ev["seq"], "events in seq order")
		require.NotEmpty(t, ev["event_id"])
		require.NotEmpty(t, ev["timestamp"])
		require.NotEmpty(t, ev["status"])
		if ev["event_type"] == "command.completed" {
			steps = append(steps, ev["node_name"].(string))
			require.NotNil(t, ev["result"])
		}
	}
	first, last := events[0].(map[string]any), events[len(events)-1].(map[string]any)
	require.Equal(t, "playbook.started", first["event_type"])
	require.Equal(t, "STARTED", first["status"])
	require.Equal(t, "playbook.completed", last["event_type"])
	require.Equal(t, "COMPLETED", last["status"])
	require.Equal(t, []string{"start", "end"}, steps)

	// Unknown executions: 404 in the error shape, on every route.
	const unknown = "01930000-0000-7000-8000-000000000000"
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/api/executions/" + unknown},
		{http.MethodGet, "/api/executions/" + unknown + "/status"},
		{http.MethodPost, "/api/executions/" + unknown + "/cancel"},
	} {
		nf := h.callJSON(t, http.StatusNotFound, r.method, r.path, nil)
		require.Equal(t, "NOT_FOUND", nf["code"], r.path)
		require.NotEmpty(t, nf["error"], r.path)
	}
	nf := h.callJSON(t, http.StatusNotFound, http.MethodPost, "/api/execute", map[string]any{"path": "no/such/playbook"})
	require.Equal(t, "NOT_FOUND", nf["code"])
	h.callJSON(t, http.StatusBadRequest, http.MethodPost, "/api/execute", map[string]any{"payload": map[string]any{}})

	// Cancel: a finished execution refuses (409); a running one ends CANCELLED.
	done := h.callJSON(t, http.StatusConflict, http.MethodPost, "/api/executions/"+id+"/cancel", nil)
	require.Equal(t, "FAILED_PRECONDITION", done["code"])
	h.callJSON(t, http.StatusOK, http.MethodPost, "/api/catalog/register", map[string]any{"content": base64.StdEncoding.EncodeToString([]byte(sleepyPlaybook))})
	run := h.callJSON(t, http.StatusOK, http.MethodPost, "/api/execute", map[string]any{"path": "tests/sleepy", "version": "latest"})
	sid := run["execution_id"].(string)
	cancelled := h.callJSON(t, http.StatusOK, http.MethodPost, "/api/executions/"+sid+"/cancel", nil)
	require.Equal(t, sid, cancelled["execution_id"])
	require.Equal(t, "CANCELLED", cancelled["status"])
	st = h.callJSON(t, http.StatusOK, http.MethodGet, "/api/executions/"+sid+"/status", nil)
	require.Equal(t, "CANCELLED", st["status"])
	require.Equal(t, true, st["completed"])
	require.Equal(t, true, st["is_cancelled"])
}
