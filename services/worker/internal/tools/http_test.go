package tools

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// echoServer answers with a JSON description of the request it received.
func echoServer(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Custom", "yes")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"method":  r.Method,
			"query":   r.URL.RawQuery,
			"headers": r.Header,
			"body":    string(b),
		})
	})
	mux.HandleFunc("/text", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, "nothing here")
	})
	mux.HandleFunc("/untyped", func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil
		_, _ = io.WriteString(w, `{"ok":true}`)
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/echo?from=redirect", http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("x", 2048))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func runHTTP(t *testing.T, h *HTTP, cfg map[string]any) (map[string]any, error) {
	t.Helper()
	out, err := h.Run(context.Background(), &Call{Kind: "http", Config: cfg, CommandID: "cmd-1", Step: "s"})
	if err != nil {
		return nil, err
	}
	m, ok := out.(map[string]any)
	if !ok {
		t.Fatalf("result is %T, want map", out)
	}
	return m, nil
}

func mustHTTP(t *testing.T, h *HTTP, cfg map[string]any) map[string]any {
	t.Helper()
	m, err := runHTTP(t, h, cfg)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return m
}

func echoed(t *testing.T, res map[string]any) map[string]any {
	t.Helper()
	body, ok := res["body"].(map[string]any)
	if !ok {
		t.Fatalf("body is %T (%v), want decoded JSON", res["body"], res["body"])
	}
	return body
}

func echoedHeader(t *testing.T, res map[string]any, name string) string {
	t.Helper()
	hs, _ := echoed(t, res)["headers"].(map[string]any)
	vs, _ := hs[name].([]any)
	if len(vs) == 0 {
		return ""
	}
	s, _ := vs[0].(string)
	return s
}

func TestHTTPGetJSON(t *testing.T) {
	srv := echoServer(t)
	h := &HTTP{Egress: EgressLoopback}
	res := mustHTTP(t, h, map[string]any{
		"url":     srv.URL + "/echo?a=1",
		"params":  map[string]any{"b": "two", "n": float64(3), "list": []any{"x", "y"}},
		"headers": map[string]any{"X-Test": "hello"},
	})
	if res["status_code"] != 200 {
		t.Fatalf("status_code = %v", res["status_code"])
	}
	body := echoed(t, res)
	if body["method"] != "GET" || body["query"] != "a=1&b=two&list=x&list=y&n=3" {
		t.Fatalf("echo = %v", body)
	}
	if got := echoedHeader(t, res, "X-Test"); got != "hello" {
		t.Fatalf("X-Test = %q", got)
	}
	if got := echoedHeader(t, res, "Idempotency-Key"); got != "cmd-1" {
		t.Fatalf("Idempotency-Key = %q", got)
	}
	hdrs := res["headers"].(map[string]any)
	if hdrs["x-custom"] != "yes" || !strings.HasPrefix(hdrs["content-type"].(string), "application/json") {
		t.Fatalf("headers = %v", hdrs)
	}
	if _, ok := res["elapsed_ms"].(int64); !ok {
		t.Fatalf("elapsed_ms = %T", res["elapsed_ms"])
	}
	if !strings.HasPrefix(res["url"].(string), srv.URL+"/echo?") {
		t.Fatalf("url = %v", res["url"])
	}
	if _, err := json.Marshal(res); err != nil {
		t.Fatalf("result not JSON-encodable: %v", err)
	}
}

func TestHTTPBodies(t *testing.T) {
	srv := echoServer(t)
	h := &HTTP{Egress: EgressLoopback}
	for _, tc := range []struct {
		name, key string
		val       any
		wantBody  string
		wantType  string
	}{
		{"json", "json", map[string]any{"a": float64(1)}, `{"a":1}`, "application/json"},
		{"legacy data", "data", map[string]any{"b": "x"}, `{"b":"x"}`, "application/json"},
		{"form", "form", map[string]any{"k": "v w", "n": float64(2)}, "k=v+w&n=2", "application/x-www-form-urlencoded"},
		{"raw body", "body", "plain words", "plain words", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := mustHTTP(t, h, map[string]any{"url": srv.URL + "/echo", "method": "post", tc.key: tc.val})
			body := echoed(t, res)
			if body["method"] != "POST" || body["body"] != tc.wantBody {
				t.Fatalf("echo = %v", body)
			}
			if got := echoedHeader(t, res, "Content-Type"); got != tc.wantType {
				t.Fatalf("Content-Type = %q, want %q", got, tc.wantType)
			}
		})
	}
	_, err := runHTTP(t, h, map[string]any{"url": srv.URL + "/echo", "json": map[string]any{}, "body": "x"})
	if err == nil || !strings.Contains(err.Error(), "only one of") {
		t.Fatalf("two bodies: err = %v", err)
	}
	// An explicit Idempotency-Key wins.
	res := mustHTTP(t, h, map[string]any{"url": srv.URL + "/echo", "headers": map[string]any{"idempotency-key": "mine"}})
	if got := echoedHeader(t, res, "Idempotency-Key"); got != "mine" {
		t.Fatalf("Idempotency-Key = %q", got)
	}
}

func TestHTTPResponses(t *testing.T) {
	srv := echoServer(t)
	h := &HTTP{Egress: EgressLoopback, MaxBodyBytes: 1024}

	res := mustHTTP(t, h, map[string]any{"url": srv.URL + "/text"})
	if res["status_code"] != 404 || res["body"] != "nothing here" {
		t.Fatalf("non-2xx result = %v", res)
	}
	res = mustHTTP(t, h, map[string]any{"url": srv.URL + "/untyped"})
	if b, ok := res["body"].(map[string]any); !ok || b["ok"] != true {
		t.Fatalf("untyped JSON body = %#v", res["body"])
	}

	res = mustHTTP(t, h, map[string]any{"url": srv.URL + "/redirect"})
	if res["status_code"] != 200 || res["url"] != srv.URL+"/echo?from=redirect" {
		t.Fatalf("followed redirect = %v %v", res["status_code"], res["url"])
	}
	res = mustHTTP(t, h, map[string]any{"url": srv.URL + "/redirect", "follow_redirects": false})
	if res["status_code"] != 302 {
		t.Fatalf("unfollowed redirect status = %v", res["status_code"])
	}
	_, err := runHTTP(t, h, map[string]any{"url": srv.URL + "/loop"})
	if err == nil || !strings.Contains(err.Error(), "5 redirects") {
		t.Fatalf("redirect loop: err = %v", err)
	}

	_, err = runHTTP(t, h, map[string]any{"url": srv.URL + "/big"})
	if err == nil || !strings.Contains(err.Error(), "1 KiB cap") {
		t.Fatalf("body cap: err = %v", err)
	}

	start := time.Now()
	_, err = runHTTP(t, h, map[string]any{"url": srv.URL + "/slow", "timeout_seconds": 0.2})
	var te *Error
	if !errors.As(err, &te) || !te.Retryable || !strings.Contains(te.Msg, "timed out") {
		t.Fatalf("timeout: err = %#v", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("timeout took %v", time.Since(start))
	}

	// Connection refused is a retryable transport error.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	_, err = runHTTP(t, h, map[string]any{"url": "http://" + addr + "/"})
	if !errors.As(err, &te) || !te.Retryable {
		t.Fatalf("refused: err = %#v", err)
	}

	for _, cfg := range []map[string]any{{}, {"url": "ftp://x/"}, {"url": srv.URL, "params": "x"}, {"url": srv.URL, "timeout_seconds": -1}} {
		if _, err := runHTTP(t, h, cfg); err == nil {
			t.Fatalf("config %v: want error", cfg)
		}
	}
}

func TestHTTPAuth(t *testing.T) {
	srv := echoServer(t)
	creds := map[string]map[string]any{
		"tok":   {"token": "s3cret"},
		"basic": {"username": "u", "password": "p"},
		"hdrs":  {"headers": map[string]any{"X-Api-Key": "k1"}},
		"empty": {},
	}
	h := &HTTP{Egress: EgressLoopback, Resolve: func(_ context.Context, name string) (string, map[string]any, error) {
		d, ok := creds[name]
		if !ok {
			return "", nil, errors.New("not found")
		}
		return "http", d, nil
	}}
	get := func(auth any) (map[string]any, error) {
		return runHTTP(t, h, map[string]any{"url": srv.URL + "/echo", "auth": auth})
	}
	res, err := get("tok")
	if err != nil || echoedHeader(t, res, "Authorization") != "Bearer s3cret" {
		t.Fatalf("bearer: %v %v", err, res)
	}
	res, err = get("basic")
	if err != nil || echoedHeader(t, res, "Authorization") != "Basic dTpw" {
		t.Fatalf("basic: %v %v", err, res)
	}
	res, err = get(map[string]any{"api": map[string]any{"source": "credential", "key": "hdrs"}})
	if err != nil || echoedHeader(t, res, "X-Api-Key") != "k1" {
		t.Fatalf("headers: %v %v", err, res)
	}
	if _, err := get("empty"); err == nil || !strings.Contains(err.Error(), `credential "empty"`) {
		t.Fatalf("empty credential: err = %v", err)
	}
	if _, err := get("missing"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing credential: err = %v", err)
	}
	if _, err := (&HTTP{Egress: EgressLoopback}).Run(context.Background(), &Call{Config: map[string]any{"url": srv.URL, "auth": "tok"}}); err == nil {
		t.Fatal("auth without resolver: want error")
	}
}

func TestHTTPRefusesPrivateAddresses(t *testing.T) {
	srv := echoServer(t)
	h := &HTTP{}
	_, err := runHTTP(t, h, map[string]any{"url": srv.URL + "/echo"})
	var te *Error
	if !errors.As(err, &te) {
		t.Fatalf("err = %v, want *Error", err)
	}
	addr := strings.TrimPrefix(srv.URL, "http://")
	if te.Retryable || !strings.Contains(te.Msg, "refusing to connect to "+addr+" (loopback address): NOETL_HTTP_EGRESS=public allows public addresses only; NOETL_HTTP_EGRESS=loopback") {
		t.Fatalf("err = %#v", te)
	}
	// A hostname resolving to loopback is refused too: the check sees the dialed IP.
	_, port, _ := net.SplitHostPort(addr)
	_, err = runHTTP(t, h, map[string]any{"url": "http://localhost:" + port + "/echo"})
	if err == nil || !strings.Contains(err.Error(), "refusing to connect") {
		t.Fatalf("localhost: err = %v", err)
	}
	// A redirect to an address the policy refuses is refused when it is followed.
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	}))
	t.Cleanup(redirect.Close)
	_, err = runHTTP(t, &HTTP{Egress: EgressPrivate}, map[string]any{"url": redirect.URL})
	if err == nil || !strings.Contains(err.Error(), "refusing to connect to 169.254.169.254:80 (cloud metadata address): no NOETL_HTTP_EGRESS setting allows it") {
		t.Fatalf("redirect to metadata: err = %v", err)
	}
}

// The guard refuses in the dialer's Control hook, which runs before connect(2): the
// refusal is the dial's error, so nothing was sent (a connection attempt to these
// addresses would fail otherwise: time out, be refused, or answer).
func TestHTTPRefusesBeforeConnecting(t *testing.T) {
	h := &HTTP{Egress: EgressLoopback}
	for url, want := range map[string]string{
		"http://169.254.169.254/latest/meta-data/": "refusing to connect to 169.254.169.254:80 (cloud metadata address): no NOETL_HTTP_EGRESS setting allows it",
		"http://10.0.0.5/":                         "refusing to connect to 10.0.0.5:80 (private address): NOETL_HTTP_EGRESS=loopback allows public and loopback addresses only; NOETL_HTTP_EGRESS=private (noetl dev --http-egress private) allows private ones",
		"http://[fe80::1]:8080/":                   "refusing to connect to [fe80::1]:8080 (link-local address): no NOETL_HTTP_EGRESS setting allows it",
		"http://[::ffff:169.254.169.254]/":         "refusing to connect to 169.254.169.254:80 (cloud metadata address)", // dialed as IPv4
		"http://0.0.0.0:9/":                        "(unspecified address): no NOETL_HTTP_EGRESS setting allows it",
	} {
		_, err := runHTTP(t, h, map[string]any{"url": url, "timeout_seconds": 30})
		var te *Error
		if !errors.As(err, &te) || te.Retryable || !strings.Contains(te.Msg, want) {
			t.Errorf("%s: err = %v, want %q", url, err, want)
		}
	}
}

func TestEgressPolicies(t *testing.T) {
	const (
		pub = "public"
		lo  = "loopback"
		pri = "private"
		no  = "never"
	)
	// allowedFrom is the narrowest policy that allows the address (policies widen in the
	// order public, loopback, private); "never" means no policy does.
	for addr, want := range map[string]struct{ allowedFrom, name string }{
		"8.8.8.8":                {pub, ""},
		"2001:4860::8888":        {pub, ""},
		"64:ff9b::808:808":       {pub, ""}, // NAT64 of a public address
		"127.0.0.1":              {lo, "loopback"},
		"127.9.9.9":              {lo, "loopback"},
		"::1":                    {lo, "loopback"},
		"::ffff:127.0.0.1":       {lo, "loopback"},
		"10.0.0.5":               {pri, "private"},
		"::ffff:10.0.0.5":        {pri, "private"},
		"172.16.0.1":             {pri, "private"},
		"192.168.1.1":            {pri, "private"},
		"fd00::1":                {pri, "private"},
		"100.64.1.2":             {pri, "shared (carrier-grade NAT)"},
		"64:ff9b::a00:5":         {pri, "private"}, // NAT64 of 10.0.0.5
		"2002:a00:5::1":          {pri, "private"}, // 6to4 of 10.0.0.5
		"169.254.169.254":        {no, "cloud metadata"},
		"::ffff:169.254.169.254": {no, "cloud metadata"},
		"64:ff9b::a9fe:a9fe":     {no, "cloud metadata"},
		"169.254.170.2":          {no, "cloud metadata"},
		"fd00:ec2::254":          {no, "cloud metadata"},
		"fd20:ce::254":           {no, "cloud metadata"},
		"100.100.100.200":        {no, "cloud metadata"},
		"168.63.129.16":          {no, "cloud metadata (Azure WireServer)"},
		"169.254.1.1":            {no, "link-local"},
		"::ffff:169.254.1.1":     {no, "link-local"},
		"fe80::1":                {no, "link-local"},
		"0.0.0.0":                {no, "unspecified"},
		"::":                     {no, "unspecified"},
		"0.1.2.3":                {no, "this-network"},
		"224.0.0.1":              {no, "multicast"},
		"ff02::1":                {no, "multicast"},
		"255.255.255.255":        {no, "reserved"},
		"198.18.0.1":             {no, "benchmarking"},
		"192.0.2.1":              {no, "documentation"},
		"2001:db8::1":            {no, "documentation"},
		"::a9fe:a9fe":            {no, "reserved IPv6"}, // IPv4-compatible, deprecated
		"fec0::1":                {no, "reserved IPv6"}, // site-local, deprecated
	} {
		a := netip.MustParseAddr(addr)
		c, name := classify(a)
		if name != want.name {
			t.Errorf("classify(%s) name = %q, want %q", addr, name, want.name)
		}
		rank := map[string]Egress{pub: EgressPublic, lo: EgressLoopback, pri: EgressPrivate, no: EgressPrivate + 1}[want.allowedFrom]
		for _, e := range []Egress{EgressPublic, EgressLoopback, EgressPrivate} {
			if got := e.allows(c); got != (e >= rank) {
				t.Errorf("%s under %s: allowed = %v, want %v", addr, e, got, e >= rank)
			}
			err := e.check(netip.AddrPortFrom(a, 443).String())
			if (err == nil) != (e >= rank) {
				t.Errorf("%s under %s: check = %v", addr, e, err)
			}
		}
	}
	if err := EgressLoopback.check("not-an-address"); err == nil {
		t.Error("an unparsable address must be refused")
	}
	for _, s := range []string{"public", "Loopback", " private "} {
		e, err := ParseEgress(s)
		if err != nil || e.String() != strings.ToLower(strings.TrimSpace(s)) {
			t.Errorf("ParseEgress(%q) = %v, %v", s, e, err)
		}
	}
	if _, err := ParseEgress("everything"); err == nil || !strings.Contains(err.Error(), "want public, loopback or private") {
		t.Errorf("ParseEgress(everything): %v", err)
	}
}
