// Package apikeys is the orchestrator's ApiKeyService: the API keys a gateway admits
// callers with, in noetl.api_key (Store, the package's only SQL), and the bootstrap key a
// deployment starts from (EnsureAPIKey).
//
// Invariants: a key's secret is shown once, at creation, and stored only as its SHA-256
// digest, compared in constant time; a key grants at most the roles of the admin who made
// it, in the admin's tenant unless the admin holds the system role; a revoked key stays
// revoked (a bootstrap key is never stored again); every refusal of a presented key is the
// same ErrInvalidKey, saying nothing of which check failed; only service principals verify.
package apikeys

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/grpcx"
)

// API key limits and the interval at which a key's last use is recorded.
const (
	MaxAPIKeyName     = 128
	lastUsedThrottle  = time.Minute
	defaultAPIKeyPage = 50
)

// Sentinel errors of the API key service; Codes maps them to gRPC codes.
var (
	// ErrNotFound is returned for a key the tenant does not have.
	ErrNotFound = errors.New("not found")
	// ErrInvalidKey is every refusal of a presented key: malformed, unknown, wrong secret,
	// revoked or expired alike.
	ErrInvalidKey = errors.New("invalid API key")
)

// Codes maps the package's sentinel errors to the gRPC codes that answer them (the
// service's one error interceptor, grpcx.Errors).
var Codes = []grpcx.Sentinel{
	{Err: ErrNotFound, Code: codes.NotFound},
	{Err: ErrInvalidKey, Code: codes.NotFound},
}

// Service implements ApiKeyService.
type Service struct {
	orchv1.UnimplementedApiKeyServiceServer

	Store *Store
}

// apiKeyInfo is a stored key as the API shows it.
func apiKeyInfo(k *APIKey) *orchv1.ApiKeyInfo {
	ts := func(t *time.Time) *timestamppb.Timestamp {
		if t == nil {
			return nil
		}
		return timestamppb.New(*t)
	}
	return &orchv1.ApiKeyInfo{Id: k.ID, Tenant: k.Tenant, Roles: k.Roles, Name: k.Name, CreatedBy: k.CreatedBy,
		CreateTime: timestamppb.New(k.Created), LastUsedTime: ts(k.LastUsed), ExpireTime: ts(k.Expires), RevokeTime: ts(k.Revoked)}
}

// CreateApiKey creates a key for the caller's tenant (another tenant needs the system
// role) with roles the caller holds, and returns its secret once.
func (s *Service) CreateApiKey(ctx context.Context, req *orchv1.CreateApiKeyRequest) (*orchv1.CreateApiKeyResponse, error) {
	p := auth.FromContext(ctx)
	if !p.Can(auth.PermAdmin) {
		return nil, status.Error(codes.PermissionDenied, "creating API keys needs the admin role")
	}
	tenant := domain.TenantOrDefault(req.GetTenant())
	keyTenant := req.GetKeyTenant()
	if keyTenant == "" {
		keyTenant = tenant
	}
	if err := auth.CheckTenant("tenant", keyTenant); err != nil {
		return nil, err
	}
	if keyTenant != tenant && !p.Can(auth.PermSystem) {
		return nil, status.Errorf(codes.PermissionDenied, "tenant: creating a key for tenant %q needs the system role", keyTenant)
	}
	if len(req.GetRoles()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "roles: at least one of viewer, operator, admin, system is required")
	}
	var roles []string
	for _, r := range req.GetRoles() {
		if !auth.ValidRole(r) {
			return nil, status.Errorf(codes.InvalidArgument, "roles: unknown role %q (want viewer, operator, admin or system)", r)
		}
		if !p.CanGrant(r) {
			return nil, status.Errorf(codes.PermissionDenied, "roles: granting %q needs a role that holds all it permits", r)
		}
		if !slices.Contains(roles, r) {
			roles = append(roles, r)
		}
	}
	if len(req.GetName()) > MaxAPIKeyName {
		return nil, status.Errorf(codes.InvalidArgument, "name: %d characters exceeds the limit of %d", len(req.GetName()), MaxAPIKeyName)
	}
	var expires *time.Time
	if e := req.GetExpireTime(); e != nil {
		if !e.IsValid() || !e.AsTime().After(time.Now()) {
			return nil, status.Error(codes.InvalidArgument, "expire_time: must be in the future")
		}
		t := e.AsTime()
		expires = &t
	}
	secret, id, digest, err := auth.NewAPIKey()
	if err != nil {
		return nil, fmt.Errorf("create api key: %w", err)
	}
	k, err := s.Store.CreateAPIKey(ctx, APIKey{ID: id, Tenant: keyTenant, Roles: roles, Name: req.GetName(), CreatedBy: p.Subject, Expires: expires}, digest)
	if err != nil {
		return nil, err
	}
	return &orchv1.CreateApiKeyResponse{Key: apiKeyInfo(k), Secret: secret}, nil
}

// ListApiKeys returns a page of a tenant's keys ordered by id, without secrets.
func (s *Service) ListApiKeys(ctx context.Context, req *orchv1.ListApiKeysRequest) (*orchv1.ListApiKeysResponse, error) {
	if req.GetPageSize() < 0 {
		return nil, status.Error(codes.InvalidArgument, "page_size: must not be negative")
	}
	n := int(req.GetPageSize())
	if n == 0 {
		n = defaultAPIKeyPage
	}
	n = min(n, 500)
	ks, err := s.Store.ListAPIKeys(ctx, domain.TenantOrDefault(req.GetTenant()), req.GetPageToken(), n)
	if err != nil {
		return nil, err
	}
	resp := &orchv1.ListApiKeysResponse{}
	for _, k := range ks {
		resp.Keys = append(resp.Keys, apiKeyInfo(k))
	}
	if len(resp.Keys) == n {
		resp.NextPageToken = resp.Keys[n-1].GetId()
	}
	return resp, nil
}

// RevokeApiKey revokes a key of the tenant; revoking twice keeps the first time. A key of
// another tenant is NotFound.
func (s *Service) RevokeApiKey(ctx context.Context, req *orchv1.RevokeApiKeyRequest) (*orchv1.RevokeApiKeyResponse, error) {
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "id: required")
	}
	k, err := s.Store.RevokeAPIKey(ctx, domain.TenantOrDefault(req.GetTenant()), req.GetId())
	if err != nil {
		return nil, fmt.Errorf("api key %q %w", req.GetId(), err)
	}
	return &orchv1.RevokeApiKeyResponse{Key: apiKeyInfo(k)}, nil
}

// VerifyApiKey checks a presented key: its secret's digest is compared in constant time
// with the stored one, and revoked or expired keys are refused. Every refusal is the same
// NotFound, saying nothing of which check failed. The key's last use is recorded at most
// once a minute.
func (s *Service) VerifyApiKey(ctx context.Context, req *orchv1.VerifyApiKeyRequest) (*orchv1.VerifyApiKeyResponse, error) {
	if err := auth.RequireService(ctx); err != nil {
		return nil, err
	}
	id, digest, ok := auth.ParseAPIKey(req.GetKey())
	if !ok {
		return nil, ErrInvalidKey
	}
	k, stored, err := s.Store.APIKeyByID(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil, ErrInvalidKey
	}
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if !auth.DigestEqual(digest, stored) || k.Revoked != nil || (k.Expires != nil && !now.Before(*k.Expires)) {
		return nil, ErrInvalidKey
	}
	if k.LastUsed == nil || now.Sub(*k.LastUsed) >= lastUsedThrottle {
		if err := s.Store.TouchAPIKey(ctx, id, lastUsedThrottle); err != nil {
			return nil, err
		}
		k.LastUsed = &now
	}
	return &orchv1.VerifyApiKeyResponse{Key: apiKeyInfo(k)}, nil
}

// EnsureAPIKey stores key (noetl_<id>_<secret>, for example the dev mesh's admin.key or a
// key provisioned from a deployment secret) for tenant with roles unless its id is stored
// already, so a key revoked once stays revoked. It reports whether it stored it.
func (s *Service) EnsureAPIKey(ctx context.Context, key, tenant string, roles []string, name string) (bool, error) {
	id, digest, ok := auth.ParseAPIKey(key)
	if !ok {
		return false, errors.New("bootstrap API key: not of the form " + auth.APIKeyPrefix + "<id>_<secret>")
	}
	created, stored, err := s.Store.EnsureAPIKey(ctx, APIKey{ID: id, Tenant: tenant, Roles: roles, Name: name, CreatedBy: "bootstrap"}, digest)
	if err != nil || created {
		return created, err
	}
	if !auth.DigestEqual(digest, stored) {
		return false, fmt.Errorf("bootstrap API key: id %s is stored with another secret", id)
	}
	return false, nil
}
