// Package credentials is the orchestrator's CredentialService: a tenant's named secrets,
// sealed at rest (Sealer, AES-256-GCM under NOETL_ENCRYPTION_KEY, bound to tenant and name)
// in noetl.credential (Store, the package's only SQL).
//
// Invariants: credential data is never stored in plaintext by this service, never
// returned to a user (only service principals resolve it, for workers) and never quoted
// in an error; without the key, storing and resolving fail with ErrNoKey while listing and
// deleting still work; every read and write is scoped by tenant.
package credentials

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/grpcx"
)

// Sentinel errors of the credential service; Codes maps them to gRPC codes.
var (
	// ErrNoKey is returned by the calls that need the encryption key when none is
	// configured.
	ErrNoKey = errors.New("NOETL_ENCRYPTION_KEY is not set")
	// ErrNotFound is returned for a credential the tenant does not have.
	ErrNotFound = errors.New("not found")
	// ErrPlaintext is returned for a credential still stored in plaintext, from before
	// encryption at rest, which is not served until it is sealed.
	ErrPlaintext = errors.New("is stored unencrypted; restart the orchestrator with NOETL_ENCRYPTION_KEY to seal it")
)

// Codes maps the package's sentinel errors to the gRPC codes that answer them (the
// service's one error interceptor, grpcx.Errors).
var Codes = []grpcx.Sentinel{
	{Err: ErrNoKey, Code: codes.FailedPrecondition},
	{Err: ErrNotFound, Code: codes.NotFound},
	{Err: ErrPlaintext, Code: codes.FailedPrecondition},
	{Err: ErrUnsealable, Code: codes.FailedPrecondition},
}

// Service implements CredentialService.
type Service struct {
	orchv1.UnimplementedCredentialServiceServer

	Store *Store
	// Sealer encrypts credential data at rest; nil (no NOETL_ENCRYPTION_KEY) makes storing
	// and resolving credentials fail with ErrNoKey.
	Sealer *Sealer
}

// PutCredential seals a credential's data and stores it, replacing any credential of the
// same name.
func (s *Service) PutCredential(ctx context.Context, req *orchv1.PutCredentialRequest) (*orchv1.PutCredentialResponse, error) {
	if err := domain.CheckCredential(req.GetName(), req.GetType(), len(req.GetDataJson())); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// Error texts never quote the data: it is secret.
	data := bytes.TrimSpace(req.GetDataJson())
	if len(data) == 0 || data[0] != '{' || !json.Valid(data) {
		return nil, status.Error(codes.InvalidArgument, "data: must be a JSON object")
	}
	if s.Sealer == nil {
		return nil, ErrNoKey
	}
	var plain bytes.Buffer
	if err := json.Compact(&plain, data); err != nil {
		return nil, status.Error(codes.InvalidArgument, "data: must be a JSON object")
	}
	tenant := domain.TenantOrDefault(req.GetTenant())
	sealed, err := s.Sealer.Seal(tenant, req.GetName(), plain.Bytes())
	if err != nil {
		return nil, err
	}
	updated, err := s.Store.PutCredential(ctx, tenant, req.GetName(), req.GetType(), sealed)
	if err != nil {
		return nil, err
	}
	return &orchv1.PutCredentialResponse{UpdateTime: timestamppb.New(updated)}, nil
}

// ResolveCredential opens a credential's data for a worker. Only service principals may
// call it: no user reads credential data, even through the gateway.
func (s *Service) ResolveCredential(ctx context.Context, req *orchv1.ResolveCredentialRequest) (*orchv1.ResolveCredentialResponse, error) {
	if err := auth.RequireService(ctx); err != nil {
		return nil, err
	}
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name: required")
	}
	if s.Sealer == nil {
		return nil, ErrNoKey
	}
	tenant := domain.TenantOrDefault(req.GetTenant())
	typ, sealed, err := s.Store.SealedCredential(ctx, tenant, req.GetName())
	if err != nil {
		return nil, fmt.Errorf("credential %q %w", req.GetName(), err)
	}
	if sealed == nil {
		return nil, fmt.Errorf("credential %q %w", req.GetName(), ErrPlaintext)
	}
	data, err := s.Sealer.Open(tenant, req.GetName(), sealed)
	if err != nil {
		return nil, fmt.Errorf("credential %q: %w", req.GetName(), err)
	}
	return &orchv1.ResolveCredentialResponse{Type: typ, DataJson: data}, nil
}

// ListCredentials returns a page of a tenant's credentials, ordered by name, without data.
func (s *Service) ListCredentials(ctx context.Context, req *orchv1.ListCredentialsRequest) (*orchv1.ListCredentialsResponse, error) {
	n := int(req.GetPageSize())
	if n <= 0 {
		n = 50
	}
	n = min(n, 500)
	cs, err := s.Store.ListCredentials(ctx, domain.TenantOrDefault(req.GetTenant()), req.GetPageToken(), n)
	if err != nil {
		return nil, err
	}
	resp := &orchv1.ListCredentialsResponse{}
	for _, c := range cs {
		resp.Credentials = append(resp.Credentials, &orchv1.CredentialInfo{Name: c.Name, Type: c.Type, UpdateTime: timestamppb.New(c.Updated)})
	}
	if len(resp.Credentials) == n {
		resp.NextPageToken = resp.Credentials[n-1].GetName()
	}
	return resp, nil
}

// DeleteCredential deletes a credential. It needs no encryption key.
func (s *Service) DeleteCredential(ctx context.Context, req *orchv1.DeleteCredentialRequest) (*orchv1.DeleteCredentialResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name: required")
	}
	if err := s.Store.DeleteCredential(ctx, domain.TenantOrDefault(req.GetTenant()), req.GetName()); err != nil {
		return nil, fmt.Errorf("credential %q %w", req.GetName(), err)
	}
	return &orchv1.DeleteCredentialResponse{}, nil
}

// SealPlaintextCredentials encrypts the credentials stored in plaintext before encryption
// at rest existed and clears their plaintext, in batches. It returns how many it sealed.
// Replicas starting together skip each other's locked rows.
func (s *Service) SealPlaintextCredentials(ctx context.Context) (int, error) {
	if s.Sealer == nil {
		return 0, fmt.Errorf("seal credentials: %w", ErrNoKey)
	}
	total := 0
	for {
		n, err := s.Store.SealPlaintext(ctx, 100, s.Sealer.Seal)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}
