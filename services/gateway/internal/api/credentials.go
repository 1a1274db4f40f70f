package api

import (
	"context"
	"encoding/json"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
)

// Credential limits, checked before forwarding.
const (
	MaxCredentialName  = 128
	MaxCredentialType  = 64
	MaxCredentialBytes = 64 << 10
)

// validCredentialName returns an InvalidArgument error naming the field unless name is 1 to
// MaxCredentialName characters of A-Z, a-z, 0-9, '_', '.' and '-'.
func validCredentialName(name string) error {
	if name == "" {
		return status.Error(codes.InvalidArgument, "name: required")
	}
	if len(name) > MaxCredentialName {
		return status.Errorf(codes.InvalidArgument, "name: %d characters exceeds the limit of %d", len(name), MaxCredentialName)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return status.Errorf(codes.InvalidArgument, "name: %q may hold only letters, digits, '_', '.' and '-'", name)
		}
	}
	return nil
}

// PutCredential implements CredentialService. The data is forwarded to the orchestrator,
// which seals it; no error message quotes it.
func (s *Server) PutCredential(ctx context.Context, req *apiv1.PutCredentialRequest) (*apiv1.PutCredentialResponse, error) {
	if err := validCredentialName(req.GetName()); err != nil {
		return nil, err
	}
	if len(req.GetType()) > MaxCredentialType {
		return nil, status.Errorf(codes.InvalidArgument, "type: %d characters exceeds the limit of %d", len(req.GetType()), MaxCredentialType)
	}
	if req.GetData() == nil {
		return nil, status.Error(codes.InvalidArgument, "data: required")
	}
	data, err := json.Marshal(req.GetData().AsMap())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, "data: must be a JSON object")
	}
	if len(data) > MaxCredentialBytes {
		return nil, status.Errorf(codes.InvalidArgument, "data: %d bytes exceeds the limit of %d", len(data), MaxCredentialBytes)
	}
	resp, err := s.Credentials.PutCredential(ctx, &orchv1.PutCredentialRequest{Tenant: tenant(ctx), Name: req.GetName(), Type: req.GetType(), DataJson: data})
	if err != nil {
		return nil, err
	}
	return &apiv1.PutCredentialResponse{Credential: &apiv1.Credential{Name: req.GetName(), Type: req.GetType(), UpdateTime: resp.GetUpdateTime()}}, nil
}

// ListCredentials implements CredentialService: names, types and times, never data.
func (s *Server) ListCredentials(ctx context.Context, req *apiv1.ListCredentialsRequest) (*apiv1.ListCredentialsResponse, error) {
	if req.GetPageSize() < 0 {
		return nil, status.Error(codes.InvalidArgument, "page_size: must not be negative")
	}
	resp, err := s.Credentials.ListCredentials(ctx, &orchv1.ListCredentialsRequest{Tenant: tenant(ctx), PageSize: req.GetPageSize(), PageToken: req.GetPageToken()})
	if err != nil {
		return nil, err
	}
	out := &apiv1.ListCredentialsResponse{NextPageToken: resp.GetNextPageToken()}
	for _, c := range resp.GetCredentials() {
		out.Credentials = append(out.Credentials, &apiv1.Credential{Name: c.GetName(), Type: c.GetType(), UpdateTime: c.GetUpdateTime()})
	}
	return out, nil
}

// DeleteCredential implements CredentialService.
func (s *Server) DeleteCredential(ctx context.Context, req *apiv1.DeleteCredentialRequest) (*apiv1.DeleteCredentialResponse, error) {
	if err := validCredentialName(req.GetName()); err != nil {
		return nil, err
	}
	if _, err := s.Credentials.DeleteCredential(ctx, &orchv1.DeleteCredentialRequest{Tenant: tenant(ctx), Name: req.GetName()}); err != nil {
		return nil, err
	}
	return &apiv1.DeleteCredentialResponse{}, nil
}
