package authn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/noetl/noetl/internal/platform/auth"
)

// JWT defaults.
const (
	DefaultJWTAlgorithms = "RS256,ES256"
	DefaultTenantClaim   = "tenant"
	DefaultRolesClaim    = "roles"
	DefaultJWTLeeway     = 30 * time.Second
	DefaultJWKSRefresh   = 5 * time.Minute
	// jwksMinRefresh bounds how often a token naming an unknown key id makes the JWKS be
	// fetched again (key rotation), so forged key ids cannot flood the JWKS endpoint.
	jwksMinRefresh = 30 * time.Second
	// maxJWKSBytes bounds a fetched JWKS document.
	maxJWKSBytes = 1 << 20
	// maxKeyCandidates bounds the keys a token without a key id is tried against.
	maxKeyCandidates = 8
	// maxTokenBytes bounds a presented JWT before it is parsed.
	maxTokenBytes = 16 << 10
)

// JWTConfig configures JWT authentication.
type JWTConfig struct {
	// JWKSFile and JWKSURL locate the JSON Web Key Set of the issuer's public keys; the URL
	// is fetched again after JWKSRefresh, and when a token names a key id it does not hold.
	JWKSFile, JWKSURL string
	// JWKSRefresh is how long a fetched JWKS is used; zero means DefaultJWKSRefresh.
	JWKSRefresh time.Duration
	// Issuer must equal the token's iss; Audience must be one of its aud. Both required.
	Issuer, Audience string
	// Algorithms is the comma-separated allowlist of asymmetric algorithms (RS256, RS384,
	// RS512, PS256, PS384, PS512, ES256, ES384, ES512); empty means DefaultJWTAlgorithms.
	Algorithms string
	// HMACSecret enables HS256 with this shared secret (at least 32 bytes). Without it
	// HS256 tokens are refused.
	HMACSecret string
	// TenantClaim and RolesClaim name the claims that carry the tenant and the roles; a
	// dotted name reaches into objects ("realm_access.roles"). Roles are a list of strings
	// or one space- or comma-separated string; unknown roles are ignored.
	TenantClaim, RolesClaim string
	// Leeway is the clock skew tolerated on exp, nbf and iat; zero means DefaultJWTLeeway.
	Leeway time.Duration
}

// Enabled reports whether JWT authentication is configured.
func (c JWTConfig) Enabled() bool {
	return c.JWKSFile != "" || c.JWKSURL != "" || c.HMACSecret != ""
}

// asymmetric lists the algorithms the allowlist may name.
var asymmetric = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512, jose.ES256, jose.ES384, jose.ES512}

type jwtVerifier struct {
	algs        []jose.SignatureAlgorithm
	hmac        []byte
	keys        *jwks
	issuer      string
	audience    string
	tenantClaim string
	rolesClaim  string
	leeway      time.Duration
	now         func() time.Time
}

func newJWTVerifier(c JWTConfig, client *http.Client) (*jwtVerifier, error) {
	if c.Issuer == "" || c.Audience == "" {
		return nil, errors.New("jwt: the issuer and the audience are required (NOETL_GATEWAY_JWT_ISSUER, NOETL_GATEWAY_JWT_AUDIENCE)")
	}
	if c.JWKSFile != "" && c.JWKSURL != "" {
		return nil, errors.New("jwt: set one of NOETL_GATEWAY_JWKS_FILE and NOETL_GATEWAY_JWKS_URL")
	}
	v := &jwtVerifier{
		issuer: c.Issuer, audience: c.Audience, tenantClaim: c.TenantClaim, rolesClaim: c.RolesClaim, leeway: c.Leeway, now: time.Now,
	}
	if v.tenantClaim == "" {
		v.tenantClaim = DefaultTenantClaim
	}
	if v.rolesClaim == "" {
		v.rolesClaim = DefaultRolesClaim
	}
	if v.leeway <= 0 {
		v.leeway = DefaultJWTLeeway
	}
	if c.JWKSFile != "" || c.JWKSURL != "" {
		names := c.Algorithms
		if names == "" {
			names = DefaultJWTAlgorithms
		}
		for _, n := range strings.Split(names, ",") {
			alg := jose.SignatureAlgorithm(strings.TrimSpace(n))
			if !slices.Contains(asymmetric, alg) {
				return nil, fmt.Errorf("jwt: algorithm %q is not allowed (want some of RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512; HS256 comes with an HMAC secret)", n)
			}
			if !slices.Contains(v.algs, alg) {
				v.algs = append(v.algs, alg)
			}
		}
		v.keys = newJWKS(c, client)
	}
	if c.HMACSecret != "" {
		if len(c.HMACSecret) < 32 {
			return nil, errors.New("jwt: the HMAC secret must be at least 32 bytes")
		}
		v.hmac = []byte(c.HMACSecret)
		v.algs = append(v.algs, jose.HS256)
	}
	return v, nil
}

func tokenError(format string, args ...any) error {
	return status.Errorf(codes.Unauthenticated, "token: "+format, args...)
}

// verify checks a JWT's signature, algorithm, iss, aud, exp, nbf and iat, and maps its
// claims to a principal.
func (v *jwtVerifier) verify(ctx context.Context, raw string) (*auth.Principal, error) {
	if len(raw) > maxTokenBytes {
		return nil, tokenError("longer than %d bytes", maxTokenBytes)
	}
	tok, err := josejwt.ParseSigned(raw, v.algs)
	if err != nil {
		return nil, tokenError("malformed, or signed with an algorithm that is not allowed")
	}
	if len(tok.Headers) != 1 {
		return nil, tokenError("exactly one signature is required")
	}
	h := tok.Headers[0]
	alg := jose.SignatureAlgorithm(h.Algorithm)
	var candidates []any
	if alg == jose.HS256 {
		candidates = []any{v.hmac}
	} else {
		if candidates, err = v.keys.lookup(ctx, h.KeyID, alg); err != nil {
			return nil, err
		}
	}
	var std josejwt.Claims
	var claims map[string]any
	verified := false
	for _, key := range candidates {
		if tok.Claims(key, &std, &claims) == nil {
			verified = true
			break
		}
	}
	if !verified {
		return nil, tokenError("signature does not verify with any key of the issuer")
	}
	if std.Expiry == nil {
		return nil, tokenError("exp is required")
	}
	err = std.ValidateWithLeeway(josejwt.Expected{Issuer: v.issuer, AnyAudience: josejwt.Audience{v.audience}, Time: v.now()}, v.leeway)
	switch {
	case errors.Is(err, josejwt.ErrExpired):
		return nil, tokenError("expired")
	case errors.Is(err, josejwt.ErrNotValidYet):
		return nil, tokenError("not valid yet (nbf)")
	case errors.Is(err, josejwt.ErrIssuedInTheFuture):
		return nil, tokenError("issued in the future (iat)")
	case errors.Is(err, josejwt.ErrInvalidIssuer):
		return nil, tokenError("iss is not %q", v.issuer)
	case errors.Is(err, josejwt.ErrInvalidAudience):
		return nil, tokenError("aud does not include %q", v.audience)
	case err != nil:
		return nil, tokenError("claims do not validate")
	}
	tenant, _ := claim(claims, v.tenantClaim).(string)
	if tenant == "" {
		return nil, tokenError("claim %q (the tenant) is missing or not a string", v.tenantClaim)
	}
	if err := auth.CheckTenant("token: claim "+v.tenantClaim, tenant); err != nil {
		return nil, status.Error(codes.Unauthenticated, status.Convert(err).Message())
	}
	return &auth.Principal{Tenant: tenant, Subject: "jwt:" + std.Subject, Roles: roles(claim(claims, v.rolesClaim))}, nil
}

// claim returns the value at a dotted path of claims, or nil.
func claim(claims map[string]any, path string) any {
	var cur any = claims
	for _, part := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	return cur
}

// roles returns the known roles named by a roles claim.
func roles(v any) []string {
	var names []string
	switch r := v.(type) {
	case string:
		names = strings.FieldsFunc(r, func(c rune) bool { return c == ' ' || c == ',' })
	case []any:
		for _, x := range r {
			if s, ok := x.(string); ok {
				names = append(names, s)
			}
		}
	}
	var out []string
	for _, n := range names {
		if auth.ValidRole(n) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// jwks holds an issuer's key set, loaded from a file or a URL and refreshed.
type jwks struct {
	file, url string
	ttl       time.Duration
	client    *http.Client
	now       func() time.Time

	mu      sync.Mutex
	set     *jose.JSONWebKeySet
	fetched time.Time // when set was loaded
	tried   time.Time // last load attempt
}

func newJWKS(c JWTConfig, client *http.Client) *jwks {
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	ttl := c.JWKSRefresh
	if ttl <= 0 {
		ttl = DefaultJWKSRefresh
	}
	return &jwks{file: c.JWKSFile, url: c.JWKSURL, ttl: ttl, client: client, now: time.Now}
}

// lookup returns the public keys that may have signed a token with key id kid and
// algorithm alg, reloading the set when it is stale or lacks kid (at most every
// jwksMinRefresh).
func (j *jwks) lookup(ctx context.Context, kid string, alg jose.SignatureAlgorithm) ([]any, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	now := j.now()
	if j.set == nil || now.Sub(j.fetched) >= j.ttl {
		j.reload(ctx, now)
	}
	keys := match(j.set, kid, alg)
	if len(keys) == 0 && kid != "" && now.Sub(j.tried) >= jwksMinRefresh {
		j.reload(ctx, now)
		keys = match(j.set, kid, alg)
	}
	if j.set == nil {
		return nil, status.Error(codes.Unavailable, "token: the issuer's keys (JWKS) cannot be loaded; retry")
	}
	if len(keys) == 0 {
		return nil, tokenError("no key of the issuer matches kid %q and alg %s", kid, alg)
	}
	return keys, nil
}

// reload loads the set, keeping the previous one when loading fails. Attempts are spaced
// by jwksMinRefresh (a second while no set was ever loaded), so an unreachable JWKS does
// not hold every verification up. Callers hold j.mu.
func (j *jwks) reload(ctx context.Context, now time.Time) {
	wait := jwksMinRefresh
	if j.set == nil {
		wait = time.Second
	}
	if !j.tried.IsZero() && now.Sub(j.tried) < wait {
		return
	}
	j.tried = now
	set, err := j.load(ctx)
	if err != nil {
		return
	}
	j.set, j.fetched = set, now
}

func (j *jwks) load(ctx context.Context) (*jose.JSONWebKeySet, error) {
	var b []byte
	if j.file != "" {
		var err error
		if b, err = os.ReadFile(j.file); err != nil {
			return nil, err
		}
	} else {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.url, nil)
		if err != nil {
			return nil, err
		}
		resp, err := j.client.Do(req)
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("jwks: %s", resp.Status)
		}
		if b, err = io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1)); err != nil {
			return nil, err
		}
		if len(b) > maxJWKSBytes {
			return nil, errors.New("jwks: document too large")
		}
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, err
	}
	return &set, nil
}

// match returns the public keys of set that fit kid (when given) and alg: a key whose use
// is not "sig", whose alg is another, or whose type does not fit alg is never tried, so an
// RSA key is never used as an HMAC secret and an EC key is used only with its curve.
func match(set *jose.JSONWebKeySet, kid string, alg jose.SignatureAlgorithm) []any {
	if set == nil {
		return nil
	}
	var out []any
	for _, k := range set.Keys {
		if len(out) == maxKeyCandidates {
			break
		}
		if (kid != "" && k.KeyID != kid) || (k.Use != "" && k.Use != "sig") || (k.Algorithm != "" && k.Algorithm != string(alg)) {
			continue
		}
		pub := k.Public()
		if !pub.Valid() {
			continue
		}
		if fits(pub.Key, alg) {
			out = append(out, pub.Key)
		}
	}
	return out
}

// fits reports whether a public key may verify alg.
func fits(key any, alg jose.SignatureAlgorithm) bool {
	switch k := key.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(string(alg), "RS") || strings.HasPrefix(string(alg), "PS")
	case *ecdsa.PublicKey:
		switch alg {
		case jose.ES256:
			return k.Curve == elliptic.P256()
		case jose.ES384:
			return k.Curve == elliptic.P384()
		case jose.ES512:
			return k.Curve == elliptic.P521()
		}
	}
	return false
}
