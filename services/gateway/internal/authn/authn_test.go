package authn

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/noetl/noetl/internal/platform/auth"
)

// fakeKeys is a key store the tests revoke keys in.
type fakeKeys struct {
	mu    sync.Mutex
	keys  map[string]*auth.Principal
	calls atomic.Int64
	down  bool
}

func (f *fakeKeys) verify(ctx context.Context, key string) (*auth.Principal, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, status.Error(codes.Unavailable, "orchestrator: connection refused to 10.1.2.3")
	}
	p, ok := f.keys[key]
	if !ok {
		return nil, status.Error(codes.NotFound, "invalid API key")
	}
	return p, nil
}

func (f *fakeKeys) revoke(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.keys, key)
}

func newKey(t *testing.T) string {
	t.Helper()
	k, _, _, err := auth.NewAPIKey()
	require.NoError(t, err)
	return k
}

func bearer(token string) metadata.MD { return metadata.Pairs("authorization", "Bearer "+token) }

func TestAPIKeysAreCachedBrieflyAndRevocationWinsAfterTheTTL(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	viewer := &auth.Principal{Tenant: "acme", Subject: "apikey:x", Roles: []string{auth.RoleViewer}}
	f := &fakeKeys{keys: map[string]*auth.Principal{key: viewer}}
	a, err := New(Config{KeyCacheTTL: 30 * time.Second}, f.verify, nil)
	require.NoError(t, err)
	now := time.Now()
	a.keys.now = func() time.Time { return now }
	ctx := context.Background()

	for _, md := range []metadata.MD{bearer(key), metadata.Pairs("x-api-key", key), metadata.Pairs("authorization", "bearer  "+key+" ")} {
		p, err := a.Authenticate(ctx, md)
		require.NoError(t, err)
		require.Equal(t, viewer, p)
	}
	require.EqualValues(t, 1, f.calls.Load(), "verified once, then served from the cache")

	f.revoke(key)
	now = now.Add(29 * time.Second)
	_, err = a.Authenticate(ctx, bearer(key))
	require.NoError(t, err, "a revoked key works until its cache entry expires")
	now = now.Add(2 * time.Second)
	_, err = a.Authenticate(ctx, bearer(key))
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	require.NotContains(t, err.Error(), key)
	require.EqualValues(t, 2, f.calls.Load())

	// Refusals are cached too: a flood of one bad key costs one verification per TTL.
	bad := newKey(t)
	for range 5 {
		_, err := a.Authenticate(ctx, bearer(bad))
		require.Equal(t, codes.Unauthenticated, status.Code(err))
	}
	require.EqualValues(t, 3, f.calls.Load())

	// An unreachable key store is Unavailable (retry), not cached, and masked.
	f.mu.Lock()
	f.down = true
	f.mu.Unlock()
	other := newKey(t)
	for range 2 {
		_, err := a.Authenticate(ctx, bearer(other))
		require.Equal(t, codes.Unavailable, status.Code(err))
		require.NotContains(t, err.Error(), "10.1.2.3")
	}
	require.EqualValues(t, 5, f.calls.Load())
}

func TestKeyCacheIsBounded(t *testing.T) {
	t.Parallel()
	f := &fakeKeys{keys: map[string]*auth.Principal{}}
	a, err := New(Config{KeyCacheSize: 3}, f.verify, nil)
	require.NoError(t, err)
	for range 20 {
		_, _ = a.Authenticate(context.Background(), bearer(newKey(t)))
		require.LessOrEqual(t, a.keys.len(), 3)
	}
}

func TestConcurrentVerificationsOfOneKeyShareOneCall(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		key := newKey(t)
		release := make(chan struct{})
		var calls atomic.Int64
		a, err := New(Config{}, func(context.Context, string) (*auth.Principal, error) {
			calls.Add(1)
			<-release
			return &auth.Principal{Tenant: "t", Subject: "apikey:k", Roles: []string{auth.RoleViewer}}, nil
		}, nil)
		require.NoError(t, err)
		errs := make(chan error, 8)
		for range 8 {
			go func() {
				_, err := a.Authenticate(context.Background(), bearer(key))
				errs <- err
			}()
		}
		synctest.Wait() // every caller is blocked: one in verify, the others waiting for it
		close(release)
		for range 8 {
			require.NoError(t, <-errs)
		}
		require.EqualValues(t, 1, calls.Load())
	})
}

func TestCredentialsMustBeOneWellFormedToken(t *testing.T) {
	t.Parallel()
	a, err := New(Config{}, (&fakeKeys{}).verify, nil)
	require.NoError(t, err)
	key := newKey(t)
	cases := map[string]metadata.MD{
		"none":         {},
		"basic":        metadata.Pairs("authorization", "Basic dXNlcjpwYXNz"),
		"empty bearer": metadata.Pairs("authorization", "Bearer "),
		"no scheme":    metadata.Pairs("authorization", key),
		"both":         metadata.Pairs("authorization", "Bearer "+key, "x-api-key", key),
		"twice":        metadata.Pairs("x-api-key", key, "x-api-key", key),
		"empty key":    metadata.Pairs("x-api-key", " "),
		"opaque":       bearer("hunter2"),
		"jwt off":      bearer("a.b.c"),
	}
	for name, md := range cases {
		_, err := a.Authenticate(context.Background(), md)
		require.Equal(t, codes.Unauthenticated, status.Code(err), name)
		require.NotContains(t, err.Error(), key, name)
		require.NotContains(t, err.Error(), "hunter2", name)
	}
	_, err = a.Authenticate(context.Background(), bearer("a.b.c"))
	require.ErrorContains(t, err, "JWT authentication is not configured")
}

func TestInsecureModeAdmitsEveryoneAsTheDefaultAdmin(t *testing.T) {
	t.Parallel()
	a, err := New(Config{Insecure: true}, nil, nil)
	require.NoError(t, err)
	p, err := a.Authenticate(context.Background(), metadata.MD{})
	require.NoError(t, err)
	require.Equal(t, "default", p.Tenant)
	require.True(t, p.Can(auth.PermAdmin))
	_, err = New(Config{}, nil, nil)
	require.Error(t, err, "without insecure a key verifier is required")
}

func ExampleInsecurePrincipal() {
	p := InsecurePrincipal()
	fmt.Println(p.Tenant, p.Roles)
	// Output: default [admin system]
}

func TestPresentedNamesTheKindAndKeyIDNeverTheSecret(t *testing.T) {
	t.Parallel()
	key, id, _, err := auth.NewAPIKey()
	require.NoError(t, err)
	for _, tc := range []struct {
		md       metadata.MD
		kind, id string
	}{
		{metadata.Pairs("authorization", "Bearer "+key), KindAPIKey, id},
		{metadata.Pairs("x-api-key", key), KindAPIKey, id},
		{metadata.Pairs("authorization", "Bearer noetl_short_key"), KindAPIKey, ""},
		{metadata.Pairs("authorization", "Bearer a.b.c"), KindJWT, ""},
		{metadata.Pairs("authorization", "Bearer hunter2"), KindOther, ""},
		{metadata.MD{}, KindNone, ""},
		{metadata.Pairs("authorization", "Bearer "+key, "x-api-key", key), KindNone, ""},
	} {
		kind, got := Presented(tc.md)
		require.Equal(t, tc.kind, kind, "%v", tc.md)
		require.Equal(t, tc.id, got, "%v", tc.md)
	}
}
