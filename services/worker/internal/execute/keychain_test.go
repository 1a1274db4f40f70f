package execute

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/services/worker/internal/scrub"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// keychainCommand parses a playbook and builds the command of its start step as decide
// does: the tools' unrendered configs, the workload as the scope, the step's keychain
// declarations.
func keychainCommand(t *testing.T, src, id string, workload map[string]any) *eventv1.Command {
	t.Helper()
	pb, err := playbook.Parse([]byte(src))
	require.NoError(t, err)
	st := pb.Step("start")
	var calls []*eventv1.ToolCall
	for _, tl := range st.Tool {
		cfg, err := json.Marshal(tl.Config)
		require.NoError(t, err)
		calls = append(calls, &eventv1.ToolCall{Kind: tl.Kind, Label: tl.Label, ConfigJson: cfg})
	}
	scope, err := json.Marshal(map[string]any{"workload": workload})
	require.NoError(t, err)
	return &eventv1.Command{CommandId: id, ExecutionId: "x-" + id, Tenant: "acme", Step: "start", PlaybookPath: "kc",
		Tools: calls, ContextJson: scope, KeychainJson: st.Keychain}
}

// keychainWorker is a test worker whose http tool may reach loopback and whose credential
// resolver serves creds (for tenant acme only).
func keychainExecutor(creds map[string]map[string]any) (*Executor, *tools.Keychain) {
	ex := testExecutor()
	resolve := func(ctx context.Context, name string) (string, map[string]any, error) {
		if tenant := tools.TenantOf(ctx); tenant != "acme" {
			return "", nil, &tools.Error{Msg: "credential " + name + ": wrong tenant " + tenant}
		}
		data, ok := creds[name]
		if !ok {
			return "", nil, &tools.Error{Msg: `credential "` + name + `" not found`}
		}
		return "generic", data, nil
	}
	h := &tools.HTTP{Egress: tools.EgressLoopback, Resolve: resolve}
	ex.Tools["http"] = h
	ex.Keychain = &tools.Keychain{Resolve: resolve, Register: scrub.Register, HTTP: h}
	return ex, ex.Keychain
}

// requireAbsent fails when any event, marshalled, holds one of the values.
func requireAbsent(t *testing.T, evs []*eventv1.Event, values ...string) {
	t.Helper()
	for _, ev := range evs {
		b, err := proto.Marshal(ev)
		require.NoError(t, err)
		for _, v := range values {
			require.NotContains(t, string(b), v, "event %s", ev.GetType())
		}
	}
}

// A credential entry's fields render into an http tool's header; the server sees the
// real value, and the step's result and events carry it masked only.
func TestKeychainCredentialInHTTPHeader(t *testing.T) {
	const key = "api-key-SENTINEL-77"
	var seen atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get("X-Api-Key"))
		rw.Header().Set("Content-Type", "application/json")
		if r.Header.Get("X-Api-Key") != key {
			rw.WriteHeader(http.StatusUnauthorized)
		}
		_ = json.NewEncoder(rw).Encode(map[string]any{"echo": r.Header.Get("X-Api-Key")})
	}))
	defer srv.Close()
	ex, _ := keychainExecutor(map[string]map[string]any{"svc_api": {"key": key, "owner": "ops-team"}})
	cmd := keychainCommand(t, `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: kc}
keychain:
  - {name: api, kind: credential, auth: "{{ workload.cred }}"}
workflow:
  - step: start
    tool: {kind: http, url: "{{ workload.url }}", headers: {X-Api-Key: "{{ keychain.api.key }}"}}
`, "c1", map[string]any{"url": srv.URL, "cred": "svc_api"})
	require.NotContains(t, string(cmd.GetKeychainJson()), key, "the command carries declarations, not values")

	evs := ex.Execute(context.Background(), cmd)
	require.Len(t, evs, 1)
	require.Nil(t, evs[0].GetError(), "%v", evs[0].GetError())
	require.Equal(t, key, seen.Load(), "the server got the resolved key")
	var res map[string]any
	require.NoError(t, json.Unmarshal(evs[0].GetResultJson(), &res))
	require.EqualValues(t, 200, res["status_code"])
	require.Equal(t, map[string]any{"echo": "***"}, res["body"])
	requireAbsent(t, evs, key, "ops-team")
}

// An unknown credential fails the step before any tool runs, naming the entry.
func TestKeychainMissingCredentialFailsTheStep(t *testing.T) {
	ex, _ := keychainExecutor(nil)
	cmd := keychainCommand(t, `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: kc}
keychain:
  - {name: api, kind: credential}
workflow:
  - step: start
    tool: {kind: http, url: "http://127.0.0.1:1", headers: {X: "{{ keychain.api.key }}"}}
`, "c1", nil)
	evs := ex.Execute(context.Background(), cmd)
	require.Len(t, evs, 1)
	require.Equal(t, "command.failed", evs[0].GetType())
	require.Contains(t, evs[0].GetError().GetMessage(), `step start: keychain "api": credential "api" not found`)
}

// tokenServer is an OAuth2 token endpoint (POST /token, client credentials) and an API
// (GET /api) that accepts the tokens it issued. It counts token requests.
type tokenServer struct {
	*httptest.Server
	requests atomic.Int32
	ttl      int
	mu       sync.Mutex
	issued   map[string]bool
}

func newTokenServer(t *testing.T, ttl int) *tokenServer {
	ts := &tokenServer{ttl: ttl, issued: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", func(rw http.ResponseWriter, r *http.Request) {
		n := ts.requests.Add(1)
		if r.FormValue("grant_type") != "client_credentials" || r.FormValue("client_id") != "client-1" || r.FormValue("client_secret") != "client-secret-SENTINEL" {
			http.Error(rw, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		tok := "access-SENTINEL-" + strings.Repeat("x", int(n))
		ts.mu.Lock()
		ts.issued[tok] = true
		ts.mu.Unlock()
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": ts.ttl})
	})
	mux.HandleFunc("GET /api", func(rw http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		ts.mu.Lock()
		ok := ts.issued[tok]
		ts.mu.Unlock()
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(map[string]any{"authorized": ok, "token": tok})
	})
	ts.Server = httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}

const oauthPlaybook = `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: kc}
keychain:
  - name: api_token
    kind: oauth2
    endpoint: "{{ workload.base }}/token"
    data:
      client_id: "{{ keychain.client.client_id }}"
      client_secret: "{{ keychain.client.client_secret }}"
  - {name: client, kind: credential, auth: oauth_client}
workflow:
  - step: start
    tool:
      kind: http
      url: "{{ workload.base }}/api"
      headers: {Authorization: "Bearer {{ keychain.api_token.access_token }}"}
`

// An oauth2 entry fetches a token once (its client secret read from a credential entry
// declared after it), and the next commands reuse it until shortly before it expires;
// then one new token is fetched. No token or secret reaches an event.
func TestKeychainOAuth2TokenIsCachedUntilExpiry(t *testing.T) {
	ts := newTokenServer(t, 3600)
	ex, kc := keychainExecutor(map[string]map[string]any{"oauth_client": {"client_id": "client-1", "client_secret": "client-secret-SENTINEL"}})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var clock sync.Mutex
	kc.Now = func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
	run := func(id string) map[string]any {
		t.Helper()
		evs := ex.Execute(context.Background(), keychainCommand(t, oauthPlaybook, id, map[string]any{"base": ts.URL}))
		require.Len(t, evs, 1)
		require.Nil(t, evs[0].GetError(), "%v", evs[0].GetError())
		requireAbsent(t, evs, "access-SENTINEL", "client-secret-SENTINEL")
		var res map[string]any
		require.NoError(t, json.Unmarshal(evs[0].GetResultJson(), &res))
		return res["body"].(map[string]any)
	}
	require.Equal(t, map[string]any{"authorized": true, "token": "***"}, run("c1"))
	require.EqualValues(t, 1, ts.requests.Load())
	require.Equal(t, map[string]any{"authorized": true, "token": "***"}, run("c2"))
	require.EqualValues(t, 1, ts.requests.Load(), "the second command reuses the cached token")

	clock.Lock()
	now = now.Add(3600*time.Second - 59*time.Second) // inside the renewal margin
	clock.Unlock()
	require.Equal(t, map[string]any{"authorized": true, "token": "***"}, run("c3"))
	require.EqualValues(t, 2, ts.requests.Load(), "a token about to expire is fetched anew")
	require.Equal(t, 1, kc.Cached())
}

// A token endpoint's refusal fails the step with its status, and nothing is cached.
func TestKeychainOAuth2RefusedFailsTheStep(t *testing.T) {
	ts := newTokenServer(t, 3600)
	ex, kc := keychainExecutor(map[string]map[string]any{"oauth_client": {"client_id": "client-1", "client_secret": "wrong-secret"}})
	evs := ex.Execute(context.Background(), keychainCommand(t, oauthPlaybook, "c1", map[string]any{"base": ts.URL}))
	require.Equal(t, "command.failed", evs[0].GetType())
	msg := evs[0].GetError().GetMessage()
	require.Contains(t, msg, `keychain "api_token" (oauth2): token endpoint POST `+ts.URL+`/token answered 401`)
	require.NotContains(t, msg, "wrong-secret")
	require.Equal(t, 0, kc.Cached())
}

// The token request goes through the http tool's egress check: with the public policy a
// loopback token endpoint is refused before any packet is sent.
func TestKeychainOAuth2HonoursEgress(t *testing.T) {
	ts := newTokenServer(t, 3600)
	ex, kc := keychainExecutor(map[string]map[string]any{"oauth_client": {"client_id": "client-1", "client_secret": "client-secret-SENTINEL"}})
	kc.HTTP = &tools.HTTP{Egress: tools.EgressPublic}
	evs := ex.Execute(context.Background(), keychainCommand(t, oauthPlaybook, "c1", map[string]any{"base": ts.URL}))
	require.Equal(t, "command.failed", evs[0].GetType())
	require.Contains(t, evs[0].GetError().GetMessage(), "token request")
	require.EqualValues(t, 0, ts.requests.Load())
}
