// Package guard is the gateway's admission: every call of the public gRPC server is
// authenticated (package authn) and authorized (package authz) here, failed attempts are
// throttled by client address and API key id (limit.Failures), and every refusal is an audit
// line. Invariant: an admitted call carries its caller's principal in its context, and an
// audit line never holds a credential, only its kind and API key id.
package guard

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/services/gateway/internal/apierr"
	"github.com/noetl/noetl/services/gateway/internal/authn"
	"github.com/noetl/noetl/services/gateway/internal/authz"
	"github.com/noetl/noetl/services/gateway/internal/clientaddr"
	"github.com/noetl/noetl/services/gateway/internal/limit"
)

// Guard authenticates and authorizes every call of the public gRPC server; REST and the
// /api/ routes reach that server through the loopback connection, so it sees them too.
// Health and reflection are open.
//
// Failed authentication is throttled by client address and by API key id (failures): once
// either has failed more than its burst, its attempts are refused with RESOURCE_EXHAUSTED
// before any credential is checked, a valid one included, until its bucket refills. Every
// authentication or authorization failure, every throttled attempt, and every admitted
// call a service behind the gateway refuses with PERMISSION_DENIED, is logged as an audit
// line (audit=true) with the address, the key id and the method, never the credential.
type Guard struct {
	authn    *authn.Authenticator
	failures *limit.Failures
	proxies  clientaddr.Proxies
	log      *slog.Logger
	// refused counts audited refusals by outcome (unauthenticated, denied, throttled,
	// unverified).
	refused *prometheus.CounterVec
}

// New returns the guard; register its metric (Collector) with the service's registry.
func New(a *authn.Authenticator, failures *limit.Failures, trusted clientaddr.Proxies, log *slog.Logger) *Guard {
	return &Guard{authn: a, failures: failures, proxies: trusted, log: log, refused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "noetl_gateway_auth_refused_total", Help: "Calls refused by authentication or authorization, by outcome (unauthenticated, denied, throttled, unverified).",
	}, []string{"outcome"})}
}

// Collector is the guard's metric, noetl_gateway_auth_refused_total.
func (g *Guard) Collector() prometheus.Collector { return g.refused }

// Failures is the throttle of failed authentication the guard counts failures in, for
// other credentials checked outside it (a webhook's signature).
func (g *Guard) Failures() *limit.Failures { return g.failures }

// Audit outcomes.
const (
	// OutcomeUnauthenticated: the credential was refused (counted as a failure).
	OutcomeUnauthenticated = "unauthenticated"
	outcomeDenied          = "denied"
	// OutcomeThrottled: the attempt was refused before its credential was checked.
	OutcomeThrottled = "throttled"
	// outcomeUnverified: the credential could not be checked (the orchestrator is down).
	outcomeUnverified = "unverified"
)

// caller is who makes an admitted call, as its audit lines name it.
type caller struct {
	method, addr, kind, keyID string
	p                         *auth.Principal
}

// admit returns ctx carrying the caller's principal, or the error that refuses the call.
func (g *Guard) admit(ctx context.Context, method string) (context.Context, *caller, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	addr := g.proxies.FromGRPC(ctx, md)
	kind, keyID := authn.Presented(md)
	counted := []string{"address " + addr}
	if keyID != "" {
		counted = append(counted, "API key id "+keyID)
	}
	if key, after, ok := g.failures.Throttled(counted...); ok {
		err := apierr.New(codes.ResourceExhausted, apierr.ReasonAuthThrottled,
			fmt.Sprintf("authentication: too many failed attempts for %s; retry after %s", key, after.Round(100*time.Millisecond)),
			map[string]string{"limit": fmt.Sprintf("%g failed attempts per minute (burst %d)", g.failures.PerMinute(), g.failures.Burst())}, apierr.RetryInfo(after))
		g.Audit(ctx, OutcomeThrottled, method, addr, kind, keyID, nil, err)
		return nil, nil, err
	}
	p, err := g.authn.Authenticate(ctx, md)
	if err != nil {
		outcome := outcomeUnverified
		if status.Code(err) == codes.Unauthenticated {
			outcome = OutcomeUnauthenticated
			g.failures.Fail(counted...)
		}
		g.Audit(ctx, outcome, method, addr, kind, keyID, nil, err)
		return nil, nil, err
	}
	if err := authz.Authorize(p, method); err != nil {
		g.Audit(ctx, outcomeDenied, method, addr, kind, keyID, p, err)
		return nil, nil, err
	}
	return auth.NewContext(ctx, p), &caller{method: method, addr: addr, kind: kind, keyID: keyID, p: p}, nil
}

// denied audits a call the gateway admitted and a service behind it refused with
// PERMISSION_DENIED (a system/ playbook started without the system role, a key minted
// for another tenant): that refusal is the service's, its audit line the gateway's, like
// those of its own.
func (g *Guard) denied(ctx context.Context, c *caller, err error) {
	if status.Code(err) == codes.PermissionDenied {
		g.Audit(ctx, outcomeDenied, c.method, c.addr, c.kind, c.keyID, c.p, err)
	}
}

// Audit logs one refused call as an audit line: warn level, audit=true, the outcome, the
// method, the client address, the credential's kind and API key id (never the credential),
// the principal when known, and the refusal's message (which never quotes a credential).
func (g *Guard) Audit(ctx context.Context, outcome, method, addr, kind, keyID string, p *auth.Principal, err error) {
	g.refused.WithLabelValues(outcome).Inc()
	if g.log == nil {
		return
	}
	attrs := []slog.Attr{
		slog.Bool("audit", true), slog.String("outcome", outcome), slog.String("method", method), slog.String("address", addr),
		slog.String("credential", kind), slog.String("key_id", keyID),
	}
	if p != nil {
		attrs = append(attrs, slog.String("tenant", p.Tenant), slog.String("subject", p.Subject))
	}
	attrs = append(attrs, slog.String("error", status.Convert(err).Message()))
	msg := "authentication failed"
	switch outcome {
	case outcomeDenied:
		msg = "authorization denied"
	case OutcomeThrottled:
		msg = "authentication throttled"
	case outcomeUnverified:
		msg = "authentication unverified"
	}
	g.log.LogAttrs(ctx, slog.LevelWarn, msg, attrs...)
}

// Unary is the unary interceptor.
func (g *Guard) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if auth.Exempt(info.FullMethod) {
		return handler(ctx, req)
	}
	ctx, c, err := g.admit(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	resp, err := handler(ctx, req)
	g.denied(ctx, c, err)
	return resp, err
}

// Stream is the stream interceptor.
func (g *Guard) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if auth.Exempt(info.FullMethod) {
		return handler(srv, ss)
	}
	ctx, c, err := g.admit(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	err = handler(srv, &admittedStream{ServerStream: ss, ctx: ctx})
	g.denied(ctx, c, err)
	return err
}

// admittedStream carries the principal in its context.
type admittedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *admittedStream) Context() context.Context { return s.ctx }

// VerifyKey verifies API keys with the orchestrator, which stores their digests.
func VerifyKey(keys orchv1.ApiKeyServiceClient) authn.KeyVerifier {
	return func(ctx context.Context, key string) (*auth.Principal, error) {
		resp, err := keys.VerifyApiKey(ctx, &orchv1.VerifyApiKeyRequest{Key: key})
		if err != nil {
			return nil, err
		}
		k := resp.GetKey()
		return &auth.Principal{Tenant: k.GetTenant(), Subject: "apikey:" + k.GetId(), Roles: k.GetRoles()}, nil
	}
}
