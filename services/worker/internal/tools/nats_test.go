package tools

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/testkit"
)

// natsTool is a nats tool that may reach loopback, whose credential "bus" points at url.
func natsTool(t *testing.T, url string) *NATS {
	t.Helper()
	tool := &NATS{Egress: EgressLoopback, Resolve: func(_ context.Context, name string) (string, map[string]any, error) {
		if name != "bus" {
			return "", nil, &Error{Msg: `credential "` + name + `" not found`}
		}
		return "nats", map[string]any{"url": url}, nil
	}}
	t.Cleanup(tool.Close)
	return tool
}

// natsRun runs one operation with auth: bus and returns its result as a map.
func natsRun(t *testing.T, tool *NATS, cfg map[string]any) map[string]any {
	t.Helper()
	if _, ok := cfg["auth"]; !ok {
		cfg["auth"] = "bus"
	}
	res, err := tool.Run(context.Background(), &Call{Kind: "nats", Config: cfg})
	require.NoError(t, err, "%v", cfg)
	m, ok := res.(map[string]any)
	require.True(t, ok, "%T", res)
	return m
}

func TestNATSKeyValueRoundTrip(t *testing.T) {
	t.Parallel()
	tool := natsTool(t, testkit.StartNATS(t))
	put := natsRun(t, tool, map[string]any{"operation": "kv_put", "bucket": "orders", "key": "o1", "value": "pending", "ttl": 3600})
	require.EqualValues(t, 1, put["revision"])
	natsRun(t, tool, map[string]any{"operation": "kv_put", "bucket": "orders", "key": "o2", "value": map[string]any{"total": 12.5}})

	got := natsRun(t, tool, map[string]any{"operation": "kv_get", "bucket": "orders", "key": "o1"})
	require.Equal(t, true, got["found"])
	require.Equal(t, "pending", got["value"])
	got = natsRun(t, tool, map[string]any{"operation": "kv_get", "bucket": "orders", "key": "o2", "encoding": "json"})
	require.Equal(t, map[string]any{"total": 12.5}, got["value"])

	keys := natsRun(t, tool, map[string]any{"operation": "kv_keys", "bucket": "orders"})
	require.Equal(t, []any{"o1", "o2"}, keys["keys"])

	natsRun(t, tool, map[string]any{"operation": "kv_delete", "bucket": "orders", "key": "o1"})
	got = natsRun(t, tool, map[string]any{"operation": "kv_get", "bucket": "orders", "key": "o1"})
	require.Equal(t, false, got["found"])
	require.Nil(t, got["value"])
	natsRun(t, tool, map[string]any{"operation": "kv_purge", "bucket": "orders", "key": "o2"})
	keys = natsRun(t, tool, map[string]any{"operation": "kv_keys", "bucket": "orders"})
	require.Equal(t, []any{}, keys["keys"])

	_, err := tool.Run(context.Background(), &Call{Config: map[string]any{"operation": "kv_get", "bucket": "missing", "key": "k", "auth": "bus"}})
	require.ErrorContains(t, err, "nats: kv_get: ")
	require.Equal(t, 1, tool.Pooled(), "one connection served every call")

	// Each operation writes one diagnostic line to the step's log.
	log := NewLog(1 << 10)
	_, err = tool.Run(context.Background(), &Call{Log: log, Config: map[string]any{"operation": "kv_keys", "bucket": "orders", "auth": "bus"}})
	require.NoError(t, err)
	streams := log.Streams()
	require.Len(t, streams, 1)
	require.Contains(t, string(streams[0].Tail), "kv_keys bucket=orders on nats://127.0.0.1:")
	require.Contains(t, string(streams[0].Tail), ": ok in ")
}

func TestNATSObjectRoundTrip(t *testing.T) {
	t.Parallel()
	tool := natsTool(t, testkit.StartNATS(t))
	put := natsRun(t, tool, map[string]any{"operation": "object_put", "bucket": "files", "name": "report.txt", "data": "hello, objects"})
	require.EqualValues(t, 14, put["size"])
	natsRun(t, tool, map[string]any{"operation": "object_put", "bucket": "files", "name": "blob.bin", "data": "AP8Q", "encoding": "base64"})

	info := natsRun(t, tool, map[string]any{"operation": "object_info", "bucket": "files", "name": "report.txt"})
	require.EqualValues(t, 14, info["size"])
	require.Equal(t, put["digest"], info["digest"])

	got := natsRun(t, tool, map[string]any{"operation": "object_get", "bucket": "files", "name": "report.txt"})
	require.Equal(t, "hello, objects", got["data"])
	require.Equal(t, "text", got["encoding"])
	got = natsRun(t, tool, map[string]any{"operation": "object_get", "bucket": "files", "name": "blob.bin"})
	require.Equal(t, "AP8Q", got["data"], "bytes that are not UTF-8 come back as base64")
	require.Equal(t, "base64", got["encoding"])

	list := natsRun(t, tool, map[string]any{"operation": "object_list", "bucket": "files"})
	require.Len(t, list["objects"], 2)

	natsRun(t, tool, map[string]any{"operation": "object_delete", "bucket": "files", "name": "blob.bin"})
	list = natsRun(t, tool, map[string]any{"operation": "object_list", "bucket": "files"})
	require.Len(t, list["objects"], 1)

	tool.MaxValueBytes = 4
	_, err := tool.Run(context.Background(), &Call{Config: map[string]any{"operation": "object_get", "bucket": "files", "name": "report.txt", "auth": "bus"}})
	require.ErrorContains(t, err, "over the 4 bytes cap")
}

func TestNATSJetStream(t *testing.T) {
	t.Parallel()
	url := testkit.StartNATS(t)
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	require.NoError(t, err)

	tool := natsTool(t, url)
	pub := natsRun(t, tool, map[string]any{"operation": "js_publish", "subject": "orders.created", "data": map[string]any{"id": 1}, "headers": map[string]any{"X-Source": "test"}, "msg_id": "m1"})
	require.Equal(t, "ORDERS", pub["stream"])
	require.EqualValues(t, 1, pub["seq"])
	dup := natsRun(t, tool, map[string]any{"operation": "js_publish", "subject": "orders.created", "data": map[string]any{"id": 1}, "msg_id": "m1"})
	require.Equal(t, true, dup["duplicate"])
	natsRun(t, tool, map[string]any{"operation": "js_publish", "subject": "orders.paid", "data": "o-2"})

	msg := natsRun(t, tool, map[string]any{"operation": "js_get_msg", "stream": "ORDERS", "seq": 1, "encoding": "json"})
	require.Equal(t, map[string]any{"id": float64(1)}, msg["data"])
	require.Equal(t, "test", msg["headers"].(map[string]any)["X-Source"])
	last := natsRun(t, tool, map[string]any{"operation": "js_get_msg", "stream": "ORDERS", "last": true, "subject": "orders.paid"})
	require.Equal(t, "o-2", last["data"])
	require.EqualValues(t, 2, last["seq"])

	info := natsRun(t, tool, map[string]any{"operation": "js_stream_info", "stream": "ORDERS"})
	require.EqualValues(t, 2, info["messages"])
	require.Equal(t, []any{"orders.>"}, info["subjects"])

	// A durable consumer takes what there is, up to batch, and acks it: the next call
	// finds nothing once its bounded wait passes.
	got := natsRun(t, tool, map[string]any{"operation": "js_consume", "stream": "ORDERS", "consumer": "billing", "batch": 5, "timeout_ms": 200})
	require.EqualValues(t, 2, got["count"])
	again := natsRun(t, tool, map[string]any{"operation": "js_consume", "stream": "ORDERS", "consumer": "billing", "batch": 5, "timeout_ms": 50})
	require.EqualValues(t, 0, again["count"])
	// An ephemeral one with a filter reads from the start and is removed afterwards.
	paid := natsRun(t, tool, map[string]any{"operation": "js_consume", "stream": "ORDERS", "subject": "orders.paid", "batch": 1, "timeout_ms": 200})
	require.EqualValues(t, 1, paid["count"])
	s, err := js.Stream(ctx, "ORDERS")
	require.NoError(t, err)
	si, err := s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, si.State.Consumers, "only the durable consumer remains")

	for _, tc := range []struct {
		cfg  map[string]any
		want string
	}{
		{map[string]any{"operation": "js_consume", "stream": "ORDERS", "batch": 5000}, "tool.batch must be 1 to 1000"},
		{map[string]any{"operation": "js_consume", "stream": "ORDERS", "timeout_ms": 120000}, "tool.timeout_ms must be 1 to 60000"},
		{map[string]any{"operation": "js_get_msg", "stream": "ORDERS"}, "tool.seq"},
		{map[string]any{"operation": "kv_get", "bucket": "b"}, "kv_get: tool.key is required"},
		{map[string]any{"operation": "nope"}, `unknown operation "nope"`},
		{map[string]any{}, "tool.operation is required"},
		{map[string]any{"operation": "js_publish", "subject": "orders.x", "encoding": "hex"}, "tool.encoding must be text, json or base64"},
	} {
		tc.cfg["auth"] = "bus"
		_, err := tool.Run(ctx, &Call{Config: tc.cfg})
		require.ErrorContains(t, err, tc.want)
	}
}

// The platform's streams, buckets and subjects are out of reach, before anything is sent.
func TestNATSRefusesThePlatformsNames(t *testing.T) {
	t.Parallel()
	url := testkit.StartNATS(t)
	nc, js, err := natsx.Connect(url, "test")
	require.NoError(t, err)
	defer nc.Close()
	ctx := context.Background()
	require.NoError(t, natsx.EnsureStreams(ctx, js, natsx.StreamConfig{Replicas: 1}))
	tool := natsTool(t, url)
	for _, cfg := range []map[string]any{
		{"operation": "js_stream_info", "stream": natsx.StreamCommands},
		{"operation": "js_get_msg", "stream": natsx.StreamEvents, "seq": 1},
		{"operation": "js_consume", "stream": natsx.StreamCommitted},
		{"operation": "js_publish", "subject": natsx.CommandSubject("shared", "x1", "c1", 16), "data": "forged"},
		{"operation": "js_publish", "subject": "$JS.API.STREAM.DELETE.NOETL_EVENTS"},
		{"operation": "kv_put", "bucket": "noetl_sessions", "key": "k", "value": "v"},
		{"operation": "object_get", "bucket": "NOETL_blobs", "name": "x"},
		{"operation": "js_stream_info", "stream": "KV_noetl_sessions"},
		{"operation": "js_consume", "stream": "ORDERS", "consumer": "noetl-trigger-t1"},
	} {
		cfg["auth"] = "bus"
		_, err := tool.Run(ctx, &Call{Config: cfg})
		require.ErrorContains(t, err, "is reserved for the platform; a playbook cannot reach it", "%v", cfg)
	}
	s, err := js.Stream(ctx, natsx.StreamCommands)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "nothing was published on the commands stream")
	require.Zero(t, tool.Pooled(), "a refused call does not even connect")
}

// Credentials authenticate the connection; connections are pooled per server and
// credentials, within the bound, and closed with the tool.
func TestNATSAuthAndPool(t *testing.T) {
	t.Parallel()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), Authorization: "s3cret-token", NoSigs: true, NoLog: true})
	require.NoError(t, err)
	srv.Start()
	t.Cleanup(srv.Shutdown)
	require.True(t, srv.ReadyForConnections(10*time.Second))
	url := srv.ClientURL()
	creds := map[string]map[string]any{
		"good":  {"url": url, "token": "s3cret-token"},
		"bad":   {"url": url, "token": "wrong"},
		"other": {"url": url + "," + url, "token": "s3cret-token"}, // another server list
	}
	tool := &NATS{Egress: EgressLoopback, MaxConns: 1, Resolve: func(_ context.Context, name string) (string, map[string]any, error) {
		return "nats", creds[name], nil
	}}
	run := func(auth string) error {
		_, err := tool.Run(context.Background(), &Call{Config: map[string]any{"operation": "kv_put", "bucket": "b", "key": "k", "value": "v", "auth": auth}})
		return err
	}
	require.NoError(t, run("good"))
	require.NoError(t, run("good"))
	require.Equal(t, 1, tool.Pooled())
	err = run("bad")
	require.ErrorContains(t, err, "nats: connect to "+url)
	require.ErrorContains(t, err, "uthorization")
	require.NotContains(t, err.Error(), "wrong")
	require.NoError(t, run("other"), "a second server address evicts the idle connection")
	require.Equal(t, 1, tool.Pooled())

	tool.Close()
	require.Zero(t, tool.Pooled())
	require.ErrorIs(t, run("good"), ErrNATSClosed)
}

// The connection passes the worker's egress policy: with public only, a loopback server
// is refused.
func TestNATSHonoursEgress(t *testing.T) {
	t.Parallel()
	tool := natsTool(t, testkit.StartNATS(t))
	tool.Egress = EgressPublic
	_, err := tool.Run(context.Background(), &Call{Config: map[string]any{"operation": "kv_keys", "bucket": "b", "auth": "bus"}})
	require.ErrorContains(t, err, "nats: connect")
	require.ErrorContains(t, err, "loopback")
}

// js_consume never waits past the operation's own bound.
func TestNATSConsumeWaitIsBoundedByTheTimeout(t *testing.T) {
	t.Parallel()
	url := testkit.StartNATS(t)
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "EMPTY", Subjects: []string{"empty.>"}})
	require.NoError(t, err)
	tool := natsTool(t, url)
	got := natsRun(t, tool, map[string]any{"operation": "js_consume", "stream": "EMPTY", "timeout_ms": 60000, "timeout_seconds": 1.5})
	require.EqualValues(t, 0, got["count"])
}

// The connection's secrets are registered with the command's scrubber, the creds' JWT and
// seed included, whatever the credential calls its fields.
func TestNATSRegistersTheConnectionsSecrets(t *testing.T) {
	t.Parallel()
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err := user.Seed()
	require.NoError(t, err)
	creds := "-----BEGIN NATS USER JWT-----\neyJhbGciOiJlZDI1NTE5In0.e30.c2ln\n------END NATS USER JWT------\n\n" +
		"-----BEGIN USER NKEY SEED-----\n" + string(seed) + "\n------END USER NKEY SEED------\n"
	var got []string
	tool := &NATS{Egress: EgressLoopback,
		Resolve: func(context.Context, string) (string, map[string]any, error) {
			return "nats", map[string]any{"url": "nats://127.0.0.1:1", "creds": creds}, nil
		},
		Register: func(_ context.Context, v string) { got = append(got, v) }}
	defer tool.Close()
	_, err = tool.Run(context.Background(), &Call{Config: map[string]any{"operation": "kv_keys", "bucket": "b", "auth": "bus", "timeout_seconds": 5}})
	require.Error(t, err, "nothing listens there")
	require.Contains(t, got, creds)
	require.Contains(t, got, "eyJhbGciOiJlZDI1NTE5In0.e30.c2ln")
	require.Contains(t, got, string(seed))
}
