package api

import (
	"context"
	"encoding/json"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/domain"
)

// validCredentialName is domain.CheckCredentialName as an InvalidArgument status.
func validCredentialName(name string) error {
	if err := domain.CheckCredentialName(name); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

// PutCredential implements CredentialService. The data is forwarded to the orchestrator,
// which seals it; no error message quotes it.
func (s *Server) PutCredential(ctx context.Context, req *apiv1.PutCredentialRequest) (*apiv1.PutCredentialResponse, error) {
	if err := domain.CheckCredential(req.GetName(), req.GetType(), 0); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if req.GetData() == nil {
		return nil, status.Error(codes.InvalidArgument, "data: required")
	}
	data, err := json.Marshal(req.GetData().AsMap())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, "data: must be a JSON object")
	}
	if err := domain.CheckCredential(req.GetName(), req.GetType(), len(data)); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
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
