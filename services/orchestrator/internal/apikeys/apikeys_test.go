package apikeys

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// mapped is err as the service's error interceptor answers it.
func mapped(err error) error { return (&grpcx.Errors{Sentinels: Codes}).Status("/test", err) }

func TestAPIKeysAreHashedRevocableAndTenantScoped(t *testing.T) {
	bg := context.Background()
	db, err := pgxext.Open(bg, testkit.StartMigratedPostgres(t), 4)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	s := &Service{Store: NewStore(db)}
	as := func(tenant string, roles ...string) context.Context {
		return auth.NewContext(bg, &auth.Principal{Tenant: tenant, Subject: "apikey:" + tenant + "-" + strings.Join(roles, "-"), Roles: roles})
	}
	gateway := auth.NewContext(bg, auth.ServicePrincipal("gateway"))
	admin := as("default", auth.RoleAdmin)

	created, err := s.CreateApiKey(admin, &orchv1.CreateApiKeyRequest{Tenant: "default", Roles: []string{"viewer", "operator", "viewer"}, Name: "ci"})
	require.NoError(t, err)
	secret, k := created.GetSecret(), created.GetKey()
	require.True(t, auth.LooksLikeAPIKey(secret))
	require.Equal(t, "default", k.GetTenant())
	require.Equal(t, []string{"viewer", "operator"}, k.GetRoles(), "roles deduplicated, in order")
	require.Equal(t, "apikey:default-admin", k.GetCreatedBy())
	require.Nil(t, k.GetLastUsedTime())

	// At rest: only the digest; no byte of the row holds the secret.
	var row string
	require.NoError(t, db.QueryRow(bg, `SELECT k::text FROM noetl.api_key k WHERE id = $1`, k.GetId()).Scan(&row))
	require.NotContains(t, row, strings.TrimPrefix(secret, auth.APIKeyPrefix+k.GetId()+"_"))

	// Verify: only services may; a right key returns what it grants and records its use,
	// at most once a minute.
	_, err = s.VerifyApiKey(admin, &orchv1.VerifyApiKeyRequest{Key: secret})
	require.Equal(t, codes.PermissionDenied, status.Code(mapped(err)))
	v, err := s.VerifyApiKey(gateway, &orchv1.VerifyApiKeyRequest{Key: secret})
	require.NoError(t, err)
	require.Equal(t, k.GetId(), v.GetKey().GetId())
	require.Equal(t, []string{"viewer", "operator"}, v.GetKey().GetRoles())
	var used1, used2 time.Time
	require.NoError(t, db.QueryRow(bg, `SELECT last_used_at FROM noetl.api_key WHERE id = $1`, k.GetId()).Scan(&used1))
	_, err = s.VerifyApiKey(gateway, &orchv1.VerifyApiKeyRequest{Key: secret})
	require.NoError(t, err)
	require.NoError(t, db.QueryRow(bg, `SELECT last_used_at FROM noetl.api_key WHERE id = $1`, k.GetId()).Scan(&used2))
	require.Equal(t, used1, used2, "last use is throttled")
	_, err = db.Exec(bg, `UPDATE noetl.api_key SET last_used_at = now() - interval '2 minutes' WHERE id = $1`, k.GetId())
	require.NoError(t, err)
	_, err = s.VerifyApiKey(gateway, &orchv1.VerifyApiKeyRequest{Key: secret})
	require.NoError(t, err)
	var recent bool
	require.NoError(t, db.QueryRow(bg, `SELECT last_used_at > now() - interval '1 minute' FROM noetl.api_key WHERE id = $1`, k.GetId()).Scan(&recent))
	require.True(t, recent, "recorded again after a minute")

	// Wrong secrets, unknown ids and malformed keys are one and the same NotFound.
	wrong := secret[:len(secret)-2] + map[bool]string{true: "bb", false: "aa"}[strings.HasSuffix(secret, "aa")]
	other, _, _, err := auth.NewAPIKey()
	require.NoError(t, err)
	for _, bad := range []string{wrong, other, "noetl_x", "", secret + "x"} {
		_, err := s.VerifyApiKey(gateway, &orchv1.VerifyApiKeyRequest{Key: bad})
		require.Equal(t, codes.NotFound, status.Code(mapped(err)), bad)
		require.Equal(t, "invalid API key", status.Convert(mapped(err)).Message())
	}

	// Revocation, scoped to the tenant: another tenant's revoke is NotFound.
	_, err = s.RevokeApiKey(as("acme", auth.RoleAdmin), &orchv1.RevokeApiKeyRequest{Tenant: "acme", Id: k.GetId()})
	require.Equal(t, codes.NotFound, status.Code(mapped(err)))
	_, err = s.VerifyApiKey(gateway, &orchv1.VerifyApiKeyRequest{Key: secret})
	require.NoError(t, err)
	r, err := s.RevokeApiKey(admin, &orchv1.RevokeApiKeyRequest{Tenant: "default", Id: k.GetId()})
	require.NoError(t, err)
	require.NotNil(t, r.GetKey().GetRevokeTime())
	again, err := s.RevokeApiKey(admin, &orchv1.RevokeApiKeyRequest{Tenant: "default", Id: k.GetId()})
	require.NoError(t, err)
	require.Equal(t, r.GetKey().GetRevokeTime().AsTime(), again.GetKey().GetRevokeTime().AsTime(), "revoking twice keeps the first time")
	_, err = s.VerifyApiKey(gateway, &orchv1.VerifyApiKeyRequest{Key: secret})
	require.Equal(t, codes.NotFound, status.Code(mapped(err)), "revoked")

	// Expiry.
	_, err = s.CreateApiKey(admin, &orchv1.CreateApiKeyRequest{Tenant: "default", Roles: []string{"viewer"}, ExpireTime: timestamppb.New(time.Now().Add(-time.Second))})
	require.Equal(t, codes.InvalidArgument, status.Code(mapped(err)))
	require.Contains(t, err.Error(), "expire_time:")
	short, err := s.CreateApiKey(admin, &orchv1.CreateApiKeyRequest{Tenant: "default", Roles: []string{"viewer"}, ExpireTime: timestamppb.New(time.Now().Add(time.Hour))})
	require.NoError(t, err)
	_, err = s.VerifyApiKey(gateway, &orchv1.VerifyApiKeyRequest{Key: short.GetSecret()})
	require.NoError(t, err)
	_, err = db.Exec(bg, `UPDATE noetl.api_key SET expires_at = now() - interval '1 second' WHERE id = $1`, short.GetKey().GetId())
	require.NoError(t, err)
	_, err = s.VerifyApiKey(gateway, &orchv1.VerifyApiKeyRequest{Key: short.GetSecret()})
	require.Equal(t, codes.NotFound, status.Code(mapped(err)), "expired")

	// Who may create what.
	cases := []struct {
		name   string
		ctx    context.Context
		req    *orchv1.CreateApiKeyRequest
		code   codes.Code
		inText string
	}{
		{"operator", as("default", auth.RoleOperator), &orchv1.CreateApiKeyRequest{Tenant: "default", Roles: []string{"viewer"}}, codes.PermissionDenied, "admin role"},
		{"no principal", bg, &orchv1.CreateApiKeyRequest{Tenant: "default", Roles: []string{"viewer"}}, codes.PermissionDenied, "admin role"},
		{"escalate to system", admin, &orchv1.CreateApiKeyRequest{Tenant: "default", Roles: []string{"system"}}, codes.PermissionDenied, `roles: granting "system"`},
		{"other tenant", admin, &orchv1.CreateApiKeyRequest{Tenant: "default", KeyTenant: "acme", Roles: []string{"viewer"}}, codes.PermissionDenied, `tenant: creating a key for tenant "acme" needs the system role`},
		{"no roles", admin, &orchv1.CreateApiKeyRequest{Tenant: "default"}, codes.InvalidArgument, "roles:"},
		{"unknown role", admin, &orchv1.CreateApiKeyRequest{Tenant: "default", Roles: []string{"root"}}, codes.InvalidArgument, `roles: unknown role "root"`},
		{"bad tenant", as("default", auth.RoleAdmin, auth.RoleSystem), &orchv1.CreateApiKeyRequest{Tenant: "default", KeyTenant: "../etc", Roles: []string{"viewer"}}, codes.InvalidArgument, "tenant:"},
		{"long name", admin, &orchv1.CreateApiKeyRequest{Tenant: "default", Roles: []string{"viewer"}, Name: strings.Repeat("n", MaxAPIKeyName+1)}, codes.InvalidArgument, "name:"},
	}
	for _, tc := range cases {
		_, err := s.CreateApiKey(tc.ctx, tc.req)
		require.Equal(t, tc.code, status.Code(mapped(err)), tc.name)
		require.Contains(t, status.Convert(mapped(err)).Message(), tc.inText, tc.name)
	}
	root := as("default", auth.RoleAdmin, auth.RoleSystem)
	acme, err := s.CreateApiKey(root, &orchv1.CreateApiKeyRequest{Tenant: "default", KeyTenant: "acme", Roles: []string{"admin"}})
	require.NoError(t, err, "the system role creates keys for other tenants")
	require.Equal(t, "acme", acme.GetKey().GetTenant())

	// Lists are per tenant, paged by id, never with secrets.
	for range 3 {
		_, err := s.CreateApiKey(as("acme", auth.RoleAdmin), &orchv1.CreateApiKeyRequest{Tenant: "acme", Roles: []string{"viewer"}})
		require.NoError(t, err)
	}
	var ids []string
	token := ""
	for {
		page, err := s.ListApiKeys(as("acme", auth.RoleAdmin), &orchv1.ListApiKeysRequest{Tenant: "acme", PageSize: 3, PageToken: token})
		require.NoError(t, err)
		for _, k := range page.GetKeys() {
			require.Equal(t, "acme", k.GetTenant())
			ids = append(ids, k.GetId())
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	require.Len(t, ids, 4)
	require.IsIncreasing(t, ids)
	_, err = s.ListApiKeys(admin, &orchv1.ListApiKeysRequest{PageSize: -1})
	require.Equal(t, codes.InvalidArgument, status.Code(mapped(err)))
}

func TestBootstrapKeyIsStoredOnceAndStaysRevoked(t *testing.T) {
	bg := context.Background()
	db, err := pgxext.Open(bg, testkit.StartMigratedPostgres(t), 4)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	s := &Service{Store: NewStore(db)}
	gateway := auth.NewContext(bg, auth.ServicePrincipal("gateway"))
	key, id, _, err := auth.NewAPIKey()
	require.NoError(t, err)

	created, err := s.EnsureAPIKey(bg, key, "default", []string{auth.RoleAdmin, auth.RoleSystem}, "bootstrap")
	require.NoError(t, err)
	require.True(t, created)
	v, err := s.VerifyApiKey(gateway, &orchv1.VerifyApiKeyRequest{Key: key})
	require.NoError(t, err)
	require.Equal(t, []string{"admin", "system"}, v.GetKey().GetRoles())
	created, err = s.EnsureAPIKey(bg, key, "default", []string{auth.RoleAdmin}, "bootstrap")
	require.NoError(t, err)
	require.False(t, created, "a restart stores nothing new")

	_, err = s.RevokeApiKey(auth.NewContext(bg, &auth.Principal{Tenant: "default", Subject: "x", Roles: []string{"admin"}}), &orchv1.RevokeApiKeyRequest{Tenant: "default", Id: id})
	require.NoError(t, err)
	_, err = s.EnsureAPIKey(bg, key, "default", []string{auth.RoleAdmin}, "bootstrap")
	require.NoError(t, err)
	_, err = s.VerifyApiKey(gateway, &orchv1.VerifyApiKeyRequest{Key: key})
	require.Equal(t, codes.NotFound, status.Code(mapped(err)), "a revoked bootstrap key stays revoked across restarts")

	// Same id, another secret: refused rather than silently ignored.
	forged := auth.APIKeyPrefix + id + "_" + strings.Repeat("a", len(key)-len(auth.APIKeyPrefix+id+"_"))
	_, err = s.EnsureAPIKey(bg, forged, "default", []string{auth.RoleAdmin}, "bootstrap")
	require.ErrorContains(t, err, "stored with another secret")
	_, err = s.EnsureAPIKey(bg, "not-a-key", "default", nil, "")
	require.Error(t, err)
}
