package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Metadata keys of a signed principal.
const (
	// MDPrincipal holds the principal: base64url of its JSON with an expiry.
	MDPrincipal = "x-noetl-principal"
	// MDSignature holds base64url of HMAC-SHA256(secret, domain, method, MDPrincipal).
	MDSignature = "x-noetl-principal-sig"
)

// MinSecretBytes is the shortest accepted internal secret.
const MinSecretBytes = 32

// Validity of a signed principal, and the clock skew tolerated between services.
const (
	signedTTL = 5 * time.Minute
	clockSkew = time.Minute
)

// sigDomain separates these signatures from any other use of the secret.
const sigDomain = "noetl.principal.v1"

// ErrNoSecret is returned by NewTrust for an empty secret.
var ErrNoSecret = errors.New("NOETL_INTERNAL_SECRET is not set: internal services need a shared secret of at least 32 bytes")

// Trust signs and verifies principals with the internal secret shared by the services.
type Trust struct {
	key []byte
	// now is the clock; tests replace it.
	now func() time.Time
	// macs pools HMAC-SHA256 hashes keyed with key: Reset brings one back to its keyed
	// state, so a signature pays no key schedule and no allocation of its own.
	macs sync.Pool
	// signs and verified remember recent signatures (trustcache.go), so that the calls of
	// one principal to one method sign and verify it once a minute rather than each time.
	signs    window[signKey, map[string]string]
	verified window[verifyKey, Principal]
}

// NewTrust returns a Trust over secret, which must be at least MinSecretBytes long (for
// example base64 of 32 random bytes).
func NewTrust(secret string) (*Trust, error) {
	secret = strings.TrimSpace(secret)
	if secret == "" {
		return nil, ErrNoSecret
	}
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("NOETL_INTERNAL_SECRET: %d bytes is shorter than the minimum of %d", len(secret), MinSecretBytes)
	}
	t := &Trust{key: []byte(secret), now: time.Now}
	t.macs.New = func() any { return hmac.New(sha256.New, t.key) }
	return t, nil
}

// signed is the wire form of a principal.
type signed struct {
	Principal
	// Exp is the expiry in Unix seconds.
	Exp int64 `json:"exp"`
}

func (t *Trust) mac(method, payload string) []byte {
	h := t.macs.Get().(hash.Hash)
	defer t.macs.Put(h)
	h.Reset()
	h.Write([]byte(sigDomain))
	h.Write([]byte{0})
	h.Write([]byte(method))
	h.Write([]byte{0})
	h.Write([]byte(payload))
	return h.Sum(nil)
}

// Sign returns the metadata that carries p to a call of method (a full gRPC method name,
// "/pkg.Service/Method"): the signature covers the method, so a captured header cannot be
// replayed against another RPC, and expires after five minutes.
//
// The map returned is shared with other calls of the same principal and method: read it,
// never change it.
func (t *Trust) Sign(method string, p *Principal) map[string]string {
	now := t.now()
	key := signKeyOf(method, p)
	if md, ok := t.signs.get(key, now); ok {
		return md
	}
	b, _ := json.Marshal(signed{Principal: *p, Exp: now.Add(signedTTL).Unix()})
	payload := base64.RawURLEncoding.EncodeToString(b)
	md := map[string]string{
		MDPrincipal: payload,
		MDSignature: base64.RawURLEncoding.EncodeToString(t.mac(method, payload)),
	}
	t.signs.put(key, md, now, now.Add(signReuse))
	return md
}

func unauthenticated(msg string) error { return status.Error(codes.Unauthenticated, msg) }

// Verify returns the principal signed in md for a call of method, or an Unauthenticated
// error: missing, duplicated, forged (wrong secret, other method, altered payload) or
// expired principals are refused.
func (t *Trust) Verify(method string, md metadata.MD) (*Principal, error) {
	payloads, sigs := md.Get(MDPrincipal), md.Get(MDSignature)
	if len(payloads) == 0 && len(sigs) == 0 {
		return nil, unauthenticated("no principal: internal services are reached through the gateway")
	}
	if len(payloads) != 1 || len(sigs) != 1 {
		return nil, unauthenticated(MDPrincipal + ": exactly one signed principal is required")
	}
	now := t.now()
	vkey := verifyKey{method: method, payload: payloads[0], sig: sigs[0]}
	if p, ok := t.verified.get(vkey, now); ok {
		p.Roles = slices.Clip(p.Roles) // an append by the caller copies, never writes the shared array
		return &p, nil
	}
	sig, err := base64.RawURLEncoding.Strict().DecodeString(sigs[0])
	if err != nil || !hmac.Equal(sig, t.mac(method, payloads[0])) {
		return nil, unauthenticated(MDSignature + ": invalid signature")
	}
	raw, err := base64.RawURLEncoding.DecodeString(payloads[0])
	if err != nil {
		return nil, unauthenticated(MDPrincipal + ": malformed")
	}
	var s signed
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, unauthenticated(MDPrincipal + ": malformed")
	}
	until := time.Unix(s.Exp, 0).Add(clockSkew)
	if now.After(until) {
		return nil, unauthenticated(MDPrincipal + ": expired")
	}
	if s.Subject == "" || (!s.Service && s.Tenant == "") {
		return nil, unauthenticated(MDPrincipal + ": subject and tenant are required")
	}
	t.verified.put(vkey, s.Principal, time.Time{}, until)
	p := s.Principal
	p.Roles = slices.Clip(p.Roles)
	return &p, nil
}

// FlightDoGet is the Arrow Flight method that authenticates with a signed ticket
// (VerifyTicket) instead of a principal: Flight clients outside the mesh call it directly.
const FlightDoGet = "/arrow.flight.protocol.FlightService/DoGet"

// Exempt reports whether method is served without a principal: health (probes, readiness
// checks of other services), reflection, and Flight DoGet, whose ticket is its credential.
func Exempt(method string) bool {
	return strings.HasPrefix(method, "/grpc.health.v1.Health/") || strings.HasPrefix(method, "/grpc.reflection.") || method == FlightDoGet
}

// ServerOptions returns the interceptors that admit an RPC only with a principal signed by
// t (health and reflection excepted). The principal is put in the handler's context
// (FromContext). For a user principal the request's top-level string field "tenant", when
// the message has one, is overwritten with the principal's tenant: whatever tenant a
// request names, a user reads and writes only its own. Service principals act for the
// tenant their request names.
func ServerOptions(t *Trust) []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(t.unary), grpc.ChainStreamInterceptor(t.stream)}
}

func (t *Trust) authenticate(ctx context.Context, method string) (*Principal, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	return t.Verify(method, md)
}

func (t *Trust) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if Exempt(info.FullMethod) {
		return handler(ctx, req)
	}
	p, err := t.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	ScopeTenant(req, p)
	return handler(NewContext(ctx, p), req)
}

func (t *Trust) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if Exempt(info.FullMethod) {
		return handler(srv, ss)
	}
	p, err := t.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, &principalStream{ServerStream: ss, ctx: NewContext(ss.Context(), p), p: p})
}

// principalStream carries the principal and scopes every received message to its tenant.
type principalStream struct {
	grpc.ServerStream
	ctx context.Context
	p   *Principal
}

func (s *principalStream) Context() context.Context { return s.ctx }

func (s *principalStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	ScopeTenant(m, s.p)
	return nil
}

// ScopeTenant overwrites the top-level string field "tenant" of msg, when it has one, with
// the tenant of a user principal p. It leaves messages of service principals alone.
func ScopeTenant(msg any, p *Principal) {
	m, ok := msg.(proto.Message)
	if !ok || p == nil || p.Service {
		return
	}
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByName("tenant")
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() || fd.IsMap() {
		return
	}
	r.Set(fd, protoreflect.ValueOfString(p.Tenant))
}

// Service returns per-RPC credentials that sign every call as the internal service name;
// pass them with grpc.WithPerRPCCredentials.
func (t *Trust) Service(name string) credentials.PerRPCCredentials {
	p := ServicePrincipal(name)
	return &signer{t: t, pick: func(context.Context) *Principal { return p }}
}

// Forward returns per-RPC credentials that sign the principal in the call's context (the
// gateway forwarding the caller it verified); a context marked with ServiceCall is signed as
// the service name. Any other call fails with Unauthenticated before it is sent: nothing
// is ever signed by default.
func (t *Trust) Forward(name string) credentials.PerRPCCredentials {
	svc := ServicePrincipal(name)
	return &signer{t: t, pick: func(ctx context.Context) *Principal {
		if p := FromContext(ctx); p != nil {
			return p
		}
		if v, _ := ctx.Value(serviceCallKey{}).(bool); v {
			return svc
		}
		return nil
	}}
}

// signer is the per-RPC credentials of Service and Forward.
type signer struct {
	t    *Trust
	pick func(context.Context) *Principal
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (s *signer) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	ri, ok := credentials.RequestInfoFromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "auth: no request info")
	}
	if Exempt(ri.Method) {
		return nil, nil
	}
	p := s.pick(ctx)
	if p == nil {
		return nil, unauthenticated("no principal to forward for " + ri.Method)
	}
	return s.t.Sign(ri.Method, p), nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: internal traffic is
// plaintext on the cluster network, and a signed principal is bound to one method and
// expires.
func (s *signer) RequireTransportSecurity() bool { return false }

// RequireService returns PermissionDenied unless ctx carries a service principal: for
// internal RPCs no user may reach even through the gateway (resolving credentials,
// verifying keys).
func RequireService(ctx context.Context) error {
	if p := FromContext(ctx); p == nil || !p.Service {
		return status.Error(codes.PermissionDenied, "only internal services may call this")
	}
	return nil
}

// Bearer returns per-RPC credentials that send key as "authorization: Bearer <key>" (an
// API key or a JWT), for clients of the gateway. They are accepted over plaintext
// connections, as the CLI uses against a local gateway.
func Bearer(key string) credentials.PerRPCCredentials { return bearer(key) }

type bearer string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (bearer) RequireTransportSecurity() bool { return false }
