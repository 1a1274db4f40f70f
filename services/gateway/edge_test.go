package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/services/gateway"
)

// restAs sends a REST request with key (as a bearer token, none when empty) and extra
// headers, and returns the status, headers and decoded JSON body.
func (f *fixture) restAs(key, method, path, body string, header map[string]string) (int, http.Header, map[string]any) {
	f.t.Helper()
	req, err := http.NewRequest(method, f.http+path, strings.NewReader(body))
	require.NoError(f.t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := f.client.Do(req)
	require.NoError(f.t, err)
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(f.t, err)
	out := map[string]any{}
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, resp.Header, out
}

func workload(t *testing.T, v map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(v)
	require.NoError(t, err)
	return s
}

// TestOversizedRequestsAreRefusedAtTheEdge: issue 12, item 5. The gRPC receive cap is the
// REST body cap; a workload over the public limit is RESOURCE_EXHAUSTED naming it (HTTP
// 413) and never reaches the orchestrator; the orchestrator's message that named a NATS
// subject is masked.
func TestOversizedRequestsAreRefusedAtTheEdge(t *testing.T) {
	t.Parallel()
	f := startGateway(t, gateway.Config{})
	ctx := context.Background()
	exe := f.executions(f.keyA)

	_, err := exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "tests/x", Workload: workload(t, map[string]any{"blob": strings.Repeat("x", 5_000_000)})})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	require.Regexp(t, `^grpc: received message larger than max \(\d+ vs\. 2097152\)$`, status.Convert(err).Message())

	body := `{"path": "tests/x", "workload": {"blob": "` + strings.Repeat("x", 5_000_000) + `"}}`
	code, _, out := f.restAs(f.keyA, http.MethodPost, "/v1/executions", body, nil)
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
	require.Equal(t, "BODY_TOO_LARGE", detail(out, "google.rpc.ErrorInfo")["reason"])

	// Fits the body cap, not the workload limit.
	want := fmt.Sprintf("workload: %d bytes exceeds the limit of 196608 bytes", len(`{"blob":""}`)+1<<20)
	_, err = exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "tests/x", Workload: workload(t, map[string]any{"blob": strings.Repeat("x", 1<<20)})})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	require.Equal(t, want, status.Convert(err).Message())
	require.Equal(t, "WORKLOAD_TOO_LARGE", errorInfo(t, err).GetReason())
	require.Equal(t, "196608", errorInfo(t, err).GetMetadata()["limit"])
	_, hasRetry := retryDelay(err)
	require.False(t, hasRetry, "a retry would not help")
	body = `{"path": "tests/x", "workload": {"blob": "` + strings.Repeat("x", 1<<20) + `"}}`
	code, hdr, out := f.restAs(f.keyA, http.MethodPost, "/v1/executions", body, nil)
	require.Equal(t, http.StatusRequestEntityTooLarge, code, "%v", out)
	require.Equal(t, want, out["message"])
	require.Empty(t, hdr.Get("Retry-After"))
	code, _, out = f.restAs(f.keyA, http.MethodPost, "/api/execute", body, nil)
	require.Equal(t, http.StatusRequestEntityTooLarge, code, "%v", out)
	require.Equal(t, map[string]any{"error": want, "code": "RESOURCE_EXHAUSTED"}, out)

	// The orchestrator's refusal of the merged workload gets the same details.
	_, err = exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "tests/merged"})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	require.Equal(t, "WORKLOAD_TOO_LARGE", errorInfo(t, err).GetReason())
	code, _, _ = f.restAs(f.keyA, http.MethodPost, "/v1/executions", `{"path": "tests/merged"}`, nil)
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
	require.EqualValues(t, 2, f.be.starts.Load(), "only the two merged starts reached the orchestrator")

	// Messages naming internals are masked whatever their code, and logged.
	for path, c := range map[string]codes.Code{"tests/leak": codes.InvalidArgument, "tests/down": codes.Unavailable} {
		_, err = exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: path})
		st := status.Convert(err)
		require.Equal(t, c, st.Code(), path)
		id := errorInfo(t, err).GetMetadata()["correlation_id"]
		require.Regexp(t, `^[a-z ;]+ \(correlation id `+id+`\)$`, st.Message())
		require.NotContains(t, st.String(), "noetl.events")
		require.NotContains(t, st.String(), "256 KiB")
		require.Contains(t, f.logs.String(), id)
		code, _, out := f.restAs(f.keyA, http.MethodPost, "/v1/executions", `{"path": "`+path+`"}`, nil)
		raw, _ := json.Marshal(out)
		require.NotContains(t, string(raw), "noetl.events", "%d", code)
		require.NotContains(t, string(raw), "nats")
	}
	require.Contains(t, f.logs.String(), "noetl.events.7", "the original is in the gateway's log")
}

// TestMessageCapFollowsTheBodyCap sets a small body cap: the gRPC receive cap follows it,
// and a REST body within it whose message encodes larger is refused as 413 too.
func TestMessageCapFollowsTheBodyCap(t *testing.T) {
	t.Parallel()
	f := startGateway(t, gateway.Config{MaxBodyBytes: 64 << 10})
	_, err := f.catalog(f.keyA).RegisterPlaybook(context.Background(), &apiv1.RegisterPlaybookRequest{Content: strings.Repeat("#", 100<<10)})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "vs. 65536)")

	// 30,000 numbers: 60 KB of JSON, 330 KB as a message.
	body := `{"path": "tests/x", "workload": {"n": [` + strings.TrimSuffix(strings.Repeat("1,", 30000), ",") + `]}}`
	require.Less(t, len(body), 64<<10)
	code, _, out := f.restAs(f.keyA, http.MethodPost, "/v1/executions", body, nil)
	require.Equal(t, http.StatusRequestEntityTooLarge, code, "%v", out)
	require.Equal(t, "MESSAGE_TOO_LARGE", detail(out, "google.rpc.ErrorInfo")["reason"])
	require.Regexp(t, `^request of \d+ bytes \(as a message\) exceeds the limit of 65536 bytes$`, out["message"])
	require.Zero(t, f.be.starts.Load())
}

// TestFailedAuthenticationIsThrottledByAddressAndKeyID: issue 12, item 8, behind a trusted
// proxy whose X-Forwarded-For names the clients. Past the burst of failures, an address is
// refused (429, Retry-After) before its credentials are checked, a valid key included,
// while other addresses are served; failures of one key id from many addresses throttle
// that key id. gRPC callers count against the same buckets.
func TestFailedAuthenticationIsThrottledByAddressAndKeyID(t *testing.T) {
	t.Parallel()
	const burst = 3
	f := startGateway(t, gateway.Config{AuthFailuresPerMinute: 1, AuthFailureBurst: burst, TrustedProxies: "127.0.0.1"})
	from := func(addr string) map[string]string { return map[string]string{"X-Forwarded-For": addr} }
	wrong := func() string {
		k, _, _, err := auth.NewAPIKey()
		require.NoError(t, err)
		return k
	}

	// Per address.
	for i := range burst {
		code, _, _ := f.restAs(wrong(), http.MethodGet, "/v1/playbooks", "", from("198.51.100.1"))
		require.Equal(t, http.StatusUnauthorized, code, "failure %d is within the burst", i)
	}
	code, hdr, out := f.restAs(wrong(), http.MethodGet, "/v1/playbooks", "", from("198.51.100.1"))
	require.Equal(t, http.StatusTooManyRequests, code, "%v", out)
	require.Regexp(t, `^[1-9][0-9]*$`, hdr.Get("Retry-After"))
	require.Equal(t, "TOO_MANY_AUTH_FAILURES", detail(out, "google.rpc.ErrorInfo")["reason"])
	require.Contains(t, out["message"], "too many failed attempts for address 198.51.100.1; retry after")
	code, _, _ = f.restAs(f.keyA, http.MethodGet, "/v1/playbooks", "", from("198.51.100.1"))
	require.Equal(t, http.StatusTooManyRequests, code, "a valid key from the throttled address is refused too")
	code, _, _ = f.restAs(f.keyA, http.MethodGet, "/api/executions/"+idX1+"/status", "", from("198.51.100.1"))
	require.Equal(t, http.StatusTooManyRequests, code, "and on the /api/ routes")
	code, _, _ = f.restAs(f.keyA, http.MethodGet, "/v1/playbooks", "", from("198.51.100.2"))
	require.Equal(t, http.StatusOK, code, "another address is served")

	// gRPC: the proxy's x-forwarded-for metadata names the same address.
	conn, err := grpcx.Dial(f.grpcAddr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	cat := apiv1.NewCatalogServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+f.keyA, "x-forwarded-for", "198.51.100.1")
	_, err = cat.ListPlaybooks(ctx, &apiv1.ListPlaybooksRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	require.Equal(t, "TOO_MANY_AUTH_FAILURES", errorInfo(t, err).GetReason())
	d, ok := retryDelay(err)
	require.True(t, ok)
	require.Positive(t, d)

	// Per key id: the same id with wrong secrets from many addresses.
	idB, _, ok := auth.ParseAPIKey(f.keyB)
	require.True(t, ok)
	forged := auth.APIKeyPrefix + idB + "_" + strings.SplitN(strings.TrimPrefix(wrong(), auth.APIKeyPrefix), "_", 2)[1]
	for i := range burst {
		code, _, _ := f.restAs(forged, http.MethodGet, "/v1/playbooks", "", from(fmt.Sprintf("203.0.113.%d", i+1)))
		require.Equal(t, http.StatusUnauthorized, code)
	}
	code, _, out = f.restAs(f.keyB, http.MethodGet, "/v1/playbooks", "", from("203.0.113.99"))
	require.Equal(t, http.StatusTooManyRequests, code, "the key id is throttled, its valid secret included")
	require.Contains(t, out["message"], "API key id "+idB)
	code, _, _ = f.restAs(f.keyA, http.MethodGet, "/v1/playbooks", "", from("203.0.113.99"))
	require.Equal(t, http.StatusOK, code, "other keys from that address are served")

	// The audit trail: address, key id, method and outcome; never a secret.
	var outcomes []string
	for line := range strings.SplitSeq(f.logs.String(), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) != nil || l["audit"] != true {
			continue
		}
		require.Equal(t, "WARN", l["level"])
		require.NotEmpty(t, l["address"])
		require.Contains(t, []any{"/noetl.api.v1.CatalogService/ListPlaybooks", "/noetl.api.v1.ExecutionService/GetExecution"}, l["method"], "%v", l)
		outcomes = append(outcomes, fmt.Sprint(l["outcome"], " ", l["address"], " ", l["key_id"] == idB))
	}
	require.Contains(t, outcomes, "unauthenticated 198.51.100.1 false")
	require.Contains(t, outcomes, "throttled 198.51.100.1 false")
	require.Contains(t, outcomes, "unauthenticated 203.0.113.1 true")
	require.Contains(t, outcomes, "throttled 203.0.113.99 true")
	for _, k := range []string{f.keyA, f.keyB, forged} {
		require.NotContains(t, f.logs.String(), k[len(k)-20:])
	}
}

// TestMalformedBodiesNameWhereTheyBreak: a REST body that is not JSON, or JSON protojson
// refuses, is INVALID_ARGUMENT (HTTP 400) naming the byte, or the line and column, where
// it breaks; nothing reaches the orchestrator.
func TestMalformedBodiesNameWhereTheyBreak(t *testing.T) {
	t.Parallel()
	f := startGateway(t, gateway.Config{})
	deep := `{"path": "tests/x", "workload": ` + strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000) + "}"
	for body, want := range map[string]string{
		`{"path": "tests/x", "workload": {"a": NaN}}`: "body: not JSON at byte 39: invalid character 'N' looking for beginning of value",
		`{"path": "tests/x", "workload": {"a": 1}`:    "body: not JSON: it ends inside the document (unexpected EOF)",
		deep: "body: not JSON at byte 50028: invalid character '{' exceeded max depth",
		`{"path": "tests/x", "workload": {"a": 1, "a": 2}}`: `(line 1:42): duplicate map key "a"`,
		"{\"path\": \"tests/x\xff\"}":                       "(line 1:10): invalid UTF-8 in string",
	} {
		code, _, out := f.restAs(f.keyA, http.MethodPost, "/v1/executions", body, nil)
		require.Equal(t, http.StatusBadRequest, code, "%.80s: %v", body, out)
		require.Contains(t, out["message"], want, "%.80s", body)
	}
	require.Zero(t, f.be.starts.Load(), "nothing was forwarded")
}

// TestDenialsBehindTheGatewayAreAudited: a call the gateway admits and the orchestrator
// refuses with PERMISSION_DENIED (a system/ playbook started without the system role) is
// an audit line like the gateway's own denials, over gRPC and REST; other refusals are not.
func TestDenialsBehindTheGatewayAreAudited(t *testing.T) {
	t.Parallel()
	f := startGateway(t, gateway.Config{})
	_, err := f.executions(f.keyA).StartExecution(context.Background(), &apiv1.StartExecutionRequest{Path: "system/x"})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	code, _, _ := f.restAs(f.keyA, http.MethodPost, "/v1/executions", `{"path": "system/x"}`, nil)
	require.Equal(t, http.StatusForbidden, code)
	_, err = f.executions(f.keyA).StartExecution(context.Background(), &apiv1.StartExecutionRequest{Path: "tests/down"})
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)

	idA, _, ok := auth.ParseAPIKey(f.keyA)
	require.True(t, ok)
	var denied []map[string]any
	for line := range strings.SplitSeq(f.logs.String(), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["audit"] == true {
			require.Equal(t, "denied", l["outcome"], "%v", l)
			denied = append(denied, l)
		}
	}
	require.Len(t, denied, 2, "one line per refused call")
	for _, l := range denied {
		require.Equal(t, "WARN", l["level"])
		require.Equal(t, "authorization denied", l["msg"])
		require.Equal(t, "/noetl.api.v1.ExecutionService/StartExecution", l["method"])
		require.Equal(t, "path: starting system/ playbooks requires the system role", l["error"])
		require.Equal(t, idA, l["key_id"])
		require.Equal(t, "127.0.0.1", l["address"])
		require.NotEmpty(t, l["tenant"])
	}
	require.NotContains(t, f.logs.String(), f.keyA[len(f.keyA)-20:])
}

// TestForwardedForIsIgnoredByDefault: without trusted proxies a client cannot pick its
// address with X-Forwarded-For (or the gateway's own internal metadata key), so varying it
// does not escape the throttle.
func TestForwardedForIsIgnoredByDefault(t *testing.T) {
	t.Parallel()
	f := startGateway(t, gateway.Config{AuthFailuresPerMinute: 1, AuthFailureBurst: 2})
	for i := range 2 {
		code, _, _ := f.restAs("noetl_bogus", http.MethodGet, "/v1/playbooks", "", map[string]string{"X-Forwarded-For": fmt.Sprint("198.51.100.", i)})
		require.Equal(t, http.StatusUnauthorized, code)
	}
	code, _, out := f.restAs(f.keyA, http.MethodGet, "/v1/playbooks", "", map[string]string{
		"X-Forwarded-For": "198.51.100.77", "Grpc-Metadata-X-Noetl-Client-Address": "198.51.100.78", "X-Noetl-Client-Address": "198.51.100.79",
	})
	require.Equal(t, http.StatusTooManyRequests, code, "%v", out)
	require.Contains(t, out["message"], "address 127.0.0.1")
}

// TestIDsAreValidatedBeforeAnythingIsForwarded: issue 12, item 9. GET /v1/results/%00
// reached Postgres (500); now every id is checked at the gateway, 400 naming the field,
// over REST, the /api/ routes, the event stream and gRPC.
func TestIDsAreValidatedBeforeAnythingIsForwarded(t *testing.T) {
	t.Parallel()
	f := startGateway(t, gateway.Config{})
	for path, field := range map[string]string{
		"/v1/results/%00":                 "result_id",
		"/v1/results/%00/flight":          "result_id",
		"/v1/executions/%00":              "execution_id",
		"/v1/executions/x1":               "execution_id",
		"/v1/executions/%00/events:watch": "execution_id",
		"/v1/playbooks/a%00":              "path",
	} {
		code, _, out := f.restAs(f.keyA, http.MethodGet, path, "", nil)
		require.Equal(t, http.StatusBadRequest, code, "%s: %v", path, out)
		require.True(t, strings.HasPrefix(fmt.Sprint(out["message"]), field+": "), "%s: %v", path, out)
		violations, _ := detail(out, "google.rpc.BadRequest")["fieldViolations"].([]any)
		require.Len(t, violations, 1, "%s: %v", path, out)
		require.Equal(t, field, violations[0].(map[string]any)["field"])
	}
	code, _, out := f.restAs(f.keyA, http.MethodGet, "/api/executions/%00/status", "", nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.True(t, strings.HasPrefix(fmt.Sprint(out["error"]), "execution_id: "), "%v", out)

	_, err := apiv1.NewResultServiceClient(f.conns[f.keyA]).GetResult(context.Background(), &apiv1.GetResultRequest{ResultId: "\x00"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.True(t, strings.HasPrefix(status.Convert(err).Message(), "result_id: "), "%v", err)
	s, err := f.executions(f.keyA).WatchExecution(context.Background(), &apiv1.WatchExecutionRequest{ExecutionId: idX1, AfterSeq: 0})
	require.NoError(t, err)
	for {
		if _, err = s.Recv(); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, io.EOF, "a valid id passes")
	require.NotContains(t, f.logs.String(), "internal error", "nothing reached a backend that failed on it")
}
