// Package loopback is how the gateway's own HTTP routes (the /api/ routes, the event and
// log streams, exports, the console, webhooks with credentials) call its public gRPC API:
// through the in-memory loopback connection to its own gRPC server, with the request's
// credentials and client address (ForwardCredentials, Outgoing). Invariant: no route
// reaches the API's implementation around the guard; each passes the same authentication,
// authorization and limits as a gRPC caller.
package loopback

import (
	"context"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/services/gateway/internal/clientaddr"
)

// ForwardCredentials puts the request's Authorization and x-api-key headers, and its
// client address, in the outgoing gRPC metadata of its context (Outgoing), for handlers
// that call the loopback connection.
func ForwardCredentials(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(Outgoing(r)))
	})
}

// Outgoing returns the request's context with its Authorization and x-api-key headers, and
// its client address (clientaddr.MetadataKey), as outgoing gRPC metadata.
func Outgoing(r *http.Request) context.Context {
	md := metadata.MD{clientaddr.MetadataKey: []string{clientaddr.FromREST(r.Context())}}
	if v := r.Header.Values("Authorization"); len(v) > 0 {
		md["authorization"] = v
	}
	if v := r.Header.Values("X-Api-Key"); len(v) > 0 {
		md["x-api-key"] = v
	}
	return metadata.NewOutgoingContext(r.Context(), md)
}

// Backend is the compat routes' backend: the public API called through the
// loopback connection.
type Backend struct {
	cat  apiv1.CatalogServiceClient
	exe  apiv1.ExecutionServiceClient
	cred apiv1.CredentialServiceClient
	res  apiv1.ResultServiceClient
}

// NewBackend returns the compat routes' backend over conn, the loopback connection.
func NewBackend(conn grpc.ClientConnInterface) *Backend {
	return &Backend{cat: apiv1.NewCatalogServiceClient(conn), exe: apiv1.NewExecutionServiceClient(conn), cred: apiv1.NewCredentialServiceClient(conn), res: apiv1.NewResultServiceClient(conn)}
}

// RegisterPlaybook implements compat.Backend.
func (b *Backend) RegisterPlaybook(ctx context.Context, r *apiv1.RegisterPlaybookRequest) (*apiv1.RegisterPlaybookResponse, error) {
	return b.cat.RegisterPlaybook(ctx, r)
}

// StartExecution implements compat.Backend.
func (b *Backend) StartExecution(ctx context.Context, r *apiv1.StartExecutionRequest) (*apiv1.StartExecutionResponse, error) {
	return b.exe.StartExecution(ctx, r)
}

// GetExecution implements compat.Backend.
func (b *Backend) GetExecution(ctx context.Context, r *apiv1.GetExecutionRequest) (*apiv1.GetExecutionResponse, error) {
	return b.exe.GetExecution(ctx, r)
}

// WaitExecution implements compat.Backend.
func (b *Backend) WaitExecution(ctx context.Context, r *apiv1.WaitExecutionRequest) (*apiv1.WaitExecutionResponse, error) {
	return b.exe.WaitExecution(ctx, r)
}

// CancelExecution implements compat.Backend.
func (b *Backend) CancelExecution(ctx context.Context, r *apiv1.CancelExecutionRequest) (*apiv1.CancelExecutionResponse, error) {
	return b.exe.CancelExecution(ctx, r)
}

// ListExecutionEvents implements compat.Backend.
func (b *Backend) ListExecutionEvents(ctx context.Context, r *apiv1.ListExecutionEventsRequest) (*apiv1.ListExecutionEventsResponse, error) {
	return b.exe.ListExecutionEvents(ctx, r)
}

// PutCredential implements compat.Backend.
func (b *Backend) PutCredential(ctx context.Context, r *apiv1.PutCredentialRequest) (*apiv1.PutCredentialResponse, error) {
	return b.cred.PutCredential(ctx, r)
}

// GetPlaybook implements compat.Backend.
func (b *Backend) GetPlaybook(ctx context.Context, r *apiv1.GetPlaybookRequest) (*apiv1.GetPlaybookResponse, error) {
	return b.cat.GetPlaybook(ctx, r)
}

// ListPlaybooks implements compat.Backend.
func (b *Backend) ListPlaybooks(ctx context.Context, r *apiv1.ListPlaybooksRequest) (*apiv1.ListPlaybooksResponse, error) {
	return b.cat.ListPlaybooks(ctx, r)
}

// ListExecutions implements compat.Backend.
func (b *Backend) ListExecutions(ctx context.Context, r *apiv1.ListExecutionsRequest) (*apiv1.ListExecutionsResponse, error) {
	return b.exe.ListExecutions(ctx, r)
}

// GetResult implements compat.Backend.
func (b *Backend) GetResult(ctx context.Context, r *apiv1.GetResultRequest) (*apiv1.GetResultResponse, error) {
	return b.res.GetResult(ctx, r)
}

// ListExecutionVariables implements compat.Backend.
func (b *Backend) ListExecutionVariables(ctx context.Context, r *apiv1.ListExecutionVariablesRequest) (*apiv1.ListExecutionVariablesResponse, error) {
	return b.exe.ListExecutionVariables(ctx, r)
}

// SetExecutionVariables implements compat.Backend.
func (b *Backend) SetExecutionVariables(ctx context.Context, r *apiv1.SetExecutionVariablesRequest) (*apiv1.SetExecutionVariablesResponse, error) {
	return b.exe.SetExecutionVariables(ctx, r)
}

// DeleteExecutionVariables implements compat.Backend.
func (b *Backend) DeleteExecutionVariables(ctx context.Context, r *apiv1.DeleteExecutionVariablesRequest) (*apiv1.DeleteExecutionVariablesResponse, error) {
	return b.exe.DeleteExecutionVariables(ctx, r)
}
