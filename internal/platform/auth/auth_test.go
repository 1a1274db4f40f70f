package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
)

const (
	secret      = "0123456789abcdef0123456789abcdef-internal"
	otherSecret = "fedcba9876543210fedcba9876543210-internal"
	getState    = "/noetl.statebuilder.v1.StateService/GetState"
)

func newTrust(t *testing.T, s string) *Trust {
	t.Helper()
	tr, err := NewTrust(s)
	require.NoError(t, err)
	return tr
}

func TestNewTrustNeedsALongSecret(t *testing.T) {
	t.Parallel()
	_, err := NewTrust("")
	require.ErrorIs(t, err, ErrNoSecret)
	_, err = NewTrust(strings.Repeat("x", MinSecretBytes-1))
	require.ErrorContains(t, err, "shorter than the minimum")
	_, err = NewTrust(strings.Repeat("x", MinSecretBytes))
	require.NoError(t, err)
}

func TestAPIKeysParseToTheirIDAndDigest(t *testing.T) {
	t.Parallel()
	key, id, digest, err := NewAPIKey()
	require.NoError(t, err)
	require.True(t, LooksLikeAPIKey(key))
	gotID, gotDigest, ok := ParseAPIKey(key)
	require.True(t, ok)
	require.Equal(t, id, gotID)
	require.True(t, DigestEqual(digest, gotDigest))
	require.NotContains(t, string(digest), strings.TrimPrefix(key, APIKeyPrefix+id+"_"), "only a digest of the secret is kept")

	other, _, _, err := NewAPIKey()
	require.NoError(t, err)
	require.NotEqual(t, key, other)

	// One character of the secret changed: same id, another digest.
	tampered := key[:len(key)-1] + map[bool]string{true: "b", false: "a"}[key[len(key)-1] == 'a']
	tid, tdigest, ok := ParseAPIKey(tampered)
	require.True(t, ok)
	require.Equal(t, id, tid)
	require.False(t, DigestEqual(digest, tdigest))

	for _, bad := range []string{"", "noetl_", "noetl_abc_def", "xnoetl_" + key[6:], key + "a", strings.ToUpper(key), strings.Replace(key, "_", "-", -1)} {
		_, _, ok := ParseAPIKey(bad)
		require.False(t, ok, bad)
	}
	require.False(t, DigestEqual(nil, nil), "an empty digest never matches")
}

func TestRolesGrantPermissions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		roles                           []string
		read, execute, admin, system    bool
		grantViewer, grantAdmin, grantS bool
	}{
		{nil, false, false, false, false, false, false, false},
		{[]string{"bogus"}, false, false, false, false, false, false, false},
		{[]string{RoleViewer}, true, false, false, false, true, false, false},
		{[]string{RoleOperator}, true, true, false, false, true, false, false},
		{[]string{RoleAdmin}, true, true, true, false, true, true, false},
		{[]string{RoleSystem}, true, true, false, true, true, false, true},
		{[]string{RoleAdmin, RoleSystem}, true, true, true, true, true, true, true},
	}
	for _, tc := range cases {
		p := &Principal{Tenant: "t", Subject: "s", Roles: tc.roles}
		require.Equal(t, tc.read, p.Can(PermRead), tc.roles)
		require.Equal(t, tc.execute, p.Can(PermExecute), tc.roles)
		require.Equal(t, tc.admin, p.Can(PermAdmin), tc.roles)
		require.Equal(t, tc.system, p.Can(PermSystem), tc.roles)
		require.Equal(t, tc.grantViewer, p.CanGrant(RoleViewer), tc.roles)
		require.Equal(t, tc.grantAdmin, p.CanGrant(RoleAdmin), tc.roles)
		require.Equal(t, tc.grantS, p.CanGrant(RoleSystem), tc.roles)
		require.False(t, p.CanGrant("root"), "unknown roles are never granted")
	}
	var nobody *Principal
	require.False(t, nobody.Can(PermRead))
	require.True(t, ServicePrincipal("worker").Can(PermSystem))
}

func TestSignedPrincipalsVerifyOnlyUnaltered(t *testing.T) {
	t.Parallel()
	tr := newTrust(t, secret)
	user := &Principal{Tenant: "acme", Subject: "apikey:k1", Roles: []string{RoleViewer}}
	md := metadata.New(tr.Sign(getState, user))
	p, err := tr.Verify(getState, md)
	require.NoError(t, err)
	require.Equal(t, user, p)

	refused := func(name string, md metadata.MD, method string, want string) {
		t.Helper()
		_, err := tr.Verify(method, md)
		require.Equal(t, codes.Unauthenticated, status.Code(err), name)
		require.Contains(t, status.Convert(err).Message(), want, name)
	}
	refused("missing", metadata.MD{}, getState, "no principal")
	refused("other method", md, "/noetl.statebuilder.v1.StateService/ListExecutions", "invalid signature")
	refused("other secret", metadata.New(newTrust(t, otherSecret).Sign(getState, user)), getState, "invalid signature")

	// An altered payload (another tenant, more roles) with the original signature.
	forged := md.Copy()
	b, _ := json.Marshal(signed{Principal: Principal{Tenant: "other", Subject: "apikey:k1", Roles: []string{RoleAdmin}}, Exp: time.Now().Add(time.Hour).Unix()})
	forged.Set(MDPrincipal, base64.RawURLEncoding.EncodeToString(b))
	refused("altered payload", forged, getState, "invalid signature")
	unsigned := md.Copy()
	unsigned.Delete(MDSignature)
	refused("no signature", unsigned, getState, "exactly one")
	twice := md.Copy()
	twice.Append(MDPrincipal, md.Get(MDPrincipal)[0])
	refused("two principals", twice, getState, "exactly one")
	garbage := md.Copy()
	garbage.Set(MDSignature, "!!!")
	refused("signature not base64", garbage, getState, "invalid signature")

	// Expiry: five minutes, plus a minute of skew.
	late := newTrust(t, secret)
	late.now = func() time.Time { return time.Now().Add(signedTTL + clockSkew + time.Second) }
	_, err = late.Verify(getState, md)
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	require.Contains(t, err.Error(), "expired")
	late.now = func() time.Time { return time.Now().Add(signedTTL) }
	_, err = late.Verify(getState, md)
	require.NoError(t, err, "within the skew")

	// A user principal names its tenant.
	refused("no tenant", metadata.New(tr.Sign(getState, &Principal{Subject: "jwt:x"})), getState, "tenant")
}

func TestScopeTenantOverwritesTheRequestTenantOfUsers(t *testing.T) {
	t.Parallel()
	req := &sbv1.GetStateRequest{ExecutionId: "e", Tenant: "victim"}
	ScopeTenant(req, &Principal{Tenant: "acme", Subject: "s"})
	require.Equal(t, "acme", req.GetTenant())
	empty := &sbv1.ListExecutionsRequest{} // empty tenant would list every tenant
	ScopeTenant(empty, &Principal{Tenant: "acme", Subject: "s"})
	require.Equal(t, "acme", empty.GetTenant())
	svc := &sbv1.GetStateRequest{Tenant: "victim"}
	ScopeTenant(svc, ServicePrincipal("orchestrator"))
	require.Equal(t, "victim", svc.GetTenant(), "services act for the tenant they name")
	noField := &eventv1.ResultRef{Uri: "x"}
	ScopeTenant(noField, &Principal{Tenant: "acme", Subject: "s"})
	require.Equal(t, "x", noField.GetUri())
}

// fakeState records what reached the handlers.
type fakeState struct {
	sbv1.UnimplementedStateServiceServer
	rsv1.UnimplementedResultStoreServiceServer
	tenant    chan string
	principal chan *Principal
}

func (f *fakeState) GetState(ctx context.Context, req *sbv1.GetStateRequest) (*sbv1.GetStateResponse, error) {
	f.tenant <- req.GetTenant()
	f.principal <- FromContext(ctx)
	return &sbv1.GetStateResponse{}, nil
}

func (f *fakeState) GetResult(req *rsv1.GetResultRequest, stream grpc.ServerStreamingServer[rsv1.GetResultResponse]) error {
	f.tenant <- req.GetTenant()
	f.principal <- FromContext(stream.Context())
	return stream.Send(&rsv1.GetResultResponse{Chunk: []byte("x")})
}

func serve(t *testing.T, tr *Trust) (string, *fakeState) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(ServerOptions(tr)...)
	f := &fakeState{tenant: make(chan string, 1), principal: make(chan *Principal, 1)}
	sbv1.RegisterStateServiceServer(srv, f)
	rsv1.RegisterResultStoreServiceServer(srv, f)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), f
}

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func TestServerAdmitsOnlySignedPrincipals(t *testing.T) {
	t.Parallel()
	tr := newTrust(t, secret)
	addr, f := serve(t, tr)
	ctx := context.Background()

	// Nothing signed, or signed with another secret: Unauthenticated, the handler never runs.
	for name, conn := range map[string]*grpc.ClientConn{
		"anonymous": dial(t, addr),
		"forged":    dial(t, addr, grpc.WithPerRPCCredentials(newTrust(t, otherSecret).Service("worker"))),
	} {
		_, err := sbv1.NewStateServiceClient(conn).GetState(ctx, &sbv1.GetStateRequest{ExecutionId: "e"})
		require.Equal(t, codes.Unauthenticated, status.Code(err), name)
		stream, err := rsv1.NewResultStoreServiceClient(conn).GetResult(ctx, &rsv1.GetResultRequest{Uri: "u"})
		require.NoError(t, err)
		_, err = stream.Recv()
		require.Equal(t, codes.Unauthenticated, status.Code(err), name)
		// Health stays open, for probes and readiness checks.
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err, name)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
	}
	require.Empty(t, f.tenant)

	// A service acts for the tenant its request names.
	svc := dial(t, addr, grpc.WithPerRPCCredentials(tr.Service("orchestrator")))
	_, err := sbv1.NewStateServiceClient(svc).GetState(ctx, &sbv1.GetStateRequest{ExecutionId: "e", Tenant: "acme"})
	require.NoError(t, err)
	require.Equal(t, "acme", <-f.tenant)
	require.Equal(t, ServicePrincipal("orchestrator"), <-f.principal)

	// A forwarded user acts for its own tenant, whatever the request names, on unary and
	// streaming RPCs.
	fwd := dial(t, addr, grpc.WithPerRPCCredentials(tr.Forward("gateway")))
	user := &Principal{Tenant: "acme", Subject: "apikey:k1", Roles: []string{RoleViewer}}
	uctx := NewContext(ctx, user)
	_, err = sbv1.NewStateServiceClient(fwd).GetState(uctx, &sbv1.GetStateRequest{ExecutionId: "e", Tenant: "victim"})
	require.NoError(t, err)
	require.Equal(t, "acme", <-f.tenant)
	require.Equal(t, user, <-f.principal)
	stream, err := rsv1.NewResultStoreServiceClient(fwd).GetResult(uctx, &rsv1.GetResultRequest{Uri: "u", Tenant: "victim"})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)
	require.Equal(t, "acme", <-f.tenant)
	require.Equal(t, user, <-f.principal)

	// Forwarding without a principal signs nothing: the call fails before it is sent,
	// unless marked as the service's own call.
	_, err = sbv1.NewStateServiceClient(fwd).GetState(ctx, &sbv1.GetStateRequest{ExecutionId: "e"})
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	require.Contains(t, err.Error(), "no principal to forward")
	_, err = sbv1.NewStateServiceClient(fwd).GetState(ServiceCall(ctx), &sbv1.GetStateRequest{ExecutionId: "e", Tenant: "t"})
	require.NoError(t, err)
	require.Equal(t, "t", <-f.tenant)
	require.Equal(t, ServicePrincipal("gateway"), <-f.principal)
	_, err = healthpb.NewHealthClient(fwd).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "health needs no principal to forward")
}

func TestRequireService(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.Equal(t, codes.PermissionDenied, status.Code(RequireService(ctx)))
	require.Equal(t, codes.PermissionDenied, status.Code(RequireService(NewContext(ctx, &Principal{Tenant: "t", Subject: "s", Roles: []string{RoleAdmin, RoleSystem}}))))
	require.NoError(t, RequireService(NewContext(ctx, ServicePrincipal("worker"))))
}

func TestCheckTenant(t *testing.T) {
	t.Parallel()
	require.NoError(t, CheckTenant("tenant", "acme-1.prod_x"))
	for _, bad := range []string{"", "a b", "../x", "a/b", strings.Repeat("x", MaxTenant+1)} {
		err := CheckTenant("tenant", bad)
		require.Equal(t, codes.InvalidArgument, status.Code(err), bad)
		require.True(t, strings.HasPrefix(status.Convert(err).Message(), "tenant: "), bad)
	}
}
