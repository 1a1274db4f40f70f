package auth

import (
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// signedExp decodes the expiry a signed principal carries.
func signedExp(t *testing.T, md map[string]string) int64 {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(md[MDPrincipal])
	require.NoError(t, err)
	var s signed
	require.NoError(t, json.Unmarshal(raw, &s))
	return s.Exp
}

// A signature is handed out again for signReuse, to the same principal and method only;
// past it, or with the clock gone back, the principal is signed afresh with a later
// expiry, so a receiver always gets at least signedTTL - signReuse of validity.
func TestSignaturesAreReusedForAMinuteOnly(t *testing.T) {
	t.Parallel()
	tr := newTrust(t, "0123456789abcdef0123456789abcdef")
	now := time.Unix(1_700_000_000, 0)
	tr.now = func() time.Time { return now }
	const m = "/noetl.statebuilder.v1.StateService/GetState"
	p := &Principal{Tenant: "acme", Subject: "apikey:k1", Roles: []string{RoleAdmin}}
	first := tr.Sign(m, p)

	now = now.Add(signReuse - time.Second)
	require.Equal(t, first, tr.Sign(m, p), "within signReuse")
	require.NotEqual(t, first[MDSignature], tr.Sign("/noetl.statebuilder.v1.StateService/ListExecutions", p)[MDSignature], "another method")
	require.NotEqual(t, first[MDSignature], tr.Sign(m, &Principal{Tenant: "acme", Subject: "apikey:k1", Roles: []string{RoleViewer}})[MDSignature], "other roles")
	require.NotEqual(t, first[MDSignature], tr.Sign(m, &Principal{Tenant: "other", Subject: "apikey:k1", Roles: []string{RoleAdmin}})[MDSignature], "another tenant")

	now = now.Add(time.Second)
	again := tr.Sign(m, p)
	require.NotEqual(t, first[MDPrincipal], again[MDPrincipal], "signed afresh at signReuse")
	require.Equal(t, signedExp(t, first)+int64(signReuse/time.Second), signedExp(t, again))
	require.GreaterOrEqual(t, time.Unix(signedExp(t, again), 0).Sub(now), signedTTL-signReuse)

	now = now.Add(-time.Hour)
	require.Less(t, signedExp(t, tr.Sign(m, p)), signedExp(t, again), "a clock gone back signs afresh")
}

// A verified signature is answered from memory while it is valid and never after: the
// same bytes past their expiry are refused as expired, and a principal handed out cannot
// change what the next call verifies to.
func TestVerifiedSignaturesExpireInMemoryToo(t *testing.T) {
	t.Parallel()
	tr := newTrust(t, "0123456789abcdef0123456789abcdef")
	now := time.Now()
	tr.now = func() time.Time { return now }
	const m = "/noetl.statebuilder.v1.StateService/GetState"
	md := metadata.New(tr.Sign(m, &Principal{Tenant: "acme", Subject: "apikey:k1", Roles: []string{RoleViewer}}))
	p, err := tr.Verify(m, md)
	require.NoError(t, err)
	p.Roles = append(p.Roles, RoleAdmin)
	p.Roles[0] = RoleAdmin
	p.Tenant = "other"
	again, err := tr.Verify(m, md)
	require.NoError(t, err)
	require.Equal(t, &Principal{Tenant: "acme", Subject: "apikey:k1", Roles: []string{RoleViewer}}, again, "what the caller did to its copy does not leak")

	_, err = tr.Verify("/noetl.statebuilder.v1.StateService/ListExecutions", md)
	require.Equal(t, codes.Unauthenticated, status.Code(err), "the cache is keyed by the method too")

	now = now.Add(signedTTL + clockSkew + time.Second)
	_, err = tr.Verify(m, md)
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	require.Contains(t, err.Error(), "expired")
}

// The caches stay bounded: past cacheMax entries they start over.
func TestTrustCachesAreBounded(t *testing.T) {
	t.Parallel()
	tr := newTrust(t, "0123456789abcdef0123456789abcdef")
	const m = "/noetl.statebuilder.v1.StateService/GetState"
	for i := range cacheMax + 10 {
		md := metadata.New(tr.Sign(m, &Principal{Tenant: "acme", Subject: "apikey:k" + string(rune('a'+i%26)) + time.Duration(i).String()}))
		_, err := tr.Verify(m, md)
		require.NoError(t, err)
	}
	require.LessOrEqual(t, len(tr.signs.m), cacheMax)
	require.LessOrEqual(t, len(tr.verified.m), cacheMax)
}
