package mesh_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/internal/testkit"
)

const quick = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: quick, path: tests/quick}
workflow:
  - step: start
    tool: {kind: noop, result: {ok: true}}
`

// client is one caller of the gateway: its credential over REST (as a bearer token or
// x-api-key) and over gRPC.
type client struct {
	t      *testing.T
	m      *mesh.Mesh
	key    string
	header string // "authorization" (default) or "x-api-key"
	cat    apiv1.CatalogServiceClient
	exe    apiv1.ExecutionServiceClient
	cred   apiv1.CredentialServiceClient
	admin  apiv1.AdminServiceClient
	conn   *grpc.ClientConn
}

func newClient(t *testing.T, m *mesh.Mesh, key string) *client {
	t.Helper()
	var opts []grpc.DialOption
	if key != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.Bearer(key)))
	}
	conn, err := grpcx.Dial(m.GRPCAddr, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &client{t: t, m: m, key: key, cat: apiv1.NewCatalogServiceClient(conn), exe: apiv1.NewExecutionServiceClient(conn),
		cred: apiv1.NewCredentialServiceClient(conn), admin: apiv1.NewAdminServiceClient(conn), conn: conn}
}

// rest sends a REST request and returns the status, the decoded body and the headers.
func (c *client) rest(method, path string, body any) (int, map[string]any, http.Header) {
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
	switch {
	case c.key == "":
	case c.header == "x-api-key":
		req.Header.Set("X-Api-Key", c.key)
	default:
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	out := map[string]any{}
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, resp.Header
}

func (c *client) wantREST(code int, method, path string, body any) map[string]any {
	c.t.Helper()
	got, out, _ := c.rest(method, path, body)
	require.Equal(c.t, code, got, "%s %s: %v", method, path, out)
	return out
}

// createKey creates a key over REST and returns its secret and id.
func (c *client) createKey(body map[string]any) (string, string) {
	c.t.Helper()
	out := c.wantREST(http.StatusOK, http.MethodPost, "/v1/apikeys", body)
	secret, _ := out["secret"].(string)
	k, _ := out["apiKey"].(map[string]any)
	id, _ := k["id"].(string)
	require.True(c.t, auth.LooksLikeAPIKey(secret), "%v", out)
	require.NotEmpty(c.t, id)
	return secret, id
}

func startAuthMesh(t *testing.T, cfg mesh.Config) *mesh.Mesh {
	t.Helper()
	cfg.PostgresURL, cfg.NATSURL = testkit.StartPostgres(t), testkit.StartNATS(t)
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m, err := mesh.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	return m
}

func TestEveryTransportAuthenticatesAndAuthorizes(t *testing.T) {
	dir := t.TempDir()
	m := startAuthMesh(t, mesh.Config{StateDir: dir, KeyCacheTTL: 200 * time.Millisecond})
	ctx := context.Background()
	admin := newClient(t, m, m.AdminKey)

	t.Run("dev admin key file", func(t *testing.T) {
		require.True(t, m.AdminKeyCreated)
		for _, f := range []string{mesh.AdminKeyFile, mesh.InternalSecretFile} {
			fi, err := os.Stat(filepath.Join(dir, f))
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), f)
		}
		b, err := os.ReadFile(filepath.Join(dir, mesh.AdminKeyFile))
		require.NoError(t, err)
		require.Equal(t, m.AdminKey, strings.TrimSpace(string(b)))
	})

	t.Run("no or bad credentials", func(t *testing.T) {
		for name, c := range map[string]*client{"none": newClient(t, m, ""), "unknown key": newClient(t, m, "noetl_aaaaaaaaaaaaa_"+strings.Repeat("a", 52)), "garbage": newClient(t, m, "hunter2")} {
			_, err := c.cat.ListPlaybooks(ctx, &apiv1.ListPlaybooksRequest{})
			require.Equal(t, codes.Unauthenticated, status.Code(err), name)
			code, body, h := c.rest(http.MethodGet, "/v1/playbooks", nil)
			require.Equal(t, http.StatusUnauthorized, code, name)
			require.Equal(t, `Bearer realm="noetl"`, h.Get("WWW-Authenticate"), name)
			require.NotContains(t, fmt.Sprint(body), "hunter2")
			c.wantREST(http.StatusUnauthorized, http.MethodGet, "/api/executions/x", nil)
			c.wantREST(http.StatusUnauthorized, http.MethodPost, "/api/execute", map[string]any{"path": "tests/quick"})
		}
		// Probes and the API description stay open.
		anon := newClient(t, m, "")
		for _, p := range []string{"/healthz", "/health", "/openapi.json"} {
			code, _, _ := anon.rest(http.MethodGet, p, nil)
			require.Equal(t, http.StatusOK, code, p)
		}
		conn, err := grpcx.Dial(m.GRPCAddr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, hr.GetStatus())
	})

	reg, err := admin.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: quick})
	require.NoError(t, err)
	viewerKey, _ := admin.createKey(map[string]any{"roles": []string{"viewer"}, "name": "dashboards"})
	operatorKey, operatorID := admin.createKey(map[string]any{"roles": []string{"operator"}})

	t.Run("viewer reads only", func(t *testing.T) {
		v := newClient(t, m, viewerKey)
		_, err := v.cat.ListPlaybooks(ctx, &apiv1.ListPlaybooksRequest{})
		require.NoError(t, err)
		_, err = v.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "tests/quick"})
		require.Equal(t, codes.PermissionDenied, status.Code(err))
		require.Contains(t, status.Convert(err).Message(), "execute permission")
		v.wantREST(http.StatusOK, http.MethodGet, "/v1/playbooks/tests/quick", nil)
		v.wantREST(http.StatusForbidden, http.MethodPost, "/v1/executions", map[string]any{"path": "tests/quick"})
		v.wantREST(http.StatusForbidden, http.MethodPost, "/api/execute", map[string]any{"path": "tests/quick"})
		v.wantREST(http.StatusNotFound, http.MethodGet, "/api/executions/01930000-0000-7000-8000-000000000000", nil)
		v.wantREST(http.StatusForbidden, http.MethodGet, "/v1/apikeys", nil)
		v.header = "x-api-key"
		v.wantREST(http.StatusOK, http.MethodGet, "/v1/playbooks", nil)
		v.wantREST(http.StatusForbidden, http.MethodPost, "/api/executions/x/cancel", nil)
	})

	t.Run("operator starts and cancels, never administers", func(t *testing.T) {
		o := newClient(t, m, operatorKey)
		started, err := o.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath()})
		require.NoError(t, err)
		done, err := o.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: started.GetExecutionId(), Timeout: durationpb.New(30 * time.Second)})
		require.NoError(t, err)
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, done.GetExecution().GetStatus())
		o.wantREST(http.StatusOK, http.MethodPost, "/api/execute", map[string]any{"path": "tests/quick"})
		_, err = o.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: quick})
		require.Equal(t, codes.PermissionDenied, status.Code(err))
		o.wantREST(http.StatusForbidden, http.MethodPost, "/v1/playbooks", map[string]any{"content": quick})
		o.wantREST(http.StatusForbidden, http.MethodPost, "/api/catalog/register", map[string]any{"content": quick})
		o.wantREST(http.StatusForbidden, http.MethodGet, "/v1/credentials", nil)
		o.wantREST(http.StatusForbidden, http.MethodPost, "/api/credentials", map[string]any{"name": "x", "type": "t", "data": map[string]any{}})
		_, err = o.admin.CreateApiKey(ctx, &apiv1.CreateApiKeyRequest{Roles: []string{"viewer"}})
		require.Equal(t, codes.PermissionDenied, status.Code(err))
	})

	t.Run("keys are listed without secrets and revoked within the cache TTL", func(t *testing.T) {
		list := admin.wantREST(http.StatusOK, http.MethodGet, "/v1/apikeys", nil)
		raw, _ := json.Marshal(list)
		require.Contains(t, string(raw), operatorID)
		for _, k := range []string{viewerKey, operatorKey, m.AdminKey} {
			require.NotContains(t, string(raw), k[len(k)-20:])
		}
		_, err := admin.admin.CreateApiKey(ctx, &apiv1.CreateApiKeyRequest{Roles: []string{"root"}})
		require.Equal(t, codes.InvalidArgument, status.Code(err))
		o := newClient(t, m, operatorKey)
		o.wantREST(http.StatusOK, http.MethodGet, "/v1/executions", nil)
		revoked := admin.wantREST(http.StatusOK, http.MethodPost, "/v1/apikeys/"+operatorID+":revoke", map[string]any{})
		require.NotEmpty(t, revoked["apiKey"].(map[string]any)["revokeTime"])
		testkit.WaitFor(t, 10*time.Second, func() error {
			if code, _, _ := o.rest(http.MethodGet, "/v1/executions", nil); code != http.StatusUnauthorized {
				return fmt.Errorf("revoked key still answered %d", code)
			}
			return nil
		})
		_, err = o.exe.ListExecutions(ctx, &apiv1.ListExecutionsRequest{})
		require.Equal(t, codes.Unauthenticated, status.Code(err))
		o.wantREST(http.StatusUnauthorized, http.MethodGet, "/api/executions/x/status", nil)
	})

	t.Run("internal services refuse calls around the gateway", func(t *testing.T) {
		other, err := auth.NewTrust("another-secret-that-is-long-enough-000")
		require.NoError(t, err)
		for name, opts := range map[string][]grpc.DialOption{
			"no principal": nil,
			"forged":       {grpc.WithPerRPCCredentials(other.Service("worker"))},
			"api key":      {grpc.WithPerRPCCredentials(auth.Bearer(m.AdminKey))},
		} {
			dial := func(addr string) *grpc.ClientConn {
				conn, err := grpcx.Dial(addr, opts...)
				require.NoError(t, err)
				t.Cleanup(func() { _ = conn.Close() })
				return conn
			}
			oc, sc, rc := dial(m.OrchestratorAddr), dial(m.StatebuilderAddr), dial(m.ResultstoreAddr)
			_, err := orchv1.NewOrchestratorServiceClient(oc).ListPlaybooks(ctx, &orchv1.ListPlaybooksRequest{Tenant: "default"})
			require.Equal(t, codes.Unauthenticated, status.Code(err), name)
			_, err = orchv1.NewCredentialServiceClient(oc).ResolveCredential(ctx, &orchv1.ResolveCredentialRequest{Tenant: "default", Name: "x"})
			require.Equal(t, codes.Unauthenticated, status.Code(err), name)
			_, err = orchv1.NewApiKeyServiceClient(oc).CreateApiKey(ctx, &orchv1.CreateApiKeyRequest{Tenant: "default", Roles: []string{"admin"}})
			require.Equal(t, codes.Unauthenticated, status.Code(err), name)
			_, err = sbv1.NewStateServiceClient(sc).ListExecutions(ctx, &sbv1.ListExecutionsRequest{})
			require.Equal(t, codes.Unauthenticated, status.Code(err), name)
			stream, err := rsv1.NewResultStoreServiceClient(rc).GetResult(ctx, &rsv1.GetResultRequest{Tenant: "default", Uri: "x"})
			require.NoError(t, err)
			_, err = stream.Recv()
			require.Equal(t, codes.Unauthenticated, status.Code(err), name)
			for _, conn := range []*grpc.ClientConn{oc, sc, rc} {
				hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
				require.NoError(t, err, "health stays open")
				require.Equal(t, healthpb.HealthCheckResponse_SERVING, hr.GetStatus())
			}
		}
		// A service principal signed with the mesh's secret is admitted.
		oc, err := m.DialInternal(m.OrchestratorAddr, "worker")
		require.NoError(t, err)
		t.Cleanup(func() { _ = oc.Close() })
		_, err = orchv1.NewOrchestratorServiceClient(oc).ListPlaybooks(ctx, &orchv1.ListPlaybooksRequest{Tenant: "default"})
		require.NoError(t, err)
	})
}

func TestTenantsSeeOnlyTheirOwn(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	ctx := context.Background()
	def := newClient(t, m, m.AdminKey)
	acmeKey, _ := def.createKey(map[string]any{"tenant": "acme", "roles": []string{"admin"}})
	acme := newClient(t, m, acmeKey)

	// The default tenant's execution, playbook and credential.
	reg, err := def.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: quick})
	require.NoError(t, err)
	started, err := def.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath()})
	require.NoError(t, err)
	id := started.GetExecutionId()
	done, err := def.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(30 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, done.GetExecution().GetStatus())
	def.wantREST(http.StatusOK, http.MethodPost, "/v1/credentials", map[string]any{"name": "pg_local", "type": "postgres", "data": map[string]any{"password": "x"}})
	// A result too large to travel inline, held by reference in the resultstore.
	big, err := def.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: big, path: tests/big}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        result = {"blob": "x" * 100000}
`})
	require.NoError(t, err)
	bigRun, err := def.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: big.GetPlaybook().GetPath()})
	require.NoError(t, err)
	bigDone, err := def.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: bigRun.GetExecutionId(), Timeout: durationpb.New(60 * time.Second)})
	require.NoError(t, err)
	uri := bigDone.GetExecution().GetSteps()["start"].GetResultRef().GetUri()
	require.NotEmpty(t, uri, "%v", bigDone.GetExecution())
	res := apiv1.NewResultServiceClient(def.conn)
	_, err = res.GetResult(ctx, &apiv1.GetResultRequest{ResultId: uri})
	require.NoError(t, err, "the owner reads its result")

	// Another tenant: NotFound everywhere (never PermissionDenied, which would confirm the id).
	notFound := func(name string, err error) {
		t.Helper()
		require.Equal(t, codes.NotFound, status.Code(err), "%s: %v", name, err)
	}
	_, err = acme.exe.GetExecution(ctx, &apiv1.GetExecutionRequest{ExecutionId: id})
	notFound("GetExecution", err)
	_, err = acme.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(time.Second)})
	notFound("WaitExecution", err)
	_, err = acme.exe.ListExecutionEvents(ctx, &apiv1.ListExecutionEventsRequest{ExecutionId: id})
	notFound("ListExecutionEvents", err)
	_, err = acme.exe.CancelExecution(ctx, &apiv1.CancelExecutionRequest{ExecutionId: id})
	notFound("CancelExecution", err)
	_, err = acme.cat.GetPlaybook(ctx, &apiv1.GetPlaybookRequest{Path: "tests/quick"})
	notFound("GetPlaybook", err)
	_, err = acme.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "tests/quick"})
	notFound("StartExecution", err)
	_, err = acme.cred.DeleteCredential(ctx, &apiv1.DeleteCredentialRequest{Name: "pg_local"})
	notFound("DeleteCredential", err)
	_, err = apiv1.NewResultServiceClient(acme.conn).GetResult(ctx, &apiv1.GetResultRequest{ResultId: uri})
	notFound("GetResult", err)
	resultID := uri[strings.LastIndex(uri, "/")+1:]
	acme.wantREST(http.StatusNotFound, http.MethodGet, "/v1/results/"+resultID, nil)
	def.wantREST(http.StatusOK, http.MethodGet, "/v1/results/"+resultID, nil)
	for _, path := range []string{"/v1/executions/" + id, "/v1/executions/" + id + "/events", "/v1/playbooks/tests/quick", "/api/executions/" + id, "/api/executions/" + id + "/status"} {
		acme.wantREST(http.StatusNotFound, http.MethodGet, path, nil)
	}
	acme.wantREST(http.StatusNotFound, http.MethodPost, "/v1/executions/"+id+":cancel", map[string]any{})
	acme.wantREST(http.StatusNotFound, http.MethodPost, "/api/executions/"+id+"/cancel", nil)
	acme.wantREST(http.StatusNotFound, http.MethodPost, "/api/execute", map[string]any{"path": "tests/quick", "tenant": "default"})

	lp, err := acme.cat.ListPlaybooks(ctx, &apiv1.ListPlaybooksRequest{})
	require.NoError(t, err)
	require.Empty(t, lp.GetPlaybooks())
	le, err := acme.exe.ListExecutions(ctx, &apiv1.ListExecutionsRequest{})
	require.NoError(t, err)
	require.Empty(t, le.GetExecutions())
	lc, err := acme.cred.ListCredentials(ctx, &apiv1.ListCredentialsRequest{})
	require.NoError(t, err)
	require.Empty(t, lc.GetCredentials())
	lk, err := acme.admin.ListApiKeys(ctx, &apiv1.ListApiKeysRequest{})
	require.NoError(t, err)
	require.Len(t, lk.GetApiKeys(), 1, "only its own key")

	// A tenant named in a request is refused unless the caller may act for it.
	_, err = acme.admin.CreateApiKey(ctx, &apiv1.CreateApiKeyRequest{Tenant: "default", Roles: []string{"viewer"}})
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	acme.wantREST(http.StatusForbidden, http.MethodPost, "/v1/apikeys", map[string]any{"tenant": "default", "roles": []string{"viewer"}})

	// The same path in another tenant is another playbook.
	mine, err := acme.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: strings.Replace(quick, "ok: true", "ok: acme", 1)})
	require.NoError(t, err)
	require.EqualValues(t, 1, mine.GetPlaybook().GetVersion())
	theirs, err := def.cat.GetPlaybook(ctx, &apiv1.GetPlaybookRequest{Path: "tests/quick"})
	require.NoError(t, err)
	require.NotContains(t, theirs.GetPlaybook().GetContent(), "acme")
	_, err = def.exe.GetExecution(ctx, &apiv1.GetExecutionRequest{ExecutionId: id})
	require.NoError(t, err, "the owner still reads it")
}

func TestInsecureDevMeshAdmitsEveryoneButKeepsInternalTrust(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{Insecure: true})
	ctx := context.Background()
	anon := newClient(t, m, "")
	_, err := anon.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: quick})
	require.NoError(t, err)
	anon.wantREST(http.StatusOK, http.MethodGet, "/v1/playbooks/tests/quick", nil)
	anon.wantREST(http.StatusOK, http.MethodPost, "/api/execute", map[string]any{"path": "tests/quick"})
	conn, err := grpcx.Dial(m.OrchestratorAddr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	_, err = orchv1.NewOrchestratorServiceClient(conn).ListPlaybooks(ctx, &orchv1.ListPlaybooksRequest{})
	require.Equal(t, codes.Unauthenticated, status.Code(err))
}
