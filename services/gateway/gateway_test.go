package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/internal/testkit"
	"github.com/noetl/noetl/services/gateway"
)

// TestMain checks that the gateways the tests run leave no goroutine behind once stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// secretSentinel is in the message of every internal error the fake backends return; it
// must never reach a client.
const secretSentinel = "pq: password authentication failed (sentinel-7f3a)"

// backend fakes the internal services behind the gateway: API keys of two tenants, a
// catalog that refuses a playbook as invalid, reads that fail internally, and waits that
// block until released (calls in flight).
type backend struct {
	orchv1.UnimplementedOrchestratorServiceServer
	orchv1.UnimplementedApiKeyServiceServer
	sbv1.UnimplementedStateServiceServer
	orchv1.UnimplementedWatchServiceServer
	rsv1.UnimplementedResultStoreServiceServer

	keys    map[string]string // API key -> tenant
	system  map[string]bool   // API keys of the system role (the others are admins)
	lists   chan listCall     // ListExecutions calls that reached the statebuilder
	waiting chan string       // a WaitExecution arrived, by tenant
	release chan struct{}     // closed: blocked waits return
	left    chan string       // a held watch ended because its client left, by tenant
	starts  atomic.Int64      // StartExecution calls that reached the orchestrator
}

// StartExecution starts idX1, except for paths that fail as the orchestrator can:
// "tests/leak" with the message that named the NATS subject (issue 12), "tests/down" as
// unavailable, "tests/merged" as a merged workload over the limit, "system/x" as needing
// the system role; "tests/held" is held until release.
func (b *backend) StartExecution(_ context.Context, req *orchv1.StartExecutionRequest) (*orchv1.StartExecutionResponse, error) {
	b.starts.Add(1)
	switch req.GetPath() {
	case "system/x":
		return nil, status.Error(codes.PermissionDenied, "path: starting system/ playbooks requires the system role")
	case "tests/leak":
		return nil, status.Error(codes.InvalidArgument, "workload: too large (publish noetl.events.7 (e0123456789abcdefghijklmnop): 5000123 bytes: message exceeds 256 KiB); pass large inputs by reference")
	case "tests/down":
		return nil, status.Error(codes.Unavailable, "publish start: publish noetl.events.7: nats: timeout")
	case "tests/merged":
		return nil, status.Error(codes.ResourceExhausted, "workload: 200000 bytes (the playbook's workload merged with the request's, as JSON) exceeds the limit of 196608 bytes")
	case "tests/held":
		b.waiting <- req.GetTenant()
		<-b.release
	}
	return &orchv1.StartExecutionResponse{ExecutionId: idX1, Version: 1}, nil
}

// Execution ids the fake backends know.
const (
	idX1    = "01930000-0000-7000-8000-000000000001" // a three-event execution
	idHeld  = "01930000-0000-7000-8000-000000000002" // waits and watches held open
	idBusy  = "01930000-0000-7000-8000-000000000003" // watches refused as past the cap
	idAbc   = "01930000-0000-7000-8000-000000000004" // reads fail internally
	idOther = "01930000-0000-7000-8000-000000000005" // not found
	idX     = "01930000-0000-7000-8000-000000000006"
)

// WatchExecution streams the events after after_seq of a three-event execution idX1;
// idHeld stays open until its client leaves; idBusy is refused as past the orchestrator's
// cap.
func (b *backend) WatchExecution(req *orchv1.WatchExecutionRequest, stream grpc.ServerStreamingServer[orchv1.WatchExecutionResponse]) error {
	switch req.GetExecutionId() {
	case idBusy:
		return status.Error(codes.ResourceExhausted, "too many concurrent watches (limit 1); retry later")
	case idHeld:
		if err := stream.SendHeader(nil); err != nil {
			return err
		}
		b.waiting <- req.GetTenant()
		<-stream.Context().Done()
		b.left <- req.GetTenant()
		return stream.Context().Err()
	case idX1:
	default:
		return status.Errorf(codes.NotFound, "execution %s not found", req.GetExecutionId())
	}
	types := []string{"playbook.started", "step.enter", "playbook.completed"}
	var evs []*eventv1.Event
	for seq := req.GetAfterSeq() + 1; seq <= 3; seq++ {
		evs = append(evs, &eventv1.Event{ExecutionId: idX1, Seq: seq, Type: types[seq-1], EventId: fmt.Sprint("e", seq)})
	}
	if len(evs) == 0 {
		return nil // ended before after_seq: no header, as the orchestrator does
	}
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	return stream.Send(&orchv1.WatchExecutionResponse{Events: evs})
}

func (b *backend) VerifyApiKey(_ context.Context, req *orchv1.VerifyApiKeyRequest) (*orchv1.VerifyApiKeyResponse, error) {
	tenant, ok := b.keys[req.GetKey()]
	if !ok {
		return nil, status.Error(codes.NotFound, "no such key")
	}
	id, _, _ := auth.ParseAPIKey(req.GetKey())
	role := auth.RoleAdmin
	if b.system[req.GetKey()] {
		role = auth.RoleSystem
	}
	return &orchv1.VerifyApiKeyResponse{Key: &orchv1.ApiKeyInfo{Id: id, Tenant: tenant, Roles: []string{role}}}, nil
}

func (b *backend) ListPlaybooks(context.Context, *orchv1.ListPlaybooksRequest) (*orchv1.ListPlaybooksResponse, error) {
	return &orchv1.ListPlaybooksResponse{}, nil
}

func (b *backend) GetPlaybook(context.Context, *orchv1.GetPlaybookRequest) (*orchv1.GetPlaybookResponse, error) {
	return nil, status.Error(codes.Internal, secretSentinel)
}

func (b *backend) RegisterPlaybook(context.Context, *orchv1.RegisterPlaybookRequest) (*orchv1.RegisterPlaybookResponse, error) {
	return nil, status.Error(codes.InvalidArgument, `invalid playbook: line 7, column 11: step "fetch": field "tool.kind": unknown tool kind "htp"`)
}

func (b *backend) WaitExecution(ctx context.Context, req *orchv1.WaitExecutionRequest) (*orchv1.WaitExecutionResponse, error) {
	b.waiting <- req.GetTenant()
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return &orchv1.WaitExecutionResponse{}, nil
}

func (b *backend) GetState(_ context.Context, req *sbv1.GetStateRequest) (*sbv1.GetStateResponse, error) {
	if req.GetExecutionId() == idHeld {
		return &sbv1.GetStateResponse{State: &sbv1.ExecutionState{ExecutionId: idHeld, Tenant: req.GetTenant(), Seq: 1}}, nil
	}
	return nil, status.Error(codes.Unknown, secretSentinel)
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type fixture struct {
	t      *testing.T
	http   string
	client *http.Client
	logs   *syncBuffer
	be     *backend
	keyA   string
	keyB   string
	// keySys is a key of tenant ops with the system role.
	keySys string
	conns  map[string]*grpc.ClientConn
	// grpcAddr is the gateway's gRPC address.
	grpcAddr string
}

// startGateway runs a gateway with cfg's limits in front of the fake backends.
func startGateway(t *testing.T, cfg gateway.Config) *fixture {
	t.Helper()
	keyA, _, _, err := auth.NewAPIKey()
	require.NoError(t, err)
	keyB, _, _, err := auth.NewAPIKey()
	require.NoError(t, err)
	keySys, _, _, err := auth.NewAPIKey()
	require.NoError(t, err)
	be := &backend{keys: map[string]string{keyA: "tenant-a", keyB: "tenant-b", keySys: "ops"}, system: map[string]bool{keySys: true},
		lists: make(chan listCall, 10), waiting: make(chan string, 100), release: make(chan struct{}), left: make(chan string, 100)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	orchv1.RegisterOrchestratorServiceServer(srv, be)
	orchv1.RegisterApiKeyServiceServer(srv, be)
	sbv1.RegisterStateServiceServer(srv, be)
	orchv1.RegisterWatchServiceServer(srv, be)
	rsv1.RegisterResultStoreServiceServer(srv, be)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		return l
	}
	grpcLis, httpLis := listen(), listen()
	cfg.GRPCListener, cfg.HTTPListener, cfg.AdminListener = grpcLis, httpLis, listen()
	cfg.OrchestratorAddr, cfg.StatebuilderAddr, cfg.ResultstoreAddr = lis.Addr().String(), lis.Addr().String(), lis.Addr().String()
	cfg.InternalSecret = strings.Repeat("s", 32)
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gateway.Run(ctx, cfg, slog.New(slog.NewJSONHandler(logs, nil))) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	f := &fixture{t: t, http: "http://" + httpLis.Addr().String(), client: client, logs: logs, be: be, keyA: keyA, keyB: keyB, keySys: keySys, conns: map[string]*grpc.ClientConn{}, grpcAddr: grpcLis.Addr().String()}
	for _, key := range []string{keyA, keyB, keySys} {
		conn, err := grpcx.DialSigned(grpcLis.Addr().String(), auth.Bearer(key))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		f.conns[key] = conn
	}
	return f
}

func (f *fixture) catalog(key string) apiv1.CatalogServiceClient {
	return apiv1.NewCatalogServiceClient(f.conns[key])
}

func (f *fixture) executions(key string) apiv1.ExecutionServiceClient {
	return apiv1.NewExecutionServiceClient(f.conns[key])
}

// rest sends a request with key and returns the status, headers and decoded JSON body.
func (f *fixture) rest(key, method, path, body string) (int, http.Header, map[string]any) {
	f.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, f.http+path, rd)
	require.NoError(f.t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := f.client.Do(req)
	require.NoError(f.t, err)
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(f.t, err)
	out := map[string]any{}
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, resp.Header, out
}

// detail returns the first detail of a REST error body with the given type.
func detail(body map[string]any, typ string) map[string]any {
	ds, _ := body["details"].([]any)
	for _, d := range ds {
		if m, _ := d.(map[string]any); m["@type"] == "type.googleapis.com/"+typ {
			return m
		}
	}
	return nil
}

func errorInfo(t *testing.T, err error) *errdetails.ErrorInfo {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	require.Fail(t, "no ErrorInfo", "%v", err)
	return nil
}

func retryDelay(err error) (time.Duration, bool) {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// TestRateLimitRefusesTheFloodingTenantOnly floods the gateway with one tenant's calls: past
// its burst they are refused with ResourceExhausted and a RetryInfo (HTTP 429 with
// Retry-After over REST), while every call of the other tenant succeeds.
func TestRateLimitRefusesTheFloodingTenantOnly(t *testing.T) {
	t.Parallel()
	const burst = 5
	f := startGateway(t, gateway.Config{TenantRPS: 1, TenantBurst: burst, TenantInFlight: 100})
	ctx := context.Background()

	ok, refused := 0, 0
	for range 50 {
		_, err := f.catalog(f.keyA).ListPlaybooks(ctx, &apiv1.ListPlaybooksRequest{})
		if err == nil {
			ok++
			continue
		}
		refused++
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
		info := errorInfo(t, err)
		require.Equal(t, "noetl.io", info.GetDomain())
		require.Equal(t, "RATE_LIMITED", info.GetReason())
		require.Equal(t, "tenant-a", info.GetMetadata()["tenant"])
		d, has := retryDelay(err)
		require.True(t, has, "a RetryInfo says when to retry")
		require.Positive(t, d)
	}
	require.GreaterOrEqual(t, ok, burst, "the burst passes")
	require.Positive(t, refused, "the flood is refused")
	require.Equal(t, 50, ok+refused)

	// Tenant B is untouched by A's flood: its whole burst succeeds, over gRPC and REST.
	for range burst - 1 {
		_, err := f.catalog(f.keyB).ListPlaybooks(ctx, &apiv1.ListPlaybooksRequest{})
		require.NoError(t, err)
	}
	code, _, body := f.rest(f.keyB, http.MethodGet, "/v1/playbooks", "")
	require.Equal(t, http.StatusOK, code, "%v", body)

	// Over REST, A's refusals are 429 with Retry-After and the same details in the body.
	seen := 0
	for range 20 {
		code, hdr, body := f.rest(f.keyA, http.MethodGet, "/v1/playbooks", "")
		if code == http.StatusOK {
			continue
		}
		seen++
		require.Equal(t, http.StatusTooManyRequests, code, "%v", body)
		require.Regexp(t, `^[1-9][0-9]*$`, hdr.Get("Retry-After"))
		require.Equal(t, float64(codes.ResourceExhausted), body["code"])
		require.Equal(t, "RATE_LIMITED", detail(body, "google.rpc.ErrorInfo")["reason"])
		require.NotNil(t, detail(body, "google.rpc.RetryInfo"))
	}
	require.Positive(t, seen)
}

// TestInFlightCapRefusesTheBusyTenantOnly holds a tenant's calls in flight up to its cap
// (starts the backend holds): its next call is refused (HTTP 429 over REST), its waiting
// calls are not (they have a cap of their own), the other tenant's calls succeed, and once
// the calls end the tenant is served again.
func TestInFlightCapRefusesTheBusyTenantOnly(t *testing.T) {
	t.Parallel()
	const inFlight = 3
	f := startGateway(t, gateway.Config{TenantRPS: 1000, TenantBurst: 1000, TenantInFlight: inFlight})
	ctx := context.Background()

	var wg sync.WaitGroup
	for range inFlight {
		wg.Go(func() {
			_, err := f.executions(f.keyA).StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "tests/held"})
			require.NoError(t, err)
		})
	}
	for range inFlight {
		require.Equal(t, "tenant-a", <-f.be.waiting)
	}
	_, err := f.catalog(f.keyA).ListPlaybooks(ctx, &apiv1.ListPlaybooksRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	require.Equal(t, "TOO_MANY_IN_FLIGHT", errorInfo(t, err).GetReason())
	_, err = f.executions(f.keyA).StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "p"})
	require.Equal(t, "TOO_MANY_IN_FLIGHT", errorInfo(t, err).GetReason(), "a start that does not wait is a call in flight")
	code, hdr, _ := f.rest(f.keyA, http.MethodGet, "/v1/playbooks", "")
	require.Equal(t, http.StatusTooManyRequests, code)
	require.Equal(t, "1", hdr.Get("Retry-After"))
	code, hdr, body := f.rest(f.keyA, http.MethodGet, "/api/executions/"+idHeld+"/status", "")
	require.Equal(t, http.StatusTooManyRequests, code, "the /api/ routes are limited too: %v", body)
	require.Equal(t, "1", hdr.Get("Retry-After"))
	require.Equal(t, "RESOURCE_EXHAUSTED", body["code"])

	// A waiting call takes none of those slots.
	wg.Go(func() {
		_, err := f.executions(f.keyA).WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: idHeld})
		require.NoError(t, err)
	})
	require.Equal(t, "tenant-a", <-f.be.waiting, "a wait is admitted with the calls in flight at their cap")

	succeeded := 0
	for range 10 {
		if _, err := f.catalog(f.keyB).ListPlaybooks(ctx, &apiv1.ListPlaybooksRequest{}); err == nil {
			succeeded++
		}
	}
	require.Equal(t, 10, succeeded, "tenant B is not held up by A's calls in flight")

	close(f.be.release)
	wg.Wait()
	testkit.WaitFor(t, 10*time.Second, func() error {
		_, err := f.catalog(f.keyA).ListPlaybooks(ctx, &apiv1.ListPlaybooksRequest{})
		return err
	})
}

// TestWaitsCapRefusesWaitsOnly holds a tenant's waiting calls up to their cap (waits and a
// watch the backend holds open): its next wait, watch or start that waits is refused
// (TOO_MANY_WAITS, HTTP 429 over REST) while its other calls, a start that does not wait
// among them, are served; once the waits end, a wait is admitted again.
func TestWaitsCapRefusesWaitsOnly(t *testing.T) {
	t.Parallel()
	const waits = 3
	f := startGateway(t, gateway.Config{TenantRPS: 1000, TenantBurst: 1000, TenantInFlight: 1, TenantWaits: waits})
	ctx := context.Background()

	var wg sync.WaitGroup
	for range waits - 1 {
		wg.Go(func() {
			_, err := f.executions(f.keyA).WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: idHeld})
			require.NoError(t, err)
		})
	}
	wctx, stopWatch := context.WithCancel(ctx)
	watch, err := f.executions(f.keyA).WatchExecution(wctx, &apiv1.WatchExecutionRequest{ExecutionId: idHeld})
	require.NoError(t, err)
	_, err = watch.Header() // the watch is open at the backend
	require.NoError(t, err)
	for range waits {
		require.Equal(t, "tenant-a", <-f.be.waiting)
	}

	_, err = f.executions(f.keyA).WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: idHeld})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	require.Equal(t, "TOO_MANY_WAITS", errorInfo(t, err).GetReason())
	require.Contains(t, status.Convert(err).Message(), "the limit of 3 waiting calls")
	_, err = f.executions(f.keyA).StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "p", Wait: durationpb.New(time.Minute)})
	require.Equal(t, "TOO_MANY_WAITS", errorInfo(t, err).GetReason(), "a start that waits is a waiting call")
	code, hdr, _ := f.rest(f.keyA, http.MethodGet, "/v1/executions/"+idHeld+"/events:watch", "")
	require.Equal(t, http.StatusTooManyRequests, code, "and so is a watch")
	require.Equal(t, "1", hdr.Get("Retry-After"))

	before := f.be.starts.Load()
	_, err = f.executions(f.keyA).StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "p"})
	require.NoError(t, err, "a start that does not wait is served beside the waits")
	require.Equal(t, before+1, f.be.starts.Load())
	_, err = f.catalog(f.keyA).ListPlaybooks(ctx, &apiv1.ListPlaybooksRequest{})
	require.NoError(t, err)
	wg.Go(func() {
		_, err := f.executions(f.keyB).WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: idHeld})
		require.NoError(t, err)
	})
	require.Equal(t, "tenant-b", <-f.be.waiting, "tenant B's waits are its own")

	stopWatch()
	require.Equal(t, "tenant-a", <-f.be.left)
	testkit.WaitFor(t, 10*time.Second, func() error {
		wait, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := f.executions(f.keyA).WaitExecution(wait, &apiv1.WaitExecutionRequest{ExecutionId: idHeld})
		if status.Code(err) == codes.ResourceExhausted {
			return err
		}
		return nil // admitted: it reached the backend and waited there
	})
	close(f.be.release)
	wg.Wait()
}

// TestInternalErrorsAreMaskedAtTheEdge makes the backends fail internally: gRPC, REST and
// the /api/ routes answer "internal error (correlation id X)" with the id in an ErrorInfo,
// never the original message, which the gateway logs with the same id.
func TestInternalErrorsAreMaskedAtTheEdge(t *testing.T) {
	t.Parallel()
	f := startGateway(t, gateway.Config{})
	ctx := context.Background()

	_, err := f.catalog(f.keyA).GetPlaybook(ctx, &apiv1.GetPlaybookRequest{Path: "p"})
	st := status.Convert(err)
	require.Equal(t, codes.Internal, st.Code())
	require.NotContains(t, st.String(), "sentinel")
	info := errorInfo(t, err)
	require.Equal(t, "INTERNAL", info.GetReason())
	id := info.GetMetadata()["correlation_id"]
	require.Equal(t, "internal error (correlation id "+id+")", st.Message())
	logged := func(id string) {
		t.Helper()
		for line := range strings.SplitSeq(f.logs.String(), "\n") {
			if strings.Contains(line, `"correlation_id":"`+id+`"`) {
				require.Contains(t, line, "sentinel-7f3a", "the original error is logged with the id")
				return
			}
		}
		require.Fail(t, "correlation id not logged", id)
	}
	logged(id)

	// REST: the same over grpc-gateway's JSON error body (an Unknown error is masked too).
	code, _, body := f.rest(f.keyA, http.MethodGet, "/v1/executions/"+idAbc, "")
	require.Equal(t, http.StatusInternalServerError, code)
	raw, _ := json.Marshal(body)
	require.NotContains(t, string(raw), "sentinel")
	restID, _ := detail(body, "google.rpc.ErrorInfo")["metadata"].(map[string]any)["correlation_id"].(string)
	require.NotEmpty(t, restID)
	require.Equal(t, "internal error (correlation id "+restID+")", body["message"])
	logged(restID)

	// The NoETL-compatible routes show the id too.
	code, _, body = f.rest(f.keyA, http.MethodGet, "/api/executions/"+idAbc, "")
	require.Equal(t, http.StatusInternalServerError, code)
	msg, _ := body["error"].(string)
	require.Regexp(t, `^internal error \(correlation id [0-9a-f]{16}\)$`, msg)
	logged(strings.TrimSuffix(strings.TrimPrefix(msg, "internal error (correlation id "), ")"))
}

// TestErrorsCarryDetails checks the google.rpc details of errors over gRPC and REST: a
// playbook that does not validate is a BadRequest violation of "content" naming the line
// and step, a missing field names the field, and every error has an ErrorInfo.
func TestErrorsCarryDetails(t *testing.T) {
	t.Parallel()
	f := startGateway(t, gateway.Config{})
	ctx := context.Background()
	const why = `line 7, column 11: step "fetch": field "tool.kind": unknown tool kind "htp"`

	_, err := f.catalog(f.keyA).RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: "apiVersion: noetl.io/v2"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Equal(t, "INVALID_PLAYBOOK", errorInfo(t, err).GetReason())
	var bad *errdetails.BadRequest
	for _, d := range status.Convert(err).Details() {
		if b, ok := d.(*errdetails.BadRequest); ok {
			bad = b
		}
	}
	require.NotNil(t, bad)
	require.Len(t, bad.GetFieldViolations(), 1)
	require.Equal(t, "content", bad.GetFieldViolations()[0].GetField())
	require.Equal(t, why, bad.GetFieldViolations()[0].GetDescription())

	code, _, body := f.rest(f.keyA, http.MethodPost, "/v1/playbooks", `{"content": "apiVersion: noetl.io/v2"}`)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "INVALID_PLAYBOOK", detail(body, "google.rpc.ErrorInfo")["reason"])
	require.Equal(t, "noetl.io", detail(body, "google.rpc.ErrorInfo")["domain"])
	violations, _ := detail(body, "google.rpc.BadRequest")["fieldViolations"].([]any)
	require.Equal(t, []any{map[string]any{"field": "content", "description": why}}, violations)

	// A field the gateway checks itself.
	_, err = f.executions(f.keyA).WaitExecution(ctx, &apiv1.WaitExecutionRequest{})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Equal(t, "INVALID_ARGUMENT", errorInfo(t, err).GetReason())
	for _, d := range status.Convert(err).Details() {
		if b, ok := d.(*errdetails.BadRequest); ok {
			bad = b
		}
	}
	require.Equal(t, "execution_id", bad.GetFieldViolations()[0].GetField())

	// Errors of the REST layer itself carry an ErrorInfo too; so do authentication errors.
	code, _, body = f.rest(f.keyA, http.MethodPost, "/v1/playbooks", `{"content": `)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "INVALID_ARGUMENT", detail(body, "google.rpc.ErrorInfo")["reason"])
	code, _, body = f.rest("noetl_bogus_key", http.MethodGet, "/v1/playbooks", "")
	require.Equal(t, http.StatusUnauthorized, code)
	require.Equal(t, "UNAUTHENTICATED", detail(body, "google.rpc.ErrorInfo")["reason"])

	// A body over the limit is refused before it is read, with the same error body.
	code, _, body = f.rest(f.keyA, http.MethodPost, "/v1/playbooks", `{"content": "`+strings.Repeat("a", 3<<20)+`"}`)
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
	require.Equal(t, "BODY_TOO_LARGE", detail(body, "google.rpc.ErrorInfo")["reason"])

	// The watch route answers REST errors before its stream starts.
	code, _, body = f.rest(f.keyA, http.MethodGet, "/v1/executions/"+idX+"/events:watch?after_seq=-1", "")
	require.Equal(t, http.StatusBadRequest, code)
	violations, _ = detail(body, "google.rpc.BadRequest")["fieldViolations"].([]any)
	require.Len(t, violations, 1)
	require.Equal(t, "after_seq", violations[0].(map[string]any)["field"])
	code, _, _ = f.rest("", http.MethodGet, "/v1/executions/"+idX+"/events:watch", "")
	require.Equal(t, http.StatusUnauthorized, code)
}

// TestWatchOverGRPCAndSSE relays the orchestrator's watch one event per message over gRPC
// and as Server-Sent Events, answers 204 when nothing is left, passes the orchestrator's
// cap on as a retryable 429, and ends the orchestrator's watch when the client leaves.
func TestWatchOverGRPCAndSSE(t *testing.T) {
	t.Parallel()
	f := startGateway(t, gateway.Config{})
	ctx := context.Background()

	s, err := f.executions(f.keyA).WatchExecution(ctx, &apiv1.WatchExecutionRequest{ExecutionId: idX1, AfterSeq: 1})
	require.NoError(t, err)
	var got []string
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		got = append(got, fmt.Sprint(m.GetEvent().GetSeq(), " ", m.GetEvent().GetType()))
	}
	require.Equal(t, []string{"2 step.enter", "3 playbook.completed"}, got)

	req, err := http.NewRequest(http.MethodGet, f.http+"/v1/executions/"+idX1+"/events:watch?afterSeq=1", nil)
	require.NoError(t, err)
	req.Header.Set("X-Api-Key", f.keyA)
	resp, err := f.client.Do(req)
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	frames := strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n")
	require.Len(t, frames, 2, "%q", raw)
	for i, want := range []struct{ seq, typ string }{{"2", "step.enter"}, {"3", "playbook.completed"}} {
		lines := strings.Split(frames[i], "\n")
		require.Len(t, lines, 3, "%q", frames[i])
		require.Equal(t, "id: "+want.seq, lines[0])
		require.Equal(t, "event: "+want.typ, lines[1])
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(lines[2], "data: ")), &ev))
		require.Equal(t, map[string]any{"seq": want.seq, "eventId": "e" + want.seq, "type": want.typ}, ev)
	}

	req.Header.Set("Last-Event-ID", "3")
	resp, err = f.client.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "nothing after the terminal event")

	code, _, body := f.rest(f.keyA, http.MethodGet, "/v1/executions/"+idOther+"/events:watch", "")
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, "NOT_FOUND", detail(body, "google.rpc.ErrorInfo")["reason"])

	// The orchestrator's cap on open watches is a retryable refusal.
	code, hdr, body := f.rest(f.keyA, http.MethodGet, "/v1/executions/"+idBusy+"/events:watch", "")
	require.Equal(t, http.StatusTooManyRequests, code)
	require.Equal(t, "1", hdr.Get("Retry-After"))
	require.Equal(t, "TOO_MANY_WATCHES", detail(body, "google.rpc.ErrorInfo")["reason"])
	s, err = f.executions(f.keyA).WatchExecution(ctx, &apiv1.WatchExecutionRequest{ExecutionId: idBusy})
	require.NoError(t, err)
	_, err = s.Recv()
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	d, ok := retryDelay(err)
	require.True(t, ok)
	require.Equal(t, time.Second, d)

	// A client that leaves an SSE watch ends the orchestrator's watch.
	wctx, cancel := context.WithCancel(ctx)
	req, err = http.NewRequestWithContext(wctx, http.MethodGet, f.http+"/v1/executions/"+idHeld+"/events:watch", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+f.keyB)
	resp, err = f.client.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "headers come as soon as the watch is established")
	require.Equal(t, "tenant-b", <-f.be.waiting)
	cancel()
	_ = resp.Body.Close()
	require.Equal(t, "tenant-b", <-f.be.left)
}
