// Package authn authenticates callers of the public API: API keys (verified by the
// orchestrator, which holds their digests, and cached here briefly) and JWTs (verified
// here against a JWKS file or URL, or an HMAC secret when configured). A caller presents
// one credential as `Authorization: Bearer <key or JWT>` or `x-api-key: <key>`.
package authn

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/noetl/noetl/internal/platform/auth"
)

// Defaults of the API key cache.
const (
	DefaultKeyCacheTTL  = 30 * time.Second
	DefaultKeyCacheSize = 10000
	// verifyTimeout bounds one verification of a key by the orchestrator.
	verifyTimeout = 5 * time.Second
)

// Config configures authentication.
type Config struct {
	// Insecure turns authentication off: every caller acts as an admin (and system) of
	// tenant "default". Only `noetl dev --insecure` and NOETL_GATEWAY_INSECURE=true set it.
	Insecure bool
	// KeyCacheTTL is how long a verified (or refused) API key is remembered; a revoked key
	// keeps working for at most this long. Zero means DefaultKeyCacheTTL.
	KeyCacheTTL time.Duration
	// KeyCacheSize bounds the cached keys. Zero means DefaultKeyCacheSize.
	KeyCacheSize int
	// JWT configures JWT authentication; it is off unless a JWKS or an HMAC secret is set.
	JWT JWTConfig
}

// KeyVerifier verifies an API key with the service that stores it. It returns a status
// error with code NotFound for a key that is unknown, wrong, revoked or expired.
type KeyVerifier func(ctx context.Context, key string) (*auth.Principal, error)

// InsecurePrincipal is the caller of a gateway whose authentication is off.
func InsecurePrincipal() *auth.Principal {
	return &auth.Principal{Tenant: "default", Subject: "insecure", Roles: []string{auth.RoleAdmin, auth.RoleSystem}}
}

// Authenticator turns a request's credentials into a principal.
type Authenticator struct {
	insecure bool
	verify   KeyVerifier
	jwt      *jwtVerifier
	keys     *keyCache
	flight   singleflight.Group
}

// New returns an Authenticator. verify checks API keys; client fetches a JWKS URL (nil
// means a client with a 10 s timeout).
func New(cfg Config, verify KeyVerifier, client *http.Client) (*Authenticator, error) {
	a := &Authenticator{insecure: cfg.Insecure, verify: verify}
	if cfg.Insecure {
		return a, nil
	}
	if verify == nil {
		return nil, errors.New("authn: an API key verifier is required")
	}
	ttl, size := cfg.KeyCacheTTL, cfg.KeyCacheSize
	if ttl <= 0 {
		ttl = DefaultKeyCacheTTL
	}
	if size <= 0 {
		size = DefaultKeyCacheSize
	}
	a.keys = newKeyCache(ttl, size)
	if cfg.JWT.Enabled() {
		v, err := newJWTVerifier(cfg.JWT, client)
		if err != nil {
			return nil, err
		}
		a.jwt = v
	}
	return a, nil
}

// errNoCredentials answers a request without credentials.
var errNoCredentials = status.Error(codes.Unauthenticated, "credentials: send `Authorization: Bearer <API key or JWT>` or `x-api-key: <API key>`")

// Authenticate returns the principal of the credentials in md (incoming gRPC metadata),
// or an Unauthenticated error that names what is wrong without echoing the credential.
func (a *Authenticator) Authenticate(ctx context.Context, md metadata.MD) (*auth.Principal, error) {
	if a.insecure {
		return InsecurePrincipal(), nil
	}
	token, err := credential(md)
	if err != nil {
		return nil, err
	}
	if auth.LooksLikeAPIKey(token) {
		return a.apiKey(ctx, token)
	}
	if strings.Count(token, ".") == 2 {
		if a.jwt == nil {
			return nil, status.Error(codes.Unauthenticated, "authorization: JWT authentication is not configured on this gateway")
		}
		return a.jwt.verify(ctx, token)
	}
	return nil, status.Error(codes.Unauthenticated, "authorization: not an API key or a JWT")
}

// Credential kinds of Presented.
const (
	// KindNone: no credential, or more than one.
	KindNone = "none"
	// KindAPIKey: an API key (well-formed or not).
	KindAPIKey = "api_key"
	// KindJWT: something shaped as a JWT.
	KindJWT = "jwt"
	// KindOther: a credential that is neither.
	KindOther = "other"
)

// Presented describes the credential of md without verifying it, for throttling and audit
// lines: its kind, and for a well-formed API key its id (the public part of the key; never
// the secret).
func Presented(md metadata.MD) (kind, keyID string) {
	token, err := credential(md)
	switch {
	case err != nil:
		return KindNone, ""
	case auth.LooksLikeAPIKey(token):
		id, _, _ := auth.ParseAPIKey(token)
		return KindAPIKey, id
	case strings.Count(token, ".") == 2:
		return KindJWT, ""
	}
	return KindOther, ""
}

// credential extracts the one credential of md.
func credential(md metadata.MD) (string, error) {
	authz, keys := md.Get("authorization"), md.Get("x-api-key")
	if len(authz)+len(keys) == 0 {
		return "", errNoCredentials
	}
	if len(authz)+len(keys) > 1 {
		return "", status.Error(codes.Unauthenticated, "credentials: send exactly one of Authorization and x-api-key, once")
	}
	if len(keys) == 1 {
		if k := strings.TrimSpace(keys[0]); k != "" {
			return k, nil
		}
		return "", status.Error(codes.Unauthenticated, "x-api-key: empty")
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(authz[0]), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(token) == "" {
		return "", status.Error(codes.Unauthenticated, "authorization: want `Bearer <API key or JWT>`")
	}
	return strings.TrimSpace(token), nil
}

// errInvalidKey answers a key the orchestrator refused.
var errInvalidKey = status.Error(codes.Unauthenticated, "authorization: invalid, revoked or expired API key")

// apiKey verifies an API key through the cache.
func (a *Authenticator) apiKey(ctx context.Context, key string) (*auth.Principal, error) {
	sum := sha256.Sum256([]byte(key))
	if p, err, ok := a.keys.get(sum); ok {
		return p, err
	}
	v, err, _ := a.flight.Do(string(sum[:]), func() (any, error) {
		vctx, cancel := context.WithTimeout(auth.ServiceCall(context.WithoutCancel(ctx)), verifyTimeout)
		defer cancel()
		p, err := a.verify(vctx, key)
		switch {
		case err == nil:
			a.keys.put(sum, p, nil)
			return p, nil
		case status.Code(err) == codes.NotFound:
			a.keys.put(sum, nil, errInvalidKey)
			return nil, errInvalidKey
		}
		return nil, status.Error(codes.Unavailable, "authentication: API keys cannot be verified right now; retry")
	})
	if err != nil {
		return nil, err
	}
	return v.(*auth.Principal), nil
}

// keyCache remembers verified and refused keys by the SHA-256 of the whole key, for ttl,
// holding at most size entries.
type keyCache struct {
	ttl  time.Duration
	size int
	now  func() time.Time

	mu      sync.Mutex
	entries map[[sha256.Size]byte]keyEntry
}

type keyEntry struct {
	p       *auth.Principal
	err     error
	expires time.Time
}

func newKeyCache(ttl time.Duration, size int) *keyCache {
	return &keyCache{ttl: ttl, size: size, now: time.Now, entries: map[[sha256.Size]byte]keyEntry{}}
}

func (c *keyCache) get(k [sha256.Size]byte) (*auth.Principal, error, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok {
		return nil, nil, false
	}
	if !c.now().Before(e.expires) {
		delete(c.entries, k)
		return nil, nil, false
	}
	return e.p, e.err, true
}

func (c *keyCache) put(k [sha256.Size]byte, p *auth.Principal, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if _, ok := c.entries[k]; !ok && len(c.entries) >= c.size {
		for key, e := range c.entries { // drop what expired
			if !now.Before(e.expires) {
				delete(c.entries, key)
			}
		}
		for key := range c.entries { // still full: drop arbitrary entries (map order)
			if len(c.entries) < c.size {
				break
			}
			delete(c.entries, key)
		}
	}
	c.entries[k] = keyEntry{p: p, err: err, expires: now.Add(c.ttl)}
}

// len returns the number of cached entries.
func (c *keyCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
