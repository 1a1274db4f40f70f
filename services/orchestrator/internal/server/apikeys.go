package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/platform/auth"
)

// API key limits and the interval at which a key's last use is recorded.
const (
	MaxAPIKeyName     = 128
	lastUsedThrottle  = time.Minute
	apiKeyColumns     = `id, tenant, roles, name, created_by, created_at, last_used_at, expires_at, revoked_at`
	errInvalidAPIKey  = "invalid API key"
	defaultAPIKeyPage = 50
)

// scanAPIKey reads one row of apiKeyColumns.
func scanAPIKey(row pgx.Row) (*orchv1.ApiKeyInfo, error) {
	k := &orchv1.ApiKeyInfo{}
	var created time.Time
	var used, expires, revoked *time.Time
	if err := row.Scan(&k.Id, &k.Tenant, &k.Roles, &k.Name, &k.CreatedBy, &created, &used, &expires, &revoked); err != nil {
		return nil, err
	}
	k.CreateTime = timestamppb.New(created)
	ts := func(t *time.Time) *timestamppb.Timestamp {
		if t == nil {
			return nil
		}
		return timestamppb.New(*t)
	}
	k.LastUsedTime, k.ExpireTime, k.RevokeTime = ts(used), ts(expires), ts(revoked)
	return k, nil
}

// CreateApiKey creates a key for the caller's tenant (another tenant needs the system
// role) with roles the caller holds, and returns its secret once.
func (s *Server) CreateApiKey(ctx context.Context, req *orchv1.CreateApiKeyRequest) (*orchv1.CreateApiKeyResponse, error) {
	p := auth.FromContext(ctx)
	if !p.Can(auth.PermAdmin) {
		return nil, status.Error(codes.PermissionDenied, "creating API keys needs the admin role")
	}
	tenant := tenantOf(req.GetTenant())
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
	k, err := scanAPIKey(s.DB.QueryRow(ctx, `INSERT INTO noetl.api_key (id, tenant, roles, name, secret_sha256, created_by, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING `+apiKeyColumns, id, keyTenant, roles, req.GetName(), digest, p.Subject, expires))
	if err != nil {
		return nil, fmt.Errorf("create api key: %w", err)
	}
	return &orchv1.CreateApiKeyResponse{Key: k, Secret: secret}, nil
}

// ListApiKeys returns a page of a tenant's keys ordered by id, without secrets.
func (s *Server) ListApiKeys(ctx context.Context, req *orchv1.ListApiKeysRequest) (*orchv1.ListApiKeysResponse, error) {
	if req.GetPageSize() < 0 {
		return nil, status.Error(codes.InvalidArgument, "page_size: must not be negative")
	}
	n := int(req.GetPageSize())
	if n == 0 {
		n = defaultAPIKeyPage
	}
	n = min(n, 500)
	rows, err := s.DB.Query(ctx, `SELECT `+apiKeyColumns+` FROM noetl.api_key WHERE tenant = $1 AND id > $2 ORDER BY id LIMIT $3`,
		tenantOf(req.GetTenant()), req.GetPageToken(), n)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	defer rows.Close()
	resp := &orchv1.ListApiKeysResponse{}
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list api keys: %w", err)
		}
		resp.Keys = append(resp.Keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	if len(resp.Keys) == n {
		resp.NextPageToken = resp.Keys[n-1].GetId()
	}
	return resp, nil
}

// RevokeApiKey revokes a key of the tenant; revoking twice keeps the first time. A key of
// another tenant is NotFound.
func (s *Server) RevokeApiKey(ctx context.Context, req *orchv1.RevokeApiKeyRequest) (*orchv1.RevokeApiKeyResponse, error) {
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "id: required")
	}
	k, err := scanAPIKey(s.DB.QueryRow(ctx, `UPDATE noetl.api_key SET revoked_at = coalesce(revoked_at, now())
		WHERE tenant = $1 AND id = $2 RETURNING `+apiKeyColumns, tenantOf(req.GetTenant()), req.GetId()))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, status.Errorf(codes.NotFound, "api key %q not found", req.GetId())
	}
	if err != nil {
		return nil, fmt.Errorf("revoke api key: %w", err)
	}
	return &orchv1.RevokeApiKeyResponse{Key: k}, nil
}

// VerifyApiKey checks a presented key: its secret's digest is compared in constant time
// with the stored one, and revoked or expired keys are refused. Every refusal is the same
// NotFound, saying nothing of which check failed. The key's last use is recorded at most
// once a minute.
func (s *Server) VerifyApiKey(ctx context.Context, req *orchv1.VerifyApiKeyRequest) (*orchv1.VerifyApiKeyResponse, error) {
	if err := auth.RequireService(ctx); err != nil {
		return nil, err
	}
	id, digest, ok := auth.ParseAPIKey(req.GetKey())
	if !ok {
		return nil, status.Error(codes.NotFound, errInvalidAPIKey)
	}
	var stored []byte
	k := &orchv1.ApiKeyInfo{}
	var created time.Time
	var used, expires, revoked *time.Time
	err := s.DB.QueryRow(ctx, `SELECT secret_sha256, `+apiKeyColumns+` FROM noetl.api_key WHERE id = $1`, id).
		Scan(&stored, &k.Id, &k.Tenant, &k.Roles, &k.Name, &k.CreatedBy, &created, &used, &expires, &revoked)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, status.Error(codes.NotFound, errInvalidAPIKey)
	}
	if err != nil {
		return nil, fmt.Errorf("verify api key: %w", err)
	}
	now := time.Now()
	if !auth.DigestEqual(digest, stored) || revoked != nil || (expires != nil && !now.Before(*expires)) {
		return nil, status.Error(codes.NotFound, errInvalidAPIKey)
	}
	if used == nil || now.Sub(*used) >= lastUsedThrottle {
		if _, err := s.DB.Exec(ctx, `UPDATE noetl.api_key SET last_used_at = now()
			WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < now() - make_interval(secs => $2))`, id, lastUsedThrottle.Seconds()); err != nil {
			return nil, fmt.Errorf("verify api key: %w", err)
		}
		used = &now
	}
	k.CreateTime = timestamppb.New(created)
	k.LastUsedTime = timestamppb.New(*used)
	if expires != nil {
		k.ExpireTime = timestamppb.New(*expires)
	}
	return &orchv1.VerifyApiKeyResponse{Key: k}, nil
}

// EnsureAPIKey stores key (noetl_<id>_<secret>, for example the dev mesh's admin.key or a
// key provisioned from a deployment secret) for tenant with roles unless its id is stored
// already, so a key revoked once stays revoked. It reports whether it stored it.
func (s *Server) EnsureAPIKey(ctx context.Context, key, tenant string, roles []string, name string) (bool, error) {
	id, digest, ok := auth.ParseAPIKey(key)
	if !ok {
		return false, errors.New("bootstrap API key: not of the form " + auth.APIKeyPrefix + "<id>_<secret>")
	}
	tag, err := s.DB.Exec(ctx, `INSERT INTO noetl.api_key (id, tenant, roles, name, secret_sha256, created_by)
		VALUES ($1, $2, $3, $4, $5, 'bootstrap') ON CONFLICT (id) DO NOTHING`, id, tenant, roles, name, digest)
	if err != nil {
		return false, fmt.Errorf("bootstrap API key: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	var stored []byte
	if err := s.DB.QueryRow(ctx, `SELECT secret_sha256 FROM noetl.api_key WHERE id = $1`, id).Scan(&stored); err != nil {
		return false, fmt.Errorf("bootstrap API key: %w", err)
	}
	if !auth.DigestEqual(digest, stored) {
		return false, fmt.Errorf("bootstrap API key: id %s is stored with another secret", id)
	}
	return false, nil
}
