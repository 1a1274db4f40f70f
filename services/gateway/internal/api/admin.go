package api

import (
	"context"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
)

func apiKeyOf(k *orchv1.ApiKeyInfo) *apiv1.ApiKey {
	return &apiv1.ApiKey{
		Id: k.GetId(), Tenant: k.GetTenant(), Roles: k.GetRoles(), Name: k.GetName(), CreatedBy: k.GetCreatedBy(),
		CreateTime: k.GetCreateTime(), LastUsedTime: k.GetLastUsedTime(), ExpireTime: k.GetExpireTime(), RevokeTime: k.GetRevokeTime(),
	}
}

// CreateApiKey implements AdminService. The orchestrator, which stores keys, checks that
// the caller may grant the roles and name the tenant.
func (s *Server) CreateApiKey(ctx context.Context, req *apiv1.CreateApiKeyRequest) (*apiv1.CreateApiKeyResponse, error) {
	resp, err := s.Keys.CreateApiKey(ctx, &orchv1.CreateApiKeyRequest{
		Tenant: tenant(ctx), KeyTenant: req.GetTenant(), Roles: req.GetRoles(), Name: req.GetName(), ExpireTime: req.GetExpireTime(),
	})
	if err != nil {
		return nil, err
	}
	return &apiv1.CreateApiKeyResponse{ApiKey: apiKeyOf(resp.GetKey()), Secret: resp.GetSecret()}, nil
}

// ListApiKeys implements AdminService.
func (s *Server) ListApiKeys(ctx context.Context, req *apiv1.ListApiKeysRequest) (*apiv1.ListApiKeysResponse, error) {
	resp, err := s.Keys.ListApiKeys(ctx, &orchv1.ListApiKeysRequest{Tenant: tenant(ctx), PageSize: req.GetPageSize(), PageToken: req.GetPageToken()})
	if err != nil {
		return nil, err
	}
	out := &apiv1.ListApiKeysResponse{NextPageToken: resp.GetNextPageToken()}
	for _, k := range resp.GetKeys() {
		out.ApiKeys = append(out.ApiKeys, apiKeyOf(k))
	}
	return out, nil
}

// RevokeApiKey implements AdminService.
func (s *Server) RevokeApiKey(ctx context.Context, req *apiv1.RevokeApiKeyRequest) (*apiv1.RevokeApiKeyResponse, error) {
	if err := validKeyID("id", req.GetId()); err != nil {
		return nil, err
	}
	resp, err := s.Keys.RevokeApiKey(ctx, &orchv1.RevokeApiKeyRequest{Tenant: tenant(ctx), Id: req.GetId()})
	if err != nil {
		return nil, err
	}
	return &apiv1.RevokeApiKeyResponse{ApiKey: apiKeyOf(resp.GetKey())}, nil
}
