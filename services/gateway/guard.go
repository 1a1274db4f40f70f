package gateway

import (
	"context"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/services/gateway/internal/authn"
	"github.com/noetl/noetl/services/gateway/internal/authz"
)

// guard authenticates and authorizes every call of the public gRPC server; REST and the
// /api/ routes reach that server through the loopback connection, so it sees them too.
// Health and reflection are open.
type guard struct {
	authn *authn.Authenticator
}

// admit returns ctx carrying the caller's principal, or the error that refuses the call.
func (g *guard) admit(ctx context.Context, method string) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	p, err := g.authn.Authenticate(ctx, md)
	if err != nil {
		return nil, err
	}
	if err := authz.Authorize(p, method); err != nil {
		return nil, err
	}
	return auth.NewContext(ctx, p), nil
}

func (g *guard) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if auth.Exempt(info.FullMethod) {
		return handler(ctx, req)
	}
	ctx, err := g.admit(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (g *guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if auth.Exempt(info.FullMethod) {
		return handler(srv, ss)
	}
	ctx, err := g.admit(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, &admittedStream{ServerStream: ss, ctx: ctx})
}

// admittedStream carries the principal in its context.
type admittedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *admittedStream) Context() context.Context { return s.ctx }

// verifyKey verifies API keys with the orchestrator, which stores their digests.
func verifyKey(keys orchv1.ApiKeyServiceClient) authn.KeyVerifier {
	return func(ctx context.Context, key string) (*auth.Principal, error) {
		resp, err := keys.VerifyApiKey(ctx, &orchv1.VerifyApiKeyRequest{Key: key})
		if err != nil {
			return nil, err
		}
		k := resp.GetKey()
		return &auth.Principal{Tenant: k.GetTenant(), Subject: "apikey:" + k.GetId(), Roles: k.GetRoles()}, nil
	}
}

// headerMatcher passes x-api-key to the gRPC server besides grpc-gateway's defaults
// (Authorization is always passed).
func headerMatcher(key string) (string, bool) {
	if strings.EqualFold(key, "X-Api-Key") {
		return "x-api-key", true
	}
	return runtime.DefaultHeaderMatcher(key)
}

// forwardCredentials puts the request's Authorization and x-api-key headers in the
// outgoing gRPC metadata of its context, for handlers that call the loopback connection.
func forwardCredentials(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		md := metadata.MD{}
		if v := r.Header.Values("Authorization"); len(v) > 0 {
			md["authorization"] = v
		}
		if v := r.Header.Values("X-Api-Key"); len(v) > 0 {
			md["x-api-key"] = v
		}
		h.ServeHTTP(w, r.WithContext(metadata.NewOutgoingContext(r.Context(), md)))
	})
}

// loopbackBackend is the compat routes' backend: the public API called through the
// loopback connection.
type loopbackBackend struct {
	cat  apiv1.CatalogServiceClient
	exe  apiv1.ExecutionServiceClient
	cred apiv1.CredentialServiceClient
}

func newLoopbackBackend(conn grpc.ClientConnInterface) *loopbackBackend {
	return &loopbackBackend{cat: apiv1.NewCatalogServiceClient(conn), exe: apiv1.NewExecutionServiceClient(conn), cred: apiv1.NewCredentialServiceClient(conn)}
}

// RegisterPlaybook implements compat.Backend.
func (b *loopbackBackend) RegisterPlaybook(ctx context.Context, r *apiv1.RegisterPlaybookRequest) (*apiv1.RegisterPlaybookResponse, error) {
	return b.cat.RegisterPlaybook(ctx, r)
}

// StartExecution implements compat.Backend.
func (b *loopbackBackend) StartExecution(ctx context.Context, r *apiv1.StartExecutionRequest) (*apiv1.StartExecutionResponse, error) {
	return b.exe.StartExecution(ctx, r)
}

// GetExecution implements compat.Backend.
func (b *loopbackBackend) GetExecution(ctx context.Context, r *apiv1.GetExecutionRequest) (*apiv1.GetExecutionResponse, error) {
	return b.exe.GetExecution(ctx, r)
}

// WaitExecution implements compat.Backend.
func (b *loopbackBackend) WaitExecution(ctx context.Context, r *apiv1.WaitExecutionRequest) (*apiv1.WaitExecutionResponse, error) {
	return b.exe.WaitExecution(ctx, r)
}

// CancelExecution implements compat.Backend.
func (b *loopbackBackend) CancelExecution(ctx context.Context, r *apiv1.CancelExecutionRequest) (*apiv1.CancelExecutionResponse, error) {
	return b.exe.CancelExecution(ctx, r)
}

// ListExecutionEvents implements compat.Backend.
func (b *loopbackBackend) ListExecutionEvents(ctx context.Context, r *apiv1.ListExecutionEventsRequest) (*apiv1.ListExecutionEventsResponse, error) {
	return b.exe.ListExecutionEvents(ctx, r)
}

// PutCredential implements compat.Backend.
func (b *loopbackBackend) PutCredential(ctx context.Context, r *apiv1.PutCredentialRequest) (*apiv1.PutCredentialResponse, error) {
	return b.cred.PutCredential(ctx, r)
}
