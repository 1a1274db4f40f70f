package authn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/noetl/noetl/internal/platform/auth"
)

const (
	issuer   = "https://id.example.test/"
	audience = "noetl"
)

// issuerKeys is an identity provider's signing keys.
type issuerKeys struct {
	rsa *rsa.PrivateKey
	ec  *ecdsa.PrivateKey
}

var (
	keysOnce sync.Once
	keys     issuerKeys
)

func testKeys(t *testing.T) issuerKeys {
	t.Helper()
	keysOnce.Do(func() {
		var err error
		if keys.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
		if keys.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			panic(err)
		}
	})
	return keys
}

func (k issuerKeys) jwks(t *testing.T) []byte {
	t.Helper()
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &k.rsa.PublicKey, KeyID: "rsa1", Algorithm: string(jose.RS256), Use: "sig"},
		{Key: &k.ec.PublicKey, KeyID: "ec1", Algorithm: string(jose.ES256), Use: "sig"},
	}})
	require.NoError(t, err)
	return b
}

func sign(t *testing.T, alg jose.SignatureAlgorithm, key any, kid string, claims map[string]any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if kid != "" {
		opts = opts.WithHeader("kid", kid)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	require.NoError(t, err)
	tok, err := josejwt.Signed(s).Claims(claims).Serialize()
	require.NoError(t, err)
	return tok
}

// claims returns valid claims, with over applied (a nil value deletes a claim).
func claims(over map[string]any) map[string]any {
	now := time.Now()
	c := map[string]any{
		"iss": issuer, "aud": []string{"other", audience}, "sub": "alice",
		"exp": now.Add(time.Hour).Unix(), "nbf": now.Add(-time.Minute).Unix(), "iat": now.Unix(),
		"tenant": "acme", "roles": []string{"operator", "wizard"},
	}
	for k, v := range over {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

func fileAuthenticator(t *testing.T, cfg JWTConfig) *Authenticator {
	t.Helper()
	k := testKeys(t)
	path := filepath.Join(t.TempDir(), "jwks.json")
	require.NoError(t, os.WriteFile(path, k.jwks(t), 0o600))
	cfg.JWKSFile, cfg.Issuer, cfg.Audience = path, issuer, audience
	a, err := New(Config{JWT: cfg}, (&fakeKeys{}).verify, nil)
	require.NoError(t, err)
	return a
}

func TestJWTsOfTheIssuerAuthenticate(t *testing.T) {
	t.Parallel()
	k := testKeys(t)
	a := fileAuthenticator(t, JWTConfig{})
	for name, tok := range map[string]string{
		"RS256":        sign(t, jose.RS256, k.rsa, "rsa1", claims(nil)),
		"ES256":        sign(t, jose.ES256, k.ec, "ec1", claims(nil)),
		"no kid":       sign(t, jose.RS256, k.rsa, "", claims(nil)),
		"aud string":   sign(t, jose.ES256, k.ec, "ec1", claims(map[string]any{"aud": audience})),
		"within skew":  sign(t, jose.ES256, k.ec, "ec1", claims(map[string]any{"exp": time.Now().Add(-10 * time.Second).Unix()})),
		"nbf in skew":  sign(t, jose.ES256, k.ec, "ec1", claims(map[string]any{"nbf": time.Now().Add(10 * time.Second).Unix()})),
		"roles string": sign(t, jose.ES256, k.ec, "ec1", claims(map[string]any{"roles": "operator wizard"})),
	} {
		p, err := a.Authenticate(context.Background(), bearer(tok))
		require.NoError(t, err, name)
		require.Equal(t, &auth.Principal{Tenant: "acme", Subject: "jwt:alice", Roles: []string{auth.RoleOperator}}, p, name)
	}
}

func TestJWTsThatMustBeRefused(t *testing.T) {
	t.Parallel()
	k := testKeys(t)
	a := fileAuthenticator(t, JWTConfig{})
	pub, err := x509.MarshalPKIXPublicKey(&k.rsa.PublicKey)
	require.NoError(t, err)
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	valid := sign(t, jose.RS256, k.rsa, "rsa1", claims(nil))
	parts := strings.Split(valid, ".")
	b64 := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	cases := []struct {
		name, token, want string
	}{
		{"alg none", b64(map[string]string{"alg": "none", "typ": "JWT"}) + "." + parts[1] + ".", "algorithm that is not allowed"},
		{"HS256 not configured", sign(t, jose.HS256, []byte(strings.Repeat("k", 32)), "", claims(nil)), "algorithm that is not allowed"},
		// Key confusion: HS256 with the issuer's public key as the HMAC secret.
		{"key confusion", sign(t, jose.HS256, pub, "rsa1", claims(nil)), "algorithm that is not allowed"},
		{"RS256 naming the EC key", sign(t, jose.RS256, k.rsa, "ec1", claims(nil)), "no key of the issuer"},
		{"unknown kid", sign(t, jose.RS256, k.rsa, "rsa9", claims(nil)), "no key of the issuer"},
		{"another key", sign(t, jose.ES256, other, "ec1", claims(nil)), "signature does not verify"},
		{"payload swapped", parts[0] + "." + b64(claims(map[string]any{"tenant": "victim"})) + "." + parts[2], "signature does not verify"},
		{"expired", sign(t, jose.RS256, k.rsa, "rsa1", claims(map[string]any{"exp": time.Now().Add(-2 * time.Minute).Unix()})), "expired"},
		{"no exp", sign(t, jose.RS256, k.rsa, "rsa1", claims(map[string]any{"exp": nil})), "exp is required"},
		{"not yet valid", sign(t, jose.RS256, k.rsa, "rsa1", claims(map[string]any{"nbf": time.Now().Add(2 * time.Minute).Unix()})), "nbf"},
		{"issued in the future", sign(t, jose.RS256, k.rsa, "rsa1", claims(map[string]any{"iat": time.Now().Add(2 * time.Minute).Unix()})), "iat"},
		{"wrong audience", sign(t, jose.RS256, k.rsa, "rsa1", claims(map[string]any{"aud": "someone-else"})), "aud does not include"},
		{"no audience", sign(t, jose.RS256, k.rsa, "rsa1", claims(map[string]any{"aud": nil})), "aud does not include"},
		{"wrong issuer", sign(t, jose.RS256, k.rsa, "rsa1", claims(map[string]any{"iss": "https://evil.test/"})), "iss is not"},
		{"no tenant", sign(t, jose.RS256, k.rsa, "rsa1", claims(map[string]any{"tenant": nil})), `claim "tenant"`},
		{"tenant not a name", sign(t, jose.RS256, k.rsa, "rsa1", claims(map[string]any{"tenant": "../x"})), "tenant"},
		{"garbage", "eyJ.eyJ.xyz", "malformed"},
		{"huge", strings.Repeat("a", maxTokenBytes) + ".b.c", "longer than"},
	}
	for _, tc := range cases {
		_, err := a.Authenticate(context.Background(), bearer(tc.token))
		require.Equal(t, codes.Unauthenticated, status.Code(err), tc.name)
		require.Contains(t, status.Convert(err).Message(), tc.want, tc.name)
	}
}

func TestHS256OnlyWithItsConfiguredSecret(t *testing.T) {
	t.Parallel()
	k := testKeys(t)
	hmacSecret := strings.Repeat("s", 40)
	a := fileAuthenticator(t, JWTConfig{HMACSecret: hmacSecret, TenantClaim: "org.id", RolesClaim: "realm_access.roles"})
	nested := claims(map[string]any{"tenant": nil, "roles": nil, "org": map[string]any{"id": "acme"}, "realm_access": map[string]any{"roles": []string{"viewer", "admin"}}})
	p, err := a.Authenticate(context.Background(), bearer(sign(t, jose.HS256, []byte(hmacSecret), "", nested)))
	require.NoError(t, err)
	require.Equal(t, &auth.Principal{Tenant: "acme", Subject: "jwt:alice", Roles: []string{auth.RoleViewer, auth.RoleAdmin}}, p)
	pub, err := x509.MarshalPKIXPublicKey(&k.rsa.PublicKey)
	require.NoError(t, err)
	_, err = a.Authenticate(context.Background(), bearer(sign(t, jose.HS256, pub, "rsa1", nested)))
	require.Equal(t, codes.Unauthenticated, status.Code(err), "the public key is no HMAC secret")
	// The asymmetric keys still work beside it.
	_, err = a.Authenticate(context.Background(), bearer(sign(t, jose.RS256, k.rsa, "rsa1", nested)))
	require.NoError(t, err)
}

func TestJWTConfigurationIsValidated(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]JWTConfig{
		"no issuer":     {JWKSFile: "x", Audience: audience},
		"no audience":   {JWKSFile: "x", Issuer: issuer},
		"two sources":   {JWKSFile: "x", JWKSURL: "http://127.0.0.1/", Issuer: issuer, Audience: audience},
		"alg none":      {JWKSFile: "x", Issuer: issuer, Audience: audience, Algorithms: "RS256,none"},
		"HS256 listed":  {JWKSFile: "x", Issuer: issuer, Audience: audience, Algorithms: "HS256"},
		"short secret":  {HMACSecret: "short", Issuer: issuer, Audience: audience},
		"unknown alg":   {JWKSURL: "http://127.0.0.1/", Issuer: issuer, Audience: audience, Algorithms: "RS1"},
		"empty algname": {JWKSURL: "http://127.0.0.1/", Issuer: issuer, Audience: audience, Algorithms: "RS256,"},
	} {
		_, err := New(Config{JWT: c}, (&fakeKeys{}).verify, nil)
		require.Error(t, err, name)
	}
}

func TestJWKSFromAURLIsCachedAndRefetchedForNewKeys(t *testing.T) {
	t.Parallel()
	k := testKeys(t)
	var hits atomic.Int64
	var mu sync.Mutex
	doc := k.jwks(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		mu.Lock()
		defer mu.Unlock()
		_, _ = w.Write(doc)
	}))
	t.Cleanup(srv.Close)
	a, err := New(Config{JWT: JWTConfig{JWKSURL: srv.URL, Issuer: issuer, Audience: audience, JWKSRefresh: time.Hour}}, (&fakeKeys{}).verify, srv.Client())
	require.NoError(t, err)
	now := time.Now()
	a.jwt.keys.now = func() time.Time { return now }
	ctx := context.Background()
	for range 3 {
		_, err := a.Authenticate(ctx, bearer(sign(t, jose.RS256, k.rsa, "rsa1", claims(nil))))
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, hits.Load(), "fetched once, then cached")

	// The issuer rotates to a new key.
	rotated, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	mu.Lock()
	doc, err = json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &rotated.PublicKey, KeyID: "rsa2", Use: "sig"}}})
	mu.Unlock()
	require.NoError(t, err)
	tok := sign(t, jose.RS256, rotated, "rsa2", claims(nil))
	_, err = a.Authenticate(ctx, bearer(tok))
	require.Equal(t, codes.Unauthenticated, status.Code(err), "an unknown kid refetches at most every 30 s")
	require.EqualValues(t, 1, hits.Load())
	now = now.Add(jwksMinRefresh)
	_, err = a.Authenticate(ctx, bearer(tok))
	require.NoError(t, err, "refetched for the new kid")
	require.EqualValues(t, 2, hits.Load())
	for range 3 { // forged kids do not flood the issuer
		_, err = a.Authenticate(ctx, bearer(sign(t, jose.RS256, rotated, "forged", claims(nil))))
		require.Equal(t, codes.Unauthenticated, status.Code(err))
	}
	require.EqualValues(t, 2, hits.Load())

	// Past the refresh interval the set is fetched again; when that fails the old set stays.
	srv.Close()
	now = now.Add(2 * time.Hour)
	_, err = a.Authenticate(ctx, bearer(tok))
	require.NoError(t, err, "the last good set is kept while the JWKS URL is down")
}
