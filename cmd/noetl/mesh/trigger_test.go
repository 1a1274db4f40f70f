package mesh_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/testkit"
	"github.com/noetl/noetl/services/orchestrator"
)

// triggerEcho returns the workload values a trigger merges: the trigger's base and the
// delivery's n.
const triggerEcho = `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: trigger-echo, path: tests/trigger-echo}
workload: {base: playbook, n: none}
workflow:
  - step: start
    tool: {kind: noop, result: {base: "{{ workload.base }}", n: "{{ workload.n }}"}}
`

// hook posts body to a trigger's webhook with headers and returns the status and the
// decoded answer.
func hook(t *testing.T, m *mesh.Mesh, name, query string, body []byte, headers map[string]string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+m.HTTPAddr+"/v1/triggers/"+name+query, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := map[string]any{}
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

func sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	_, _ = m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// executionsOf lists the executions labelled trigger=name.
func executionsOf(t *testing.T, c *client, name string) []*apiv1.Execution {
	t.Helper()
	resp, err := c.exe.ListExecutions(context.Background(), &apiv1.ListExecutionsRequest{Labels: map[string]string{"trigger": name}, PageSize: 100})
	require.NoError(t, err)
	return resp.GetExecutions()
}

// A webhook trigger: a call signed with the secret shown at creation starts an execution
// whose workload is the body merged over the trigger's (and the playbook's); a redelivery
// (same X-Delivery-Id) starts nothing and answers the same execution; a bad signature is
// 401 and tells nothing; an API key with the operator role fires without a signature, a
// viewer's does not; bad bodies are 4xx naming the body; an unknown trigger is 404.
func TestWebhookTrigger(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	ctx := context.Background()
	admin := newClient(t, m, m.AdminKey)
	_, err := admin.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: triggerEcho})
	require.NoError(t, err)

	created := admin.wantREST(http.StatusOK, http.MethodPost, "/v1/triggers", map[string]any{"name": "hook", "path": "tests/trigger-echo", "workload": map[string]any{"base": "trigger"}, "webhook": map[string]any{}})
	secret, _ := created["secret"].(string)
	require.GreaterOrEqual(t, len(secret), 32, "%v", created)
	tr, _ := created["trigger"].(map[string]any)
	require.Equal(t, "hook", tr["name"])
	require.Contains(t, tr, "webhook")
	got := admin.wantREST(http.StatusOK, http.MethodGet, "/v1/triggers/hook", nil)
	require.NotContains(t, fmt.Sprint(got), secret, "the secret is shown once")

	body := []byte(`{"n": 7}`)
	code, out := hook(t, m, "hook", "", body, map[string]string{"X-Noetl-Signature": sign(secret, body), "X-Delivery-Id": "d-1"})
	require.Equal(t, http.StatusOK, code, "%v", out)
	first, _ := out["executionId"].(string)
	require.NotEmpty(t, first)
	x := waitDone(t, admin, first)
	require.Equal(t, map[string]any{"base": "trigger", "n": float64(7)}, x.GetResult().AsInterface(), "the body merged over the trigger's workload")
	require.Equal(t, "hook", x.GetLabels()["trigger"])

	// Redelivered (GitHub's header spellings): the same execution, nothing new.
	code, out = hook(t, m, "hook", "?tenant=default", body, map[string]string{"X-Hub-Signature-256": sign(secret, body), "X-GitHub-Delivery": "d-1"})
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, first, out["executionId"])
	require.Len(t, executionsOf(t, admin, "hook"), 1)

	// A bad signature: 401, naming neither the secret nor the expected signature.
	for _, sig := range []string{sign("not-the-secret", body), "sha256=zz", "md5=00", sign(secret, []byte(`{"n": 8}`))} {
		code, out = hook(t, m, "hook", "", body, map[string]string{"X-Noetl-Signature": sig, "X-Delivery-Id": "d-bad"})
		require.Equal(t, http.StatusUnauthorized, code, "%s: %v", sig, out)
		require.Equal(t, "signature: does not verify", out["message"], "%v", out)
		require.NotContains(t, fmt.Sprint(out), sign(secret, body)[7:])
	}
	// Neither signature nor credentials.
	code, out = hook(t, m, "hook", "", body, map[string]string{"X-Delivery-Id": "d-2"})
	require.Equal(t, http.StatusUnauthorized, code, "%v", out)
	require.Contains(t, fmt.Sprint(out["message"]), "X-Noetl-Signature")
	require.Len(t, executionsOf(t, admin, "hook"), 1, "no refused call started anything")

	// An API key of an operator fires without a signature; a viewer's is refused.
	opKey, _ := admin.createKey(map[string]any{"roles": []string{"operator"}})
	code, out = hook(t, m, "hook", "", []byte(`{"n": 9}`), map[string]string{"Authorization": "Bearer " + opKey, "X-Delivery-Id": "d-3"})
	require.Equal(t, http.StatusOK, code, "%v", out)
	second, _ := out["executionId"].(string)
	require.NotEqual(t, first, second)
	require.Equal(t, map[string]any{"base": "trigger", "n": float64(9)}, waitDone(t, admin, second).GetResult().AsInterface())
	viewerKey, _ := admin.createKey(map[string]any{"roles": []string{"viewer"}})
	code, out = hook(t, m, "hook", "", body, map[string]string{"X-Api-Key": viewerKey})
	require.Equal(t, http.StatusForbidden, code, "%v", out)
	// And over gRPC.
	fired, err := apiv1.NewTriggerServiceClient(admin.conn).FireTrigger(ctx, &apiv1.FireTriggerRequest{Name: "hook", DeliveryId: "d-3"})
	require.NoError(t, err)
	require.Equal(t, second, fired.GetExecutionId(), "the same delivery id over gRPC is the same delivery")

	// Bad bodies, each named.
	for _, tc := range []struct {
		body []byte
		code int
		want string
	}{
		{nil, http.StatusBadRequest, "body: required"},
		{[]byte("  "), http.StatusBadRequest, "body: required"},
		{[]byte("not json"), http.StatusBadRequest, "body: not a JSON object"},
		{[]byte("[1, 2]"), http.StatusBadRequest, "body: not a JSON object"},
		{[]byte(`{"n": "` + strings.Repeat("x", domain.MaxWorkloadBytes) + `"}`), http.StatusRequestEntityTooLarge, "body: larger than the limit"},
	} {
		code, out = hook(t, m, "hook", "", tc.body, map[string]string{"X-Noetl-Signature": sign(secret, tc.body)})
		require.Equal(t, tc.code, code, "%q: %v", abbreviate(tc.body), out)
		require.Contains(t, fmt.Sprint(out["message"]), tc.want)
	}
	// Unknown triggers, or a known one in another tenant: 404.
	code, out = hook(t, m, "nope", "", body, map[string]string{"X-Noetl-Signature": sign(secret, body)})
	require.Equal(t, http.StatusNotFound, code, "%v", out)
	code, out = hook(t, m, "hook", "?tenant=acme", body, map[string]string{"X-Noetl-Signature": sign(secret, body)})
	require.Equal(t, http.StatusNotFound, code, "%v", out)
	require.Len(t, executionsOf(t, admin, "hook"), 2)

	// Listing, refusals of creation, deletion.
	list := admin.wantREST(http.StatusOK, http.MethodGet, "/v1/triggers", nil)
	require.Len(t, list["triggers"], 1, "%v", list)
	viewer := newClient(t, m, viewerKey)
	viewer.wantREST(http.StatusOK, http.MethodGet, "/v1/triggers", nil)
	viewer.wantREST(http.StatusForbidden, http.MethodPost, "/v1/triggers", map[string]any{"name": "v", "path": "tests/trigger-echo", "webhook": map[string]any{}})
	out = admin.wantREST(http.StatusBadRequest, http.MethodPost, "/v1/triggers", map[string]any{"name": "Bad Name", "path": "tests/trigger-echo", "webhook": map[string]any{}})
	require.Contains(t, fmt.Sprint(out["message"]), "name:")
	out = admin.wantREST(http.StatusBadRequest, http.MethodPost, "/v1/triggers", map[string]any{"name": "nosource", "path": "tests/trigger-echo"})
	require.Contains(t, fmt.Sprint(out["message"]), "source:")
	admin.wantREST(http.StatusConflict, http.MethodPost, "/v1/triggers", map[string]any{"name": "hook", "path": "tests/trigger-echo", "webhook": map[string]any{}})
	admin.wantREST(http.StatusOK, http.MethodDelete, "/v1/triggers/hook", nil)
	admin.wantREST(http.StatusNotFound, http.MethodDelete, "/v1/triggers/hook", nil)
	code, _ = hook(t, m, "hook", "", body, map[string]string{"X-Noetl-Signature": sign(secret, body)})
	require.Equal(t, http.StatusNotFound, code, "a deleted trigger fires no more")
}

func abbreviate(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// A NATS trigger consumed by two orchestrators (the mesh's and a second replica): each
// message starts one execution, a second message with the same Nats-Msg-Id (published
// after the stream's own duplicate window) starts nothing new, a message that is not a
// JSON object starts nothing; platform subjects and streams are refused.
func TestNATSTrigger(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	ctx := context.Background()
	admin := newClient(t, m, m.AdminKey)
	_, err := admin.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: triggerEcho})
	require.NoError(t, err)
	triggers := apiv1.NewTriggerServiceClient(admin.conn)

	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	t.Cleanup(func() { cancel(); <-done })
	lis := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		return l
	}
	go func() {
		done <- orchestrator.Run(rctx, orchestrator.Config{PostgresURL: m.PostgresURLs.Orchestrator, InternalSecret: m.InternalSecret, NATSURL: m.NATSURL,
			StatebuilderAddr: m.StatebuilderAddr, GRPCListener: lis(), AdminListener: lis()}, slog.New(slog.DiscardHandler))
	}()

	nc, err := nats.Connect(m.NATSURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	// The smallest duplicate window JetStream allows, so that the test can put a second
	// message with the same id in the stream: what a redelivery after a crash looks like to
	// the trigger.
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Duplicates: 100 * time.Millisecond})
	require.NoError(t, err)

	for _, tc := range []struct {
		src  *apiv1.NatsSource
		code codes.Code
		want string
	}{
		{&apiv1.NatsSource{Subject: "noetl.events.>"}, codes.InvalidArgument, "platform subject"},
		{&apiv1.NatsSource{Subject: "$JS.API.>"}, codes.InvalidArgument, "platform subject"},
		{&apiv1.NatsSource{Subject: ">"}, codes.InvalidArgument, "every subject"},
		{&apiv1.NatsSource{Subject: "orders..x"}, codes.InvalidArgument, "not a NATS subject"},
		{&apiv1.NatsSource{Subject: "orders.created", Stream: "NOETL_EVENTS"}, codes.InvalidArgument, "platform stream"},
		{&apiv1.NatsSource{Subject: "nowhere.x"}, codes.FailedPrecondition, "no JetStream stream captures"},
	} {
		_, err := triggers.CreateTrigger(ctx, &apiv1.CreateTriggerRequest{Trigger: &apiv1.Trigger{Name: "bad", Path: "tests/trigger-echo", Source: &apiv1.Trigger_Nats{Nats: tc.src}}})
		require.Equal(t, tc.code, status.Code(err), "%v: %v", tc.src, err)
		require.Contains(t, status.Convert(err).Message(), tc.want)
		require.Contains(t, status.Convert(err).Message(), "nats.")
	}

	created, err := triggers.CreateTrigger(ctx, &apiv1.CreateTriggerRequest{Trigger: &apiv1.Trigger{Name: "orders", Path: "tests/trigger-echo",
		Source: &apiv1.Trigger_Nats{Nats: &apiv1.NatsSource{Subject: "orders.created"}}}})
	require.NoError(t, err)
	require.Equal(t, "ORDERS", created.GetTrigger().GetNats().GetStream(), "the stream that captures the subject")
	require.Empty(t, created.GetSecret())

	publish := func(id, data string) *jetstream.PubAck {
		msg := nats.NewMsg("orders.created")
		msg.Header.Set(jetstream.MsgIDHeader, id)
		msg.Data = []byte(data)
		ack, err := js.PublishMsg(ctx, msg)
		require.NoError(t, err)
		return ack
	}
	require.False(t, publish("m-1", `{"n": 1}`).Duplicate)
	testkit.WaitFor(t, 60*time.Second, func() error {
		if n := len(executionsOf(t, admin, "orders")); n != 1 {
			return fmt.Errorf("%d executions of the trigger, want 1", n)
		}
		return nil
	})
	// The same message id again, once the stream no longer drops it as a duplicate.
	testkit.WaitFor(t, 10*time.Second, func() error {
		if publish("m-1", `{"n": 1}`).Duplicate {
			return fmt.Errorf("still in the stream's duplicate window")
		}
		return nil
	})
	publish("m-bad", `not json`)
	publish("m-2", `{"n": 2}`)
	// Every message handled (acknowledged or terminated), by whichever replica.
	testkit.WaitFor(t, 60*time.Second, func() error {
		c, err := js.Consumer(ctx, "ORDERS", "noetl-trigger-"+created.GetTrigger().GetId())
		if err != nil {
			return err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 || info.AckFloor.Stream < 4 {
			return fmt.Errorf("consumer: %d pending, %d unacknowledged, ack floor %d", info.NumPending, info.NumAckPending, info.AckFloor.Stream)
		}
		return nil
	})
	si, err := stream.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4, si.State.Msgs, "both copies of m-1 are in the stream")
	xs := executionsOf(t, admin, "orders")
	require.Len(t, xs, 2, "m-1 twice starts one execution, m-bad none, m-2 one")
	results := map[string]bool{}
	for _, x := range xs {
		results[fmt.Sprint(waitDone(t, admin, x.GetExecutionId()).GetResult().AsInterface())] = true
	}
	require.Equal(t, map[string]bool{"map[base:playbook n:1]": true, "map[base:playbook n:2]": true}, results)

	got, err := triggers.GetTrigger(ctx, &apiv1.GetTriggerRequest{Name: "orders"})
	require.NoError(t, err)
	require.NotEmpty(t, got.GetTrigger().GetLastExecutionId())
	// A NATS trigger has no webhook.
	_, err = triggers.FireTrigger(ctx, &apiv1.FireTriggerRequest{Name: "orders"})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)

	_, err = triggers.DeleteTrigger(ctx, &apiv1.DeleteTriggerRequest{Name: "orders"})
	require.NoError(t, err)
	_, err = js.Consumer(ctx, "ORDERS", "noetl-trigger-"+created.GetTrigger().GetId())
	require.ErrorIs(t, err, jetstream.ErrConsumerNotFound, "the consumer goes with the trigger")
}
