package mesh_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// headerEcho is a server that, as a careless or hostile API would, answers with the
// request's headers and query, the credential of its Authorization header in encoded forms,
// a JSON document as text (so the JSON-escaped form shows), and ?pad=N bytes of padding.
func headerEcho(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		_, cred, _ := strings.Cut(auth, " ")
		embedded, _ := json.Marshal(map[string]string{"authorization": auth})
		pad, _ := strconv.Atoi(r.URL.Query().Get("pad"))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"headers":  r.Header,
			"query":    r.URL.RawQuery,
			"forms":    map[string]string{"b64": base64.StdEncoding.EncodeToString([]byte(cred)), "query": url.QueryEscape(cred), "path": url.PathEscape(cred)},
			"embedded": string(embedded),
			"pad":      strings.Repeat("p", pad),
		})
	}))
	t.Cleanup(srv.Close)
	require.True(t, strings.HasPrefix(srv.URL, "http://127.0.0.1:"), srv.URL)
	return srv
}

// secretForms returns a secret as it may travel: raw, base64 (both alphabets, padded or
// not), URL-escaped (query and path) and JSON-escaped.
func secretForms(secrets ...string) []string {
	var out []string
	for _, s := range secrets {
		j, _ := json.Marshal(s)
		out = append(out, s, string(j[1:len(j)-1]), url.QueryEscape(s), url.PathEscape(s),
			base64.StdEncoding.EncodeToString([]byte(s)), base64.RawStdEncoding.EncodeToString([]byte(s)),
			base64.URLEncoding.EncodeToString([]byte(s)), base64.RawURLEncoding.EncodeToString([]byte(s)))
	}
	return out
}

// requireClean fails when any of forms occurs in b.
func requireClean(t *testing.T, where string, b []byte, forms []string) {
	t.Helper()
	for _, f := range forms {
		require.False(t, bytes.Contains(b, []byte(f)), "%s holds a secret in the form %q", where, f)
	}
}

const echoSecrets = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: echo-secrets, path: tests/echo-secrets}
workload: {api: ""}
workflow:
  - step: start
    tool:
      kind: http
      url: "{{ workload.api }}/small?x=1"
      auth: tok_sentinel
      spec:
        policy:
          rules:
            - else:
                then:
                  do: continue
                  set: {ctx.seen: "{{ output.data.body.headers.Authorization[0] }}"}
    next: [{step: basic}]
  - step: basic
    tool: {kind: http, url: "{{ workload.api }}/basic", auth: basic_sentinel}
    next: [{step: big}]
  - step: big
    tool: {kind: http, url: "{{ workload.api }}/big?pad=70000", auth: tok_sentinel}
    next: [{step: end}]
  - step: end
    tool:
      kind: noop
      result:
        small: "{{ start.body.headers.Authorization[0] }}"
        basic: "{{ basic.body.headers.Authorization[0] }}"
        big: "{{ big.body.headers.Authorization[0] }}"
        big_b64: "{{ big.body.forms.b64 }}"
        seen: "{{ ctx.seen }}"
`

const echoSecretsFail = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: echo-secrets-fail, path: tests/echo-secrets-fail}
workload: {api: ""}
workflow:
  - step: start
    tool:
      - name: fetch
        kind: http
        url: "{{ workload.api }}/again"
        auth: tok_sentinel
      - name: boom
        kind: python
        input: {auth: "{{ fetch.body.headers.Authorization[0] }}"}
        code: |
          raise ValueError("the server said " + auth)
`

// TestResolvedSecretsNeverLeaveTheWorker stores a token and a basic credential whose
// secrets are a unique sentinel, and runs http steps with auth: against a server that
// echoes the request headers back, in a small result, in one padded past the inline budget
// (stored by reference), in a policy's ctx write and in an error. The sentinel, raw or
// encoded, is then nowhere: not in the execution, its events (REST and gRPC), the stored
// result, any Postgres table, any NATS stream, nor the logs; *** is where the header was,
// and the worker counted what it masked.
func TestResolvedSecretsNeverLeaveTheWorker(t *testing.T) {
	logs := &lockedBuffer{}
	m := startAuthMesh(t, mesh.Config{Log: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	c := newClient(t, m, m.AdminKey)
	ctx := context.Background()
	echo := headerEcho(t)

	nonce := make([]byte, 8)
	_, err := rand.Read(nonce)
	require.NoError(t, err)
	// '/', '+', '&' and '=' make the escaped forms differ from the raw one.
	token := "SNTL" + hex.EncodeToString(nonce) + "/t+k&=v"
	password := "SNTLpw" + hex.EncodeToString(nonce) + "/&+"
	forms := secretForms(token, password, "probe:"+password)
	c.wantREST(http.StatusOK, http.MethodPost, "/v1/credentials", map[string]any{"name": "tok_sentinel", "type": "token", "data": map[string]any{"token": token}})
	c.wantREST(http.StatusOK, http.MethodPost, "/v1/credentials", map[string]any{"name": "basic_sentinel", "type": "basic", "data": map[string]any{"username": "probe", "password": password}})

	run := func(content string) *apiv1.Execution {
		t.Helper()
		reg, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: content})
		require.NoError(t, err)
		code, out, _ := c.rest(http.MethodPost, "/v1/executions", map[string]any{"path": reg.GetPlaybook().GetPath(), "workload": map[string]any{"api": echo.URL}})
		require.Equal(t, http.StatusOK, code, "%v", out)
		id, _ := out["executionId"].(string)
		require.NotEmpty(t, id, "%v", out)
		done, err := c.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(60 * time.Second)})
		require.NoError(t, err)
		return done.GetExecution()
	}
	x := run(echoSecrets)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
	failed := run(echoSecretsFail)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, failed.GetStatus())

	// The tool's result held the header: each is masked, and later steps see the mask.
	require.Equal(t, map[string]any{"small": "Bearer ***", "basic": "Basic ***", "big": "Bearer ***", "big_b64": "***", "seen": "Bearer ***"},
		x.GetResult().GetStructValue().AsMap())
	small := x.GetSteps()["start"].GetResult().GetStructValue().AsMap()
	body, _ := small["body"].(map[string]any)
	require.Equal(t, map[string]any{"b64": "***", "query": "***", "path": "***"}, body["forms"])
	require.Equal(t, `{"authorization":"Bearer ***"}`, body["embedded"])
	require.Contains(t, failed.GetError().GetMessage(), "the server said Bearer ***")
	ref := x.GetSteps()["big"].GetResultRef()
	require.NotNil(t, ref, "the padded result travels by reference")
	require.Greater(t, ref.GetSize(), int64(64<<10))

	// The execution and its events, over gRPC and REST.
	for _, e := range []*apiv1.Execution{x, failed} {
		b, err := protojson.Marshal(e)
		require.NoError(t, err)
		requireClean(t, "gRPC execution "+e.GetExecutionId(), b, forms)
		evs, err := c.exe.ListExecutionEvents(ctx, &apiv1.ListExecutionEventsRequest{ExecutionId: e.GetExecutionId(), PageSize: 1000})
		require.NoError(t, err)
		require.NotEmpty(t, evs.GetEvents())
		b, err = protojson.Marshal(evs)
		require.NoError(t, err)
		requireClean(t, "gRPC events", b, forms)
		for _, path := range []string{"/v1/executions/" + e.GetExecutionId(), "/v1/executions/" + e.GetExecutionId() + "/events?page_size=1000"} {
			requireClean(t, "REST "+path, restBody(t, m, path), forms)
		}
	}
	b := restBody(t, m, "/v1/executions/"+failed.GetExecutionId()+"/events?page_size=1000")
	require.Contains(t, string(b), "the server said Bearer ***", "the error is published, masked")

	// The stored result, through the gateway: masked where the header was.
	stored := restBody(t, m, "/v1/results/"+ref.GetUri()[strings.LastIndex(ref.GetUri(), "/")+1:])
	requireClean(t, "GET /v1/results", stored, forms)
	require.Contains(t, string(stored), "Bearer ***")
	require.Contains(t, string(stored), strings.Repeat("p", 1000), "the whole padded result")

	// Every table, read directly: the event log, the resultstore's rows and chunks, the rest.
	pg, err := pgx.Connect(ctx, m.PostgresURL)
	require.NoError(t, err)
	defer func() { _ = pg.Close(ctx) }()
	rows, err := pg.Query(ctx, `SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = 'noetl'`)
	require.NoError(t, err)
	type column struct{ table, name, typ string }
	var cols []column
	for rows.Next() {
		var col column
		require.NoError(t, rows.Scan(&col.table, &col.name, &col.typ))
		cols = append(cols, col)
	}
	require.NoError(t, rows.Err())
	tables := map[string]bool{}
	for _, col := range cols {
		tables[col.table] = true
	}
	for _, want := range []string{"event", "result", "result_chunk"} {
		require.True(t, tables[want], "table noetl.%s", want)
	}
	var chunks int
	require.NoError(t, pg.QueryRow(ctx, `SELECT count(*) FROM noetl.result_chunk WHERE result_id = $1`, ref.GetUri()[strings.LastIndex(ref.GetUri(), "/")+1:]).Scan(&chunks))
	require.Positive(t, chunks, "the stored result's chunks")
	for _, col := range cols {
		expr := fmt.Sprintf(`position($1::bytea IN convert_to(%q::text, 'UTF8'))`, col.name)
		if col.typ == "bytea" {
			expr = fmt.Sprintf(`position($1::bytea IN %q)`, col.name)
		}
		for _, f := range forms {
			var n int
			require.NoError(t, pg.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM noetl.%q WHERE %s > 0`, col.table, expr), []byte(f)).Scan(&n))
			require.Zero(t, n, "noetl.%s.%s holds a secret in the form %q", col.table, col.name, f)
		}
	}

	// Every NATS stream, read with a JetStream consumer (the work-queue stream of commands
	// admits no second consumer: its remaining messages are read by sequence).
	nc, err := nats.Connect(m.NATSURL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	for _, name := range []string{"NOETL_EVENTS", "NOETL_COMMITTED"} {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		require.Positive(t, info.State.Msgs, name)
		cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		require.NoError(t, err)
		var read uint64
		for read < info.State.LastSeq {
			batch, err := cons.Fetch(256, jetstream.FetchMaxWait(5*time.Second))
			require.NoError(t, err)
			got := 0
			for msg := range batch.Messages() {
				got++
				meta, err := msg.Metadata()
				require.NoError(t, err)
				read = meta.Sequence.Stream
				requireClean(t, fmt.Sprintf("%s message %d", name, read), msg.Data(), forms)
			}
			require.NoError(t, batch.Error())
			require.Positive(t, got, "%s: stream ends at %d, read to %d", name, info.State.LastSeq, read)
		}
	}
	s, err := js.Stream(ctx, "NOETL_COMMANDS")
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		if msg, err := s.GetMsg(ctx, seq); err == nil { // acknowledged commands are gone
			requireClean(t, fmt.Sprintf("NOETL_COMMANDS message %d", seq), msg.Data, forms)
		}
	}

	// The logs, and the count of what was masked.
	requireClean(t, "the logs", []byte(logs.String()), forms)
	hc := &http.Client{Timeout: 5 * time.Second}
	require.GreaterOrEqual(t, metricValue(t, hc, "http://"+m.AdminAddrs["worker"], "noetl_worker_secrets_scrubbed_total", `pool="shared"`), float64(8),
		"at least the headers of four calls, their encoded forms and the error")
}

// restBody GETs a gateway path with the admin key and returns the body of a 200.
func restBody(t *testing.T, m *mesh.Mesh, path string) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+m.HTTPAddr+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+m.AdminKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s", path, b)
	return b
}
