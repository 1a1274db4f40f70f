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
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
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
