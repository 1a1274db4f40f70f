package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/services/orchestrator/internal/keystore"
)

// errNoKey is returned by the credential RPCs that need the encryption key when none is
// configured.
var errNoKey = status.Error(codes.FailedPrecondition, "NOETL_ENCRYPTION_KEY is not set")

// ValidCredentialName is domain.CheckCredentialName as an InvalidArgument status.
func ValidCredentialName(name string) error {
	if err := domain.CheckCredentialName(name); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

// PutCredential seals a credential's data and stores it, replacing any credential of the
// same name.
func (s *Server) PutCredential(ctx context.Context, req *orchv1.PutCredentialRequest) (*orchv1.PutCredentialResponse, error) {
	if err := domain.CheckCredential(req.GetName(), req.GetType(), len(req.GetDataJson())); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// Error texts never quote the data: it is secret.
	data := bytes.TrimSpace(req.GetDataJson())
	if len(data) == 0 || data[0] != '{' || !json.Valid(data) {
		return nil, status.Error(codes.InvalidArgument, "data: must be a JSON object")
	}
	if s.Sealer == nil {
		return nil, errNoKey
	}
	var plain bytes.Buffer
	if err := json.Compact(&plain, data); err != nil {
		return nil, status.Error(codes.InvalidArgument, "data: must be a JSON object")
	}
	tenant := tenantOf(req.GetTenant())
	sealed, err := s.Sealer.Seal(tenant, req.GetName(), plain.Bytes())
	if err != nil {
		return nil, err
	}
	updated, err := s.Keys.PutCredential(ctx, tenant, req.GetName(), req.GetType(), sealed)
	if err != nil {
		return nil, err
	}
	return &orchv1.PutCredentialResponse{UpdateTime: timestamppb.New(updated)}, nil
}

// ResolveCredential opens a credential's data for a worker. Only service principals may
// call it: no user reads credential data, even through the gateway.
func (s *Server) ResolveCredential(ctx context.Context, req *orchv1.ResolveCredentialRequest) (*orchv1.ResolveCredentialResponse, error) {
	if err := auth.RequireService(ctx); err != nil {
		return nil, err
	}
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name: required")
	}
	if s.Sealer == nil {
		return nil, errNoKey
	}
	tenant := tenantOf(req.GetTenant())
	typ, sealed, err := s.Keys.SealedCredential(ctx, tenant, req.GetName())
	if errors.Is(err, keystore.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "credential %q not found", req.GetName())
	}
	if err != nil {
		return nil, err
	}
	if sealed == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "credential %q is stored unencrypted; restart the orchestrator with NOETL_ENCRYPTION_KEY to seal it", req.GetName())
	}
	data, err := s.Sealer.Open(tenant, req.GetName(), sealed)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "credential %q: %v", req.GetName(), err)
	}
	return &orchv1.ResolveCredentialResponse{Type: typ, DataJson: data}, nil
}

// ListCredentials returns a page of a tenant's credentials, ordered by name, without data.
func (s *Server) ListCredentials(ctx context.Context, req *orchv1.ListCredentialsRequest) (*orchv1.ListCredentialsResponse, error) {
	n := int(req.GetPageSize())
	if n <= 0 {
		n = 50
	}
	n = min(n, 500)
	cs, err := s.Keys.ListCredentials(ctx, tenantOf(req.GetTenant()), req.GetPageToken(), n)
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
func (s *Server) DeleteCredential(ctx context.Context, req *orchv1.DeleteCredentialRequest) (*orchv1.DeleteCredentialResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name: required")
	}
	err := s.Keys.DeleteCredential(ctx, tenantOf(req.GetTenant()), req.GetName())
	if errors.Is(err, keystore.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "credential %q not found", req.GetName())
	}
	if err != nil {
		return nil, err
	}
	return &orchv1.DeleteCredentialResponse{}, nil
}

// SealPlaintextCredentials encrypts the credentials stored in plaintext before encryption
// at rest existed and clears their plaintext, in batches. It returns how many it sealed.
// Replicas starting together skip each other's locked rows.
func (s *Server) SealPlaintextCredentials(ctx context.Context) (int, error) {
	if s.Sealer == nil {
		return 0, errors.New("seal credentials: no encryption key")
	}
	total := 0
	for {
		n, err := s.Keys.SealPlaintext(ctx, 100, s.Sealer.Seal)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}
