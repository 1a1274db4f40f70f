package tools

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Defaults of the http tool.
const (
	// DefaultHTTPTimeout bounds a whole request (connect, send, receive the body) unless
	// the tool sets timeout_seconds.
	DefaultHTTPTimeout = 30 * time.Second
	// HTTPConnectTimeout bounds establishing one TCP connection.
	HTTPConnectTimeout = 10 * time.Second
	// DefaultHTTPMaxBody caps the response body the http tool reads.
	DefaultHTTPMaxBody = 10 << 20
	// httpMaxRedirects is the most redirects the http tool follows (OWASP's advice for a
	// server-side fetcher: each hop is another address to check).
	httpMaxRedirects = 5
)

// HTTP is the http tool (kind http). It sends one request and returns the response as
// {status_code, headers, body, url, elapsed_ms}; a non-2xx status is a result, not an
// error, so step policies can route on it. Transport failures and timeouts fail with a
// retryable *Error.
//
// Config keys: url (required), method (default GET), headers (map), params (query
// map), one body of json / data (legacy, sent as JSON) / form (map, url-encoded) /
// body (string, sent as is), timeout_seconds (default 30), follow_redirects (default
// true, at most 10), auth (credential name whose data holds token, username and
// password, or headers). The header Idempotency-Key: <command id> is sent unless the
// config sets one.
//
// Egress says which addresses it may connect to: public ones only (the default), also
// loopback, or also private ranges; link-local addresses, cloud metadata endpoints
// (169.254.169.254 and the others metadataAddrs lists), unspecified, multicast and
// reserved addresses are refused whatever the policy. The check runs on the resolved
// address at dial time, before the connection is attempted, so DNS rebinding and
// redirects cannot get around it, and no packet is sent to a refused address.
// Environment proxies are not used.
type HTTP struct {
	// Egress is the policy on the addresses the tool may reach (zero: EgressPublic).
	Egress Egress
	// Resolve fetches credentials named by auth; nil means auth cannot be used.
	Resolve CredentialResolver
	// MaxBodyBytes caps the response body (default DefaultHTTPMaxBody).
	MaxBodyBytes int64

	once      sync.Once
	transport *http.Transport
}

// Run implements Tool.
func (h *HTTP) Run(ctx context.Context, c *Call) (any, error) {
	h.once.Do(h.init)
	req, timeout, follow, err := h.buildRequest(ctx, c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req = req.WithContext(ctx)

	client := &http.Client{
		Transport: h.transport,
		CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if !follow {
				return http.ErrUseLastResponse
			}
			if len(via) >= httpMaxRedirects {
				return fmt.Errorf("stopped after %d redirects", httpMaxRedirects)
			}
			return nil
		},
	}
	what := req.Method + " " + req.URL.Redacted()
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		err = h.transportError(ctx, what, timeout, err)
		c.Log.Diagnostic("%s: %v (after %s)", logURL(req), err, time.Since(start).Round(time.Millisecond))
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()

	limit := h.MaxBodyBytes
	if limit <= 0 {
		limit = DefaultHTTPMaxBody
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, h.transportError(ctx, what, timeout, err)
	}
	if int64(len(raw)) > limit {
		return nil, &Error{Msg: fmt.Sprintf("http: %s: response body exceeds the %s cap", what, byteSize(limit))}
	}
	elapsed := time.Since(start)
	c.Log.Diagnostic("%s -> %s in %s, %d bytes", logURL(req), resp.Status, elapsed.Round(time.Millisecond), len(raw))

	headers := make(map[string]any, len(resp.Header))
	for k, vs := range resp.Header {
		headers[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	out := map[string]any{
		"status_code": resp.StatusCode,
		"headers":     headers,
		"url":         resp.Request.URL.String(),
		"elapsed_ms":  elapsed.Milliseconds(),
	}
	body, encoding := decodeBody(resp.Header.Get("Content-Type"), raw)
	out["body"] = body
	if encoding != "" {
		out["body_encoding"] = encoding
	}
	return out, nil
}

// logURL is a request's method and URL for the step's logs: no user information and no
// query values (where tokens and keys travel), only the names of the query parameters.
func logURL(req *http.Request) string {
	u := *req.URL
	u.User = nil
	q := u.Query()
	u.RawQuery, u.Fragment, u.RawFragment = "", "", ""
	s := req.Method + " " + u.String()
	if len(q) > 0 {
		s += "?" + strings.Join(sortedKeys(queryKeys(q)), "&") + " (query values not logged)"
	}
	return s
}

func queryKeys(q url.Values) map[string]any {
	m := make(map[string]any, len(q))
	for k := range q {
		m[k] = nil
	}
	return m
}

// init builds the shared transport, with the egress policy's address check.
func (h *HTTP) init() {
	d := &net.Dialer{Timeout: HTTPConnectTimeout, KeepAlive: 30 * time.Second, Control: h.Egress.control}
	h.transport = &http.Transport{
		Proxy:                 nil, // a proxy would make the dial-time check see only the proxy
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   HTTPConnectTimeout,
		ExpectContinueTimeout: time.Second,
	}
}

// CloseIdleConnections closes connections kept alive for reuse.
func (h *HTTP) CloseIdleConnections() {
	h.once.Do(h.init)
	h.transport.CloseIdleConnections()
}

// buildRequest turns the rendered config into a request, its timeout and whether to
// follow redirects.
func (h *HTTP) buildRequest(ctx context.Context, c *Call) (*http.Request, time.Duration, bool, error) {
	cfg := c.Config
	fail := func(format string, a ...any) (*http.Request, time.Duration, bool, error) {
		return nil, 0, false, &Error{Msg: "http: " + fmt.Sprintf(format, a...)}
	}
	rawURL := strings.TrimSpace(cfgString(cfg, "url", "endpoint"))
	if rawURL == "" {
		return fail("tool.url is required")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return fail("bad url: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fail("url %q: scheme must be http or https", u.Redacted())
	}
	if u.Host == "" {
		return fail("url %q has no host", u.Redacted())
	}
	method := strings.ToUpper(strings.TrimSpace(cfgString(cfg, "method")))
	if method == "" {
		method = http.MethodGet
	}
	if v, ok := cfg["params"]; ok && v != nil {
		params, ok := v.(map[string]any)
		if !ok {
			return fail("tool.params must be a map, got %T", v)
		}
		q := u.Query()
		for _, k := range sortedKeys(params) {
			switch pv := params[k].(type) {
			case nil:
			case []any:
				for _, e := range pv {
					q.Add(k, scalarString(e))
				}
			default:
				q.Set(k, scalarString(pv))
			}
		}
		u.RawQuery = q.Encode()
	}

	timeout := DefaultHTTPTimeout
	if v, ok := cfg["timeout_seconds"]; ok && v != nil {
		f, ok := cfgNumber(v)
		if !ok || f <= 0 {
			return fail("tool.timeout_seconds must be a positive number, got %v", v)
		}
		timeout = time.Duration(f * float64(time.Second))
	}
	follow, err := cfgBool(cfg["follow_redirects"], true)
	if err != nil {
		return fail("tool.follow_redirects: %v", err)
	}

	// Body: exactly one of json, data (legacy, JSON), form, body.
	var body io.Reader
	var contentType string
	var set []string
	for _, k := range []string{"json", "data", "form", "body"} {
		if v, ok := cfg[k]; ok && v != nil {
			set = append(set, k)
		}
	}
	if len(set) > 1 {
		return fail("set only one of tool.json, tool.data, tool.form, tool.body (got %s)", strings.Join(set, ", "))
	}
	if len(set) == 1 {
		switch k := set[0]; k {
		case "json", "data":
			b, err := json.Marshal(cfg[k])
			if err != nil {
				return fail("tool.%s is not JSON-encodable: %v", k, err)
			}
			body, contentType = bytes.NewReader(b), "application/json"
		case "form":
			m, ok := cfg[k].(map[string]any)
			if !ok {
				return fail("tool.form must be a map, got %T", cfg[k])
			}
			vals := url.Values{}
			for _, fk := range sortedKeys(m) {
				switch fv := m[fk].(type) {
				case nil:
				case []any:
					for _, e := range fv {
						vals.Add(fk, scalarString(e))
					}
				default:
					vals.Set(fk, scalarString(fv))
				}
			}
			body, contentType = strings.NewReader(vals.Encode()), "application/x-www-form-urlencoded"
		case "body":
			switch b := cfg[k].(type) {
			case string:
				body = strings.NewReader(b)
			default:
				enc, err := json.Marshal(b)
				if err != nil {
					return fail("tool.body is not a string nor JSON-encodable: %v", err)
				}
				body, contentType = bytes.NewReader(enc), "application/json"
			}
		}
	}

	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return fail("%v", err)
	}
	if v, ok := cfg["headers"]; ok && v != nil {
		hdrs, ok := v.(map[string]any)
		if !ok {
			return fail("tool.headers must be a map, got %T", v)
		}
		for k, hv := range hdrs {
			if hv == nil {
				continue
			}
			if strings.EqualFold(k, "Host") {
				req.Host = scalarString(hv)
				continue
			}
			req.Header.Set(k, scalarString(hv))
		}
	}
	if contentType != "" && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", contentType)
	}
	if req.Header.Get("Idempotency-Key") == "" && c.CommandID != "" {
		req.Header.Set("Idempotency-Key", c.CommandID)
	}
	if err := h.applyAuth(ctx, req, cfg["auth"]); err != nil {
		return nil, 0, false, err
	}
	return req, timeout, follow, nil
}

// applyAuth sets the headers a credential calls for: Authorization: Bearer for a
// token, basic auth for username and password, or the credential's own headers.
func (h *HTTP) applyAuth(ctx context.Context, req *http.Request, auth any) error {
	ra, err := resolveAuth(ctx, h.Resolve, "http", auth)
	if err != nil || ra == nil {
		return err
	}
	label := "inline auth"
	if ra.name != "" {
		label = fmt.Sprintf("credential %q", ra.name)
	}
	d := ra.data
	if hv, ok := d["headers"].(map[string]any); ok && len(hv) > 0 {
		for k, v := range hv {
			req.Header.Set(k, scalarString(v))
		}
		return nil
	}
	if tok := cfgString(d, "token", "access_token", "bearer_token", "api_token"); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
		return nil
	}
	if user := cfgString(d, "username", "user"); user != "" {
		req.SetBasicAuth(user, cfgString(d, "password"))
		return nil
	}
	return &Error{Msg: fmt.Sprintf("http: %s (type %q) has no token, username/password or headers", label, ra.typ)}
}

// transportError classifies a failure to get a response.
func (h *HTTP) transportError(ctx context.Context, what string, timeout time.Duration, err error) error {
	var blocked *blockedAddrError
	if errors.As(err, &blocked) {
		return &Error{Msg: fmt.Sprintf("http: %s: %s", what, blocked.Error())}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return &Error{Msg: fmt.Sprintf("http: %s: timed out after %s", what, timeout), Retryable: true}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return &Error{Msg: fmt.Sprintf("http: %s: %v", what, err), Retryable: true}
}

// decodeBody returns a JSON body decoded when the content type says JSON or the body
// is a JSON object or array; otherwise the text, or base64 with encoding "base64" when
// the body is not UTF-8.
func decodeBody(contentType string, raw []byte) (any, string) {
	ct := strings.ToLower(contentType)
	isJSON := strings.Contains(ct, "/json") || strings.Contains(ct, "+json")
	trimmed := bytes.TrimSpace(raw)
	looksJSON := len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[')
	if (isJSON && len(trimmed) > 0) || looksJSON {
		var v any
		if err := json.Unmarshal(trimmed, &v); err == nil {
			return v, ""
		}
	}
	if !utf8.Valid(raw) {
		return base64.StdEncoding.EncodeToString(raw), "base64"
	}
	return string(raw), ""
}

// scalarString formats a config value for a header, query or form field.
func scalarString(v any) string {
	switch s := v.(type) {
	case nil:
		return ""
	case string:
		return s
	case float64:
		return strconv.FormatFloat(s, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(s)
	case map[string]any, []any:
		b, err := json.Marshal(s)
		if err == nil {
			return string(b)
		}
	}
	return fmt.Sprint(v)
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// byteSize renders n bytes as MiB/KiB when exact, else bytes.
func byteSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
