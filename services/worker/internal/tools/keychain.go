package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/internal/playbook/template"
)

// Keychain defaults.
const (
	// DefaultKeychainCache bounds the OAuth2 tokens a worker keeps.
	DefaultKeychainCache = 1024
	// DefaultTokenTTL is how long a token whose response states no lifetime (and whose
	// entry sets no ttl_seconds) is kept.
	DefaultTokenTTL = time.Hour
	// tokenMargin is how long before its expiry a cached token is fetched anew (at most;
	// a tenth of the lifetime for a short-lived one), so no tool is handed a token that
	// expires on its way.
	tokenMargin = time.Minute
)

// Keychain resolves the keychain entries a command carries (Command.keychain_json, the
// playbook's declarations its templates reference) into the values templates read as
// keychain.<name>.<field>. It runs in the worker only: the orchestrator never resolves a
// keychain entry, and no resolved value enters an event.
//
//   - kind credential: the stored credential named by auth (or credential; default: the
//     entry's name), through Resolve as the tools' auth is; its fields are the entry's.
//   - kind oauth2: a token from the entry's endpoint (token_url), POSTed as a form (data,
//     default grant_type client_credentials; an auth credential adds its client_id,
//     client_secret and scope) or as json, through the http tool (its egress policy,
//     timeouts and body cap). The response's fields are the entry's (access_token,
//     token_type, ...; token_field names the one that must be present). The token is
//     cached per tenant and request until shortly before it expires (ttl_field, default
//     expires_in; else ttl_seconds; else DefaultTokenTTL).
//
// Every value resolved, fetched or taken from the cache, is registered with the command's
// scrubber (Register), so it is masked wherever the command's result, events and logs
// would carry it.
type Keychain struct {
	// Resolve fetches stored credentials by name (for the tenant in ctx).
	Resolve CredentialResolver
	// Register adds a secret value to the scrubber of the command ctx runs.
	Register func(ctx context.Context, value string)
	// HTTP sends the token requests (with its egress check).
	HTTP *HTTP
	// MaxCached bounds the cached tokens (zero: DefaultKeychainCache).
	MaxCached int
	// Now is the clock of token expiry (nil: time.Now).
	Now func() time.Time

	mu     sync.Mutex
	tokens map[string]cachedToken
	group  singleflight.Group
}

type cachedToken struct {
	fields map[string]any
	// renew is when the token stops being handed out (shortly before it expires).
	renew time.Time
}

// Load resolves the entries of decls (a JSON list of declarations) into into, by
// name, each after the entries it reads; render renders a value with the variables the
// command's templates see, which hold into as keychain.
func (k *Keychain) Load(ctx context.Context, tenant string, decls []byte, into map[string]any, render func(any) (any, error)) error {
	var entries []map[string]any
	if err := json.Unmarshal(decls, &entries); err != nil {
		return &Error{Msg: fmt.Sprintf("keychain: malformed declarations: %v", err)}
	}
	byName := make(map[string]map[string]any, len(entries))
	for _, e := range entries {
		name, _ := e["name"].(string)
		if name == "" {
			return &Error{Msg: "keychain: an entry has no name"}
		}
		byName[name] = e
	}
	state := map[string]int{} // 1: being resolved, 2: done
	var resolve func(name string) error
	resolve = func(name string) error {
		switch state[name] {
		case 1:
			return &Error{Msg: fmt.Sprintf("keychain %q: entries read each other in a cycle", name)}
		case 2:
			return nil
		}
		state[name] = 1
		e := byName[name]
		deps, _ := template.KeychainRefs(e)
		for _, d := range deps {
			if _, ok := byName[d]; !ok {
				return &Error{Msg: fmt.Sprintf("keychain %q reads keychain.%s, which the command does not carry", name, d)}
			}
			if err := resolve(d); err != nil {
				return err
			}
		}
		fields, err := k.entry(ctx, tenant, name, e, render)
		if err != nil {
			return err
		}
		registerValues(ctx, k.register, fields)
		into[name] = fields
		state[name] = 2
		return nil
	}
	for _, e := range entries {
		if err := resolve(e["name"].(string)); err != nil {
			return err
		}
	}
	return nil
}

func (k *Keychain) register(ctx context.Context, v string) {
	if k.Register != nil {
		k.Register(ctx, v)
	}
}

// entry resolves one declaration.
func (k *Keychain) entry(ctx context.Context, tenant, name string, decl map[string]any, render func(any) (any, error)) (map[string]any, error) {
	kind, _ := decl["kind"].(string)
	body := make(map[string]any, len(decl))
	for key, v := range decl {
		if key != "name" && key != "kind" {
			body[key] = v
		}
	}
	rv, err := render(body)
	if err != nil {
		return nil, &Error{Msg: fmt.Sprintf("keychain %q: %v", name, err)}
	}
	cfg, _ := rv.(map[string]any)
	what := fmt.Sprintf("keychain %q", name)
	switch kind {
	case playbook.KeychainCredential:
		auth := cfgAuth(cfg)
		if auth == nil {
			auth = name
		}
		ra, err := resolveAuth(ctx, k.Resolve, what, auth)
		if err != nil {
			return nil, err
		}
		if ra == nil || ra.name == "" {
			return nil, &Error{Msg: what + ": auth must name a stored credential"}
		}
		out := make(map[string]any, len(ra.data))
		for f, v := range ra.data {
			out[f] = v
		}
		return out, nil
	case playbook.KeychainOAuth2:
		return k.oauth2(ctx, tenant, name, cfg)
	default:
		return nil, &Error{Msg: fmt.Sprintf("%s: kind %q is not supported (this worker resolves: %s)", what, kind, strings.Join(playbook.KeychainKinds, ", "))}
	}
}

// cfgAuth is an entry's auth (or credential) value, nil when it sets none.
func cfgAuth(cfg map[string]any) any {
	for _, key := range []string{"auth", "credential"} {
		if v, ok := cfg[key]; ok && v != nil && v != "" {
			return v
		}
	}
	return nil
}

// oauth2 returns the token response of an oauth2 entry, cached or fetched.
func (k *Keychain) oauth2(ctx context.Context, tenant, name string, cfg map[string]any) (map[string]any, error) {
	what := fmt.Sprintf("keychain %q (oauth2)", name)
	var creds map[string]any
	if auth := cfgAuth(cfg); auth != nil {
		ra, err := resolveAuth(ctx, k.Resolve, what, auth)
		if err != nil {
			return nil, err
		}
		if ra != nil {
			creds = ra.data
		}
	}
	endpoint := cfgString(cfg, "endpoint", "token_url", "url")
	if endpoint == "" {
		endpoint = cfgString(creds, "token_url", "endpoint")
	}
	if endpoint == "" {
		return nil, &Error{Msg: what + ": endpoint (the token URL) is required"}
	}
	method := strings.ToUpper(cfgString(cfg, "method"))
	if method == "" {
		method = "POST"
	}
	renew, _ := cfg["renew_config"].(map[string]any)
	tokenField := cfgString(cfg, "token_field")
	if tokenField == "" {
		tokenField = cfgString(renew, "token_field")
	}
	if tokenField == "" {
		tokenField = "access_token"
	}
	ttlField := cfgString(cfg, "ttl_field")
	if ttlField == "" {
		ttlField = cfgString(renew, "ttl_field")
	}
	if ttlField == "" {
		ttlField = "expires_in"
	}
	req := map[string]any{"url": endpoint, "method": method, "follow_redirects": false}
	if h, ok := cfg["headers"]; ok && h != nil {
		req["headers"] = h
	}
	if j, ok := cfg["json"]; ok && j != nil {
		req["json"] = j
	} else {
		form := map[string]any{}
		if d, ok := cfg["data"]; ok && d != nil {
			m, ok := d.(map[string]any)
			if !ok {
				return nil, &Error{Msg: fmt.Sprintf("%s: data must be a map of form fields, got %T", what, d)}
			}
			for f, v := range m {
				form[f] = v
			}
		}
		if _, ok := form["grant_type"]; !ok {
			form["grant_type"] = "client_credentials"
		}
		for _, f := range []string{"client_id", "client_secret", "scope", "audience"} {
			if _, ok := form[f]; !ok {
				if v := cfgString(creds, f); v != "" {
					form[f] = v
				}
			}
		}
		req["form"] = form
	}
	key, err := tokenKey(tenant, name, req)
	if err != nil {
		return nil, &Error{Msg: fmt.Sprintf("%s: request is not JSON-encodable: %v", what, err)}
	}
	if fields, ok := k.cached(key); ok {
		return fields, nil
	}
	// One request per token however many commands want it at once. It runs apart from
	// the cancellation of the command that started it (the http tool's timeout bounds
	// it), so that command's end does not fail the others; each waits on its own context.
	fetchCtx := context.WithoutCancel(ctx)
	ch := k.group.DoChan(key, func() (any, error) {
		if fields, ok := k.cached(key); ok {
			return fields, nil
		}
		return k.fetch(fetchCtx, what, key, req, tokenField, ttlField, cfg["ttl_seconds"])
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return copyFields(r.Val.(map[string]any)), nil
	case <-ctx.Done():
		return nil, &Error{Msg: fmt.Sprintf("%s: token request: %v", what, context.Cause(ctx)), Retryable: true}
	}
}

// fetch calls the token endpoint and caches the token.
func (k *Keychain) fetch(ctx context.Context, what, key string, req map[string]any, tokenField, ttlField string, ttlSeconds any) (map[string]any, error) {
	if k.HTTP == nil {
		return nil, &Error{Msg: what + ": this worker cannot call token endpoints"}
	}
	res, err := k.HTTP.Run(ctx, &Call{Kind: "http", Config: req})
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "http: ")
		retry := false
		var te *Error
		if errors.As(err, &te) {
			retry = te.Retryable
		}
		return nil, &Error{Msg: fmt.Sprintf("%s: token request: %s", what, msg), Retryable: retry}
	}
	out, _ := res.(map[string]any)
	code, _ := out["status_code"].(int)
	if code < 200 || code > 299 {
		body := fmt.Sprint(out["body"])
		if len(body) > 512 {
			body = body[:512] + "..."
		}
		return nil, &Error{Msg: fmt.Sprintf("%s: token endpoint %s %s answered %d: %s", what, req["method"], req["url"], code, body),
			Retryable: code == 429 || code >= 500}
	}
	fields, ok := out["body"].(map[string]any)
	if !ok {
		return nil, &Error{Msg: fmt.Sprintf("%s: token endpoint %s answered a body that is not a JSON object", what, req["url"])}
	}
	if tok := cfgString(fields, tokenField); tok == "" {
		have := slices.Sorted(maps.Keys(fields))
		return nil, &Error{Msg: fmt.Sprintf("%s: the token response has no %s (it has: %s)", what, tokenField, strings.Join(have, ", "))}
	}
	ttl := DefaultTokenTTL
	if n, ok := cfgNumber(fields[ttlField]); ok {
		ttl = time.Duration(n * float64(time.Second))
	} else if n, ok := cfgNumber(ttlSeconds); ok {
		ttl = time.Duration(n * float64(time.Second))
	}
	if ttl > 0 {
		k.store(key, fields, ttl)
	}
	return fields, nil
}

func (k *Keychain) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}

// cached returns a copy of the token cached under key while it is not due for renewal.
func (k *Keychain) cached(key string) (map[string]any, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	t, ok := k.tokens[key]
	if !ok {
		return nil, false
	}
	if !k.now().Before(t.renew) {
		delete(k.tokens, key)
		return nil, false
	}
	return copyFields(t.fields), true
}

// store caches a token of lifetime ttl, evicting the expired tokens, then the one due
// soonest, when the cache is full.
func (k *Keychain) store(key string, fields map[string]any, ttl time.Duration) {
	margin := min(tokenMargin, ttl/10)
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.tokens == nil {
		k.tokens = map[string]cachedToken{}
	}
	limit := k.MaxCached
	if limit <= 0 {
		limit = DefaultKeychainCache
	}
	if _, ok := k.tokens[key]; !ok && len(k.tokens) >= limit {
		soonest := ""
		for kk, t := range k.tokens {
			if !now.Before(t.renew) {
				delete(k.tokens, kk)
				continue
			}
			if soonest == "" || t.renew.Before(k.tokens[soonest].renew) {
				soonest = kk
			}
		}
		if len(k.tokens) >= limit && soonest != "" {
			delete(k.tokens, soonest)
		}
	}
	k.tokens[key] = cachedToken{fields: copyFields(fields), renew: now.Add(ttl - margin)}
}

// Cached reports how many tokens the keychain holds.
func (k *Keychain) Cached() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.tokens)
}

// tokenKey identifies a token: the tenant, the entry and a digest of the rendered
// request (endpoint, client credentials, ...), so two playbooks' entries of one name
// never share a token unless they ask for the same one.
func tokenKey(tenant, name string, req map[string]any) (string, error) {
	b, err := json.Marshal(req) // map keys are sorted: one request, one digest
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return tenant + "\x00" + name + "\x00" + hex.EncodeToString(sum[:]), nil
}

func copyFields(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
