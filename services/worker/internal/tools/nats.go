package tools

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/playbook"
)

// Defaults and bounds of the nats tool.
const (
	// DefaultNATSTimeout bounds one operation (connecting aside) unless the tool sets
	// timeout_seconds.
	DefaultNATSTimeout = 30 * time.Second
	// NATSConnectTimeout bounds establishing a connection.
	NATSConnectTimeout = 10 * time.Second
	// DefaultNATSConns bounds the pooled connections of one worker.
	DefaultNATSConns = 32
	// DefaultNATSMaxValue caps a value or object the tool reads or writes.
	DefaultNATSMaxValue = 8 << 20
	// maxConsumeBatch and maxConsumeWait bound js_consume.
	maxConsumeBatch = 1000
	maxConsumeWait  = time.Minute
	// maxListed bounds the keys and objects kv_keys and object_list return.
	maxListed = 10000
)

// NATS is the nats tool (kind nats): one JetStream operation (operation, one of
// playbook.NATSOperations) against a NATS server named by url, or by the credential auth names.
//
// Connection: url (or the credential's url / servers), and user and password, token,
// creds (the text of a .creds file: a user JWT and its seed) or nkey (a user seed), from
// the credential (or, except for creds and nkey, the tool). The connection's address
// passes the worker's egress policy (as the http tool's). Connections are pooled per
// server and credentials, at most MaxConns of them, and closed by Close.
//
// Keys: bucket and key (kv_*), value (kv_put), ttl (seconds: the max age of a bucket
// kv_put or object_put creates), name (or key, object: a pipeline item's name is its
// label) and data (object_*), stream, subject, headers,
// msg_id and data (js_publish), seq or last (js_get_msg; last: true reads the last
// message of subject), consumer, subject, batch (default 10, at most 1000), timeout_ms
// (the longest wait, default 5000, at most 60000) and ack (default true) for js_consume,
// encoding (text, json or base64: how data and values are read and written; text by
// default, base64 for bytes that are not UTF-8), timeout_seconds (default 30).
//
// The platform's own streams (NOETL_*), buckets and consumers (noetl*, such as the durable
// consumers of NATS triggers on tenants' streams) and subjects are refused.
type NATS struct {
	// Resolve fetches the credential auth names.
	Resolve CredentialResolver
	// Register adds a secret value to the scrubber of the command ctx runs: the tool
	// registers the connection's secrets (password, token, creds and the JWT and seed in
	// them, nkey), whose field names the scrubber may not know as secret.
	Register func(ctx context.Context, value string)
	// Egress is the policy on the addresses a connection may reach.
	Egress Egress
	// MaxConns bounds the pooled connections (zero: DefaultNATSConns).
	MaxConns int
	// MaxValueBytes caps a value or object read or written (zero: DefaultNATSMaxValue).
	MaxValueBytes int

	mu     sync.Mutex
	conns  map[string]*list.Element // of *natsConn, most recently used at the front
	lru    list.List
	closed bool
}

// natsConn is one pooled connection.
type natsConn struct {
	key  string
	nc   *nats.Conn
	js   jetstream.JetStream
	busy int
}

// Sentinel errors of the nats tool.
var (
	// ErrNATSReserved is the cause of an operation refused for naming the platform's own
	// stream, bucket or subject.
	ErrNATSReserved = errors.New("reserved for the platform")
	// ErrNATSClosed is returned by a tool whose connections were closed (the worker stops).
	ErrNATSClosed = errors.New("nats: the worker is stopping")
)

// Run implements Tool.
func (t *NATS) Run(ctx context.Context, c *Call) (any, error) {
	cfg := c.Config
	op := strings.ToLower(strings.TrimSpace(cfgString(cfg, "operation", "op")))
	if op == "" {
		return nil, natsErr("tool.operation is required (one of %s)", strings.Join(playbook.NATSOperations, ", "))
	}
	if !slices.Contains(playbook.NATSOperations, op) {
		return nil, natsErr("unknown operation %q (one of %s)", op, strings.Join(playbook.NATSOperations, ", "))
	}
	timeout := DefaultNATSTimeout
	if v, ok := cfg["timeout_seconds"]; ok && v != nil {
		f, ok := cfgNumber(v)
		if !ok || f <= 0 {
			return nil, natsErr("tool.timeout_seconds must be a positive number, got %v", v)
		}
		timeout = time.Duration(f * float64(time.Second))
	}
	if err := t.checkReserved(op, cfg); err != nil {
		return nil, err
	}
	conn, release, err := t.conn(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	res, err := t.do(ctx, conn.js, op, cfg)
	where := strings.TrimSpace(op + " " + natsTarget(cfg))
	if err != nil {
		c.Log.Diagnostic("%s on %s: %v (after %s)", where, conn.nc.ConnectedUrlRedacted(), err, time.Since(start).Round(time.Millisecond))
	} else {
		c.Log.Diagnostic("%s on %s: ok in %s", where, conn.nc.ConnectedUrlRedacted(), time.Since(start).Round(time.Millisecond))
	}
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, &Error{Msg: fmt.Sprintf("nats: %s: timed out after %s", op, timeout), Retryable: true}
		}
		var te *Error
		if errors.As(err, &te) {
			return nil, err
		}
		return nil, &Error{Msg: fmt.Sprintf("nats: %s: %s", op, strings.TrimPrefix(err.Error(), "nats: ")), Retryable: errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrConnectionClosed)}
	}
	return res, nil
}

// natsTarget names what an operation works on, for its diagnostic line.
func natsTarget(cfg map[string]any) string {
	var parts []string
	for _, k := range []string{"bucket", "key", "name", "stream", "subject", "consumer"} {
		if v := cfgString(cfg, k); v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, " ")
}

func natsErr(format string, a ...any) error { return &Error{Msg: "nats: " + fmt.Sprintf(format, a...)} }

// checkReserved refuses an operation on the platform's streams, buckets and subjects.
func (t *NATS) checkReserved(op string, cfg map[string]any) error {
	refuse := func(what, name string) error {
		return &Error{Msg: fmt.Sprintf("nats: %s: %s %q is %v; a playbook cannot reach it", op, what, name, ErrNATSReserved)}
	}
	if b := cfgString(cfg, "bucket"); b != "" && natsx.ReservedBucket(b) {
		return refuse("bucket", b)
	}
	if s := cfgString(cfg, "stream"); s != "" && natsx.ReservedStream(s) {
		return refuse("stream", s)
	}
	if s := cfgString(cfg, "consumer", "durable"); s != "" && natsx.ReservedConsumer(s) {
		return refuse("consumer", s)
	}
	if s := cfgString(cfg, "subject"); s != "" && natsx.ReservedSubject(s) {
		return refuse("subject", s)
	}
	return nil
}

// natsAuth is what a connection is made with.
type natsAuth struct {
	url, user, password, token, creds, nkey string
}

// connAuth reads the server and credentials from the tool and its auth credential (the
// credential wins for what it sets).
func (t *NATS) connAuth(ctx context.Context, cfg map[string]any) (natsAuth, error) {
	a := natsAuth{
		url:      cfgString(cfg, "url", "servers"),
		user:     cfgString(cfg, "user", "username"),
		password: cfgString(cfg, "password"),
		token:    cfgString(cfg, "token"),
	}
	ra, err := resolveAuth(ctx, t.Resolve, "nats", cfg["auth"])
	if err != nil {
		return a, err
	}
	if ra != nil {
		d := ra.data
		set := func(dst *string, keys ...string) {
			if v := cfgString(d, keys...); v != "" {
				*dst = v
			}
		}
		set(&a.url, "url", "servers", "nats_url")
		set(&a.user, "user", "username")
		set(&a.password, "password")
		set(&a.token, "token")
		set(&a.creds, "creds", "credentials")
		set(&a.nkey, "nkey", "seed", "nkey_seed")
	}
	if a.url == "" {
		return a, natsErr("tool.url (or the auth credential's url) is required")
	}
	if t.Register != nil {
		for _, v := range []string{a.password, a.token, a.creds, a.nkey} {
			if v != "" {
				t.Register(ctx, v)
			}
		}
		if a.creds != "" {
			if jwt, err := nkeys.ParseDecoratedJWT([]byte(a.creds)); err == nil {
				t.Register(ctx, jwt)
			}
			if kp, err := nkeys.ParseDecoratedNKey([]byte(a.creds)); err == nil {
				if seed, err := kp.Seed(); err == nil {
					t.Register(ctx, string(seed))
				}
			}
		}
	}
	return a, nil
}

// conn returns a pooled connection for the tool's server and credentials, and the func
// that hands it back.
func (t *NATS) conn(ctx context.Context, cfg map[string]any) (*natsConn, func(), error) {
	a, err := t.connAuth(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	sum := sha256.Sum256([]byte(strings.Join([]string{a.url, a.user, a.password, a.token, a.creds, a.nkey}, "\x00")))
	key := hex.EncodeToString(sum[:])
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, nil, ErrNATSClosed
	}
	if el, ok := t.conns[key]; ok && !el.Value.(*natsConn).nc.IsClosed() {
		c := el.Value.(*natsConn)
		c.busy++
		t.lru.MoveToFront(el)
		t.mu.Unlock()
		return c, func() { t.release(c) }, nil
	}
	t.mu.Unlock()

	nc, err := t.dial(ctx, a)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, natsErr("jetstream: %v", err)
	}
	c := &natsConn{key: key, nc: nc, js: js, busy: 1}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		nc.Close()
		return nil, nil, ErrNATSClosed
	}
	if t.conns == nil {
		t.conns = map[string]*list.Element{}
	}
	if el, ok := t.conns[key]; ok {
		// Another command connected meanwhile: use its connection, close this one.
		old := el.Value.(*natsConn)
		if !old.nc.IsClosed() {
			nc.Close()
			old.busy++
			t.lru.MoveToFront(el)
			return old, func() { t.release(old) }, nil
		}
		t.lru.Remove(el)
		delete(t.conns, key)
	}
	limit := t.MaxConns
	if limit <= 0 {
		limit = DefaultNATSConns
	}
	// Make room by closing the least recently used idle connection; when every pooled one
	// is busy this one serves its call only.
	for len(t.conns) >= limit {
		victim := (*list.Element)(nil)
		for el := t.lru.Back(); el != nil; el = el.Prev() {
			if el.Value.(*natsConn).busy == 0 {
				victim = el
				break
			}
		}
		if victim == nil {
			return c, func() { nc.Close() }, nil
		}
		vc := victim.Value.(*natsConn)
		vc.nc.Close()
		t.lru.Remove(victim)
		delete(t.conns, vc.key)
	}
	t.conns[key] = t.lru.PushFront(c)
	return c, func() { t.release(c) }, nil
}

func (t *NATS) release(c *natsConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.busy--
	if t.closed && c.busy == 0 {
		c.nc.Close()
	}
}

// dial connects to a server with the credentials, through the egress check.
func (t *NATS) dial(ctx context.Context, a natsAuth) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name("noetl-worker-nats-tool"),
		nats.Timeout(NATSConnectTimeout),
		nats.SetCustomDialer(&net.Dialer{Timeout: NATSConnectTimeout, Control: t.Egress.control}),
		nats.MaxReconnects(5),
		nats.ReconnectWait(250 * time.Millisecond),
	}
	switch {
	case a.creds != "":
		jwt, err := nkeys.ParseDecoratedJWT([]byte(a.creds))
		if err != nil {
			return nil, natsErr("the credential's creds is not a .creds file: %v", err)
		}
		kp, err := nkeys.ParseDecoratedNKey([]byte(a.creds))
		if err != nil {
			return nil, natsErr("the credential's creds holds no user seed: %v", err)
		}
		seed, err := kp.Seed()
		if err != nil {
			return nil, natsErr("the credential's creds holds no user seed: %v", err)
		}
		opts = append(opts, nats.UserJWTAndSeed(jwt, string(seed)))
	case a.nkey != "":
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(a.nkey)))
		if err != nil {
			return nil, natsErr("the credential's nkey is not a seed: %v", err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, natsErr("the credential's nkey: %v", err)
		}
		opts = append(opts, nats.Nkey(pub, kp.Sign))
	case a.token != "":
		opts = append(opts, nats.Token(a.token))
	case a.user != "":
		opts = append(opts, nats.UserInfo(a.user, a.password))
	}
	type result struct {
		nc  *nats.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(a.url, opts...)
		done <- result{nc, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			var blocked *blockedAddrError
			if errors.As(r.err, &blocked) {
				return nil, natsErr("connect: %s", blocked.Error())
			}
			return nil, &Error{Msg: fmt.Sprintf("nats: connect to %s: %v", redactURL(a.url), r.err), Retryable: !errors.Is(r.err, nats.ErrAuthorization)}
		}
		return r.nc, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, &Error{Msg: "nats: connect: " + context.Cause(ctx).Error(), Retryable: true}
	}
}

// redactURL drops the user information of a server URL.
func redactURL(u string) string {
	if i := strings.Index(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "***@" + u[i+1:]
		}
	}
	return u
}

// Close closes the pooled connections (those in use as their calls end) and refuses
// further calls.
func (t *NATS) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for _, el := range t.conns {
		if c := el.Value.(*natsConn); c.busy == 0 {
			c.nc.Close()
		}
	}
	t.conns = nil
	t.lru.Init()
}

// Pooled reports how many connections the tool keeps.
func (t *NATS) Pooled() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

func (t *NATS) maxValue() int {
	if t.MaxValueBytes > 0 {
		return t.MaxValueBytes
	}
	return DefaultNATSMaxValue
}

// do runs one operation.
func (t *NATS) do(ctx context.Context, js jetstream.JetStream, op string, cfg map[string]any) (any, error) {
	enc := strings.ToLower(cfgString(cfg, "encoding"))
	switch enc {
	case "", "text", "utf8", "utf-8", "json", "base64":
	default:
		return nil, natsErr("tool.encoding must be text, json or base64, got %q", enc)
	}
	need := func(keys ...string) (string, error) {
		v := cfgString(cfg, keys...)
		if v == "" {
			return "", natsErr("%s: tool.%s is required", op, keys[0])
		}
		return v, nil
	}
	switch op {
	case "kv_get", "kv_put", "kv_delete", "kv_keys", "kv_purge":
		bucket, err := need("bucket")
		if err != nil {
			return nil, err
		}
		return t.kv(ctx, js, op, bucket, cfg, enc, need)
	case "object_get", "object_put", "object_delete", "object_list", "object_info":
		bucket, err := need("bucket")
		if err != nil {
			return nil, err
		}
		return t.object(ctx, js, op, bucket, cfg, enc, need)
	case "js_publish":
		subject, err := need("subject")
		if err != nil {
			return nil, err
		}
		data, err := t.encode(op, cfg["data"], enc)
		if err != nil {
			return nil, err
		}
		msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
		if h, ok := cfg["headers"].(map[string]any); ok {
			for k, v := range h {
				msg.Header.Set(k, scalarString(v))
			}
		} else if cfg["headers"] != nil {
			return nil, natsErr("%s: tool.headers must be a map", op)
		}
		var popts []jetstream.PublishOpt
		if id := cfgString(cfg, "msg_id"); id != "" {
			popts = append(popts, jetstream.WithMsgID(id))
		}
		if s := cfgString(cfg, "stream"); s != "" {
			popts = append(popts, jetstream.WithExpectStream(s))
		}
		ack, err := js.PublishMsg(ctx, msg, popts...)
		if err != nil {
			return nil, err
		}
		return map[string]any{"stream": ack.Stream, "seq": ack.Sequence, "duplicate": ack.Duplicate, "subject": subject}, nil
	case "js_get_msg":
		name, err := need("stream")
		if err != nil {
			return nil, err
		}
		s, err := js.Stream(ctx, name)
		if err != nil {
			return nil, err
		}
		var m *jetstream.RawStreamMsg
		last, err := cfgBool(cfg["last"], false)
		if err != nil {
			return nil, natsErr("%s: tool.last: %v", op, err)
		}
		if last {
			subject, err := need("subject")
			if err != nil {
				return nil, err
			}
			m, err = s.GetLastMsgForSubject(ctx, subject)
			if err != nil {
				return nil, err
			}
		} else {
			seq, ok := cfgNumber(cfg["seq"])
			if !ok || seq < 1 {
				return nil, natsErr("%s: tool.seq (a sequence number from 1) or last: true with a subject is required", op)
			}
			m, err = s.GetMsg(ctx, uint64(seq))
			if err != nil {
				return nil, err
			}
		}
		v, usedEnc, err := t.decode(m.Data, enc)
		if err != nil {
			return nil, natsErr("%s: %v", op, err)
		}
		return map[string]any{"stream": name, "subject": m.Subject, "seq": m.Sequence, "time": m.Time.UTC().Format(time.RFC3339Nano),
			"headers": headerMap(m.Header), "data": v, "encoding": usedEnc}, nil
	case "js_stream_info":
		name, err := need("stream")
		if err != nil {
			return nil, err
		}
		s, err := js.Stream(ctx, name)
		if err != nil {
			return nil, err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return nil, err
		}
		return map[string]any{"name": info.Config.Name, "subjects": stringsAny(info.Config.Subjects), "messages": info.State.Msgs,
			"bytes": info.State.Bytes, "first_seq": info.State.FirstSeq, "last_seq": info.State.LastSeq, "consumers": info.State.Consumers,
			"created": info.Created.UTC().Format(time.RFC3339Nano)}, nil
	case "js_consume":
		return t.consume(ctx, js, cfg, enc, need)
	}
	return nil, natsErr("unknown operation %q", op)
}

func (t *NATS) kv(ctx context.Context, js jetstream.JetStream, op, bucket string, cfg map[string]any, enc string, need func(...string) (string, error)) (any, error) {
	key := ""
	if op != "kv_keys" {
		k, err := need("key")
		if err != nil {
			return nil, err
		}
		key = k
	}
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) && op == "kv_put" {
		kc := jetstream.KeyValueConfig{Bucket: bucket, MaxValueSize: int32(t.maxValue())}
		if ttl, ok := cfgNumber(cfg["ttl"]); ok && ttl > 0 {
			kc.TTL = time.Duration(ttl * float64(time.Second))
		}
		kv, err = js.CreateKeyValue(ctx, kc)
	}
	if err != nil {
		return nil, err
	}
	out := map[string]any{"bucket": bucket}
	if op == "kv_keys" {
		lister, err := kv.ListKeys(ctx)
		if err != nil {
			return nil, err
		}
		defer func() { _ = lister.Stop() }()
		keys := []any{}
		truncated := false
		for k := range lister.Keys() {
			if len(keys) == maxListed {
				truncated = true
				break
			}
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i].(string) < keys[j].(string) })
		out["keys"], out["truncated"] = keys, truncated
		return out, nil
	}
	out["key"] = key
	switch op {
	case "kv_get":
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			out["found"], out["value"] = false, nil
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		v, usedEnc, err := t.decode(e.Value(), enc)
		if err != nil {
			return nil, natsErr("%s: %v", op, err)
		}
		out["found"], out["value"], out["encoding"], out["revision"] = true, v, usedEnc, e.Revision()
		out["created"] = e.Created().UTC().Format(time.RFC3339Nano)
	case "kv_put":
		data, err := t.encode(op, cfg["value"], enc)
		if err != nil {
			return nil, err
		}
		rev, err := kv.Put(ctx, key, data)
		if err != nil {
			return nil, err
		}
		out["revision"] = rev
	case "kv_delete":
		if err := kv.Delete(ctx, key); err != nil {
			return nil, err
		}
		out["deleted"] = true
	case "kv_purge":
		if err := kv.Purge(ctx, key); err != nil {
			return nil, err
		}
		out["purged"] = true
	}
	return out, nil
}

func (t *NATS) object(ctx context.Context, js jetstream.JetStream, op, bucket string, cfg map[string]any, enc string, need func(...string) (string, error)) (any, error) {
	name := ""
	if op != "object_list" {
		n, err := need("name", "key", "object")
		if err != nil {
			return nil, err
		}
		name = n
	}
	store, err := js.ObjectStore(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) && op == "object_put" {
		oc := jetstream.ObjectStoreConfig{Bucket: bucket}
		if ttl, ok := cfgNumber(cfg["ttl"]); ok && ttl > 0 {
			oc.TTL = time.Duration(ttl * float64(time.Second))
		}
		store, err = js.CreateObjectStore(ctx, oc)
	}
	if err != nil {
		return nil, err
	}
	out := map[string]any{"bucket": bucket}
	if op == "object_list" {
		infos, err := store.List(ctx)
		if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
			return nil, err
		}
		objs := []any{}
		for _, in := range infos {
			if len(objs) == maxListed {
				break
			}
			objs = append(objs, objectInfo(in))
		}
		out["objects"], out["truncated"] = objs, len(infos) > maxListed
		return out, nil
	}
	out["name"] = name
	switch op {
	case "object_put":
		data, err := t.encode(op, cfg["data"], enc)
		if err != nil {
			return nil, err
		}
		info, err := store.PutBytes(ctx, name, data)
		if err != nil {
			return nil, err
		}
		return objectInfo(info), nil
	case "object_info":
		info, err := store.GetInfo(ctx, name)
		if err != nil {
			return nil, err
		}
		return objectInfo(info), nil
	case "object_delete":
		if err := store.Delete(ctx, name); err != nil {
			return nil, err
		}
		out["deleted"] = true
	case "object_get":
		r, err := store.Get(ctx, name)
		if err != nil {
			return nil, err
		}
		defer func() { _ = r.Close() }()
		info, err := r.Info()
		if err != nil {
			return nil, err
		}
		if info.Size > uint64(t.maxValue()) {
			return nil, natsErr("%s: object %q is %d bytes, over the %s cap", op, name, info.Size, byteSize(int64(t.maxValue())))
		}
		raw, err := io.ReadAll(io.LimitReader(r, int64(t.maxValue())+1))
		if err != nil {
			return nil, err
		}
		v, usedEnc, err := t.decode(raw, enc)
		if err != nil {
			return nil, natsErr("%s: %v", op, err)
		}
		out = objectInfo(info)
		out["data"], out["encoding"] = v, usedEnc
	}
	return out, nil
}

// consume fetches at most batch messages, waiting at most timeout_ms, and acks them
// unless ack is false.
func (t *NATS) consume(ctx context.Context, js jetstream.JetStream, cfg map[string]any, enc string, need func(...string) (string, error)) (any, error) {
	const op = "js_consume"
	name, err := need("stream")
	if err != nil {
		return nil, err
	}
	batch := 10
	if v, ok := cfgNumber(cfg["batch"]); ok {
		if v < 1 || v > maxConsumeBatch {
			return nil, natsErr("%s: tool.batch must be 1 to %d, got %v", op, maxConsumeBatch, v)
		}
		batch = int(v)
	}
	wait := 5 * time.Second
	if v, ok := cfgNumber(cfg["timeout_ms"]); ok {
		if v < 1 || time.Duration(v)*time.Millisecond > maxConsumeWait {
			return nil, natsErr("%s: tool.timeout_ms must be 1 to %d, got %v", op, maxConsumeWait.Milliseconds(), v)
		}
		wait = time.Duration(v) * time.Millisecond
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait+time.Second {
		wait = max(time.Until(dl)-time.Second, time.Millisecond)
	}
	ack, err := cfgBool(cfg["ack"], true)
	if err != nil {
		return nil, natsErr("%s: tool.ack: %v", op, err)
	}
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	var cons jetstream.Consumer
	durable := cfgString(cfg, "consumer", "durable")
	if durable != "" {
		cons, err = s.Consumer(ctx, durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			cons, err = s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: durable, FilterSubject: cfgString(cfg, "subject"), AckPolicy: jetstream.AckExplicitPolicy})
		}
	} else {
		cons, err = s.CreateConsumer(ctx, jetstream.ConsumerConfig{FilterSubject: cfgString(cfg, "subject"), AckPolicy: jetstream.AckExplicitPolicy, InactiveThreshold: time.Minute})
		if err == nil {
			defer func() {
				// The ephemeral consumer goes with the call (its inactivity threshold
				// removes it should this fail).
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				_ = s.DeleteConsumer(dctx, cons.CachedInfo().Name)
			}()
		}
	}
	if err != nil {
		return nil, err
	}
	mb, err := cons.Fetch(batch, jetstream.FetchMaxWait(wait))
	if err != nil {
		return nil, err
	}
	msgs := []any{}
	for m := range mb.Messages() {
		meta, err := m.Metadata()
		if err != nil {
			return nil, err
		}
		v, usedEnc, err := t.decode(m.Data(), enc)
		if err != nil {
			return nil, natsErr("%s: %v", op, err)
		}
		msgs = append(msgs, map[string]any{"subject": m.Subject(), "seq": meta.Sequence.Stream, "time": meta.Timestamp.UTC().Format(time.RFC3339Nano),
			"headers": headerMap(m.Headers()), "data": v, "encoding": usedEnc})
		if ack {
			if err := m.Ack(); err != nil {
				return nil, err
			}
		}
	}
	if err := mb.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
		return nil, err
	}
	return map[string]any{"stream": name, "messages": msgs, "count": len(msgs)}, nil
}

// encode turns a value to write into bytes: a string as is (decoded for base64), any
// other value as JSON.
func (t *NATS) encode(op string, v any, enc string) ([]byte, error) {
	var b []byte
	switch x := v.(type) {
	case nil:
		b = nil
	case string:
		if enc == "base64" {
			d, err := base64.StdEncoding.DecodeString(x)
			if err != nil {
				return nil, natsErr("%s: the value is not base64: %v", op, err)
			}
			b = d
		} else {
			b = []byte(x)
		}
	default:
		j, err := json.Marshal(x)
		if err != nil {
			return nil, natsErr("%s: the value is not JSON-encodable: %v", op, err)
		}
		b = j
	}
	if len(b) > t.maxValue() {
		return nil, natsErr("%s: the value is %d bytes, over the %s cap", op, len(b), byteSize(int64(t.maxValue())))
	}
	return b, nil
}

// decode turns bytes read into a result value by encoding: text (base64 when not UTF-8),
// json, or base64. It returns the encoding used.
func (t *NATS) decode(b []byte, enc string) (any, string, error) {
	if len(b) > t.maxValue() {
		return nil, "", fmt.Errorf("the value is %d bytes, over the %s cap", len(b), byteSize(int64(t.maxValue())))
	}
	switch enc {
	case "json":
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, "", fmt.Errorf("the value is not JSON (encoding: json): %v", err)
		}
		return v, "json", nil
	case "base64":
		return base64.StdEncoding.EncodeToString(b), "base64", nil
	}
	if !utf8.Valid(b) {
		return base64.StdEncoding.EncodeToString(b), "base64", nil
	}
	return string(b), "text", nil
}

func objectInfo(in *jetstream.ObjectInfo) map[string]any {
	return map[string]any{"bucket": in.Bucket, "name": in.Name, "size": in.Size, "chunks": in.Chunks, "digest": in.Digest,
		"modified": in.ModTime.UTC().Format(time.RFC3339Nano), "description": in.Description, "deleted": in.Deleted}
}

func headerMap(h nats.Header) map[string]any {
	out := make(map[string]any, len(h))
	for k, vs := range h {
		out[k] = strings.Join(vs, ", ")
	}
	return out
}

func stringsAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
