package apikeys

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store holds the SQL of noetl.api_key: API keys, their secrets kept only as SHA-256
// digests. Reads and writes are scoped by tenant except the lookups by key id, whose ids
// are global. Not-found is ErrNotFound.
type Store struct {
	db *pgxpool.Pool
}

// NewStore returns a Store on db.
func NewStore(db *pgxpool.Pool) *Store { return &Store{db: db} }

// APIKey is a stored API key without its secret.
type APIKey struct {
	ID, Tenant, Name, CreatedBy string
	Roles                       []string
	Created                     time.Time
	LastUsed, Expires, Revoked  *time.Time
}

// apiKeyColumns are the columns scanAPIKey reads, in its order.
const apiKeyColumns = `id, tenant, roles, name, created_by, created_at, last_used_at, expires_at, revoked_at`

func scanAPIKey(row pgx.Row, extra ...any) (*APIKey, error) {
	k := &APIKey{}
	dest := append(extra, &k.ID, &k.Tenant, &k.Roles, &k.Name, &k.CreatedBy, &k.Created, &k.LastUsed, &k.Expires, &k.Revoked)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	return k, nil
}

// CreateAPIKey stores a new key with the digest of its secret and returns it.
func (s *Store) CreateAPIKey(ctx context.Context, k APIKey, digest []byte) (*APIKey, error) {
	out, err := scanAPIKey(s.db.QueryRow(ctx, `INSERT INTO noetl.api_key (id, tenant, roles, name, secret_sha256, created_by, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING `+apiKeyColumns, k.ID, k.Tenant, k.Roles, k.Name, digest, k.CreatedBy, k.Expires))
	if err != nil {
		return nil, fmt.Errorf("create api key: %w", err)
	}
	return out, nil
}

// ListAPIKeys returns up to limit of a tenant's keys ordered by id, after the id after.
func (s *Store) ListAPIKeys(ctx context.Context, tenant, after string, limit int) ([]*APIKey, error) {
	rows, err := s.db.Query(ctx, `SELECT `+apiKeyColumns+` FROM noetl.api_key WHERE tenant = $1 AND id > $2 ORDER BY id LIMIT $3`, tenant, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*APIKey, error) { return scanAPIKey(r) })
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return out, nil
}

// RevokeAPIKey revokes a tenant's key, keeping the first revocation time, and returns it;
// ErrNotFound when the tenant has no such key.
func (s *Store) RevokeAPIKey(ctx context.Context, tenant, id string) (*APIKey, error) {
	k, err := scanAPIKey(s.db.QueryRow(ctx, `UPDATE noetl.api_key SET revoked_at = coalesce(revoked_at, now())
		WHERE tenant = $1 AND id = $2 RETURNING `+apiKeyColumns, tenant, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("revoke api key: %w", err)
	}
	return k, nil
}

// APIKeyByID returns a key of any tenant with the digest of its secret, for verifying a
// presented key; ErrNotFound when no key has the id.
func (s *Store) APIKeyByID(ctx context.Context, id string) (*APIKey, []byte, error) {
	var digest []byte
	k, err := scanAPIKey(s.db.QueryRow(ctx, `SELECT secret_sha256, `+apiKeyColumns+` FROM noetl.api_key WHERE id = $1`, id), &digest)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, ErrNotFound
	}
	if err != nil {
		return nil, nil, fmt.Errorf("verify api key: %w", err)
	}
	return k, digest, nil
}

// TouchAPIKey records a key's use now, unless it was recorded within every.
func (s *Store) TouchAPIKey(ctx context.Context, id string, every time.Duration) error {
	if _, err := s.db.Exec(ctx, `UPDATE noetl.api_key SET last_used_at = now()
		WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < now() - make_interval(secs => $2))`, id, every.Seconds()); err != nil {
		return fmt.Errorf("verify api key: %w", err)
	}
	return nil
}

// EnsureAPIKey stores a key created outside the API (a bootstrap key) unless its id is
// stored already. It reports whether it stored it, and returns the stored digest either
// way, for the caller to check that a key already stored has the same secret.
func (s *Store) EnsureAPIKey(ctx context.Context, k APIKey, digest []byte) (created bool, stored []byte, err error) {
	tag, err := s.db.Exec(ctx, `INSERT INTO noetl.api_key (id, tenant, roles, name, secret_sha256, created_by)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING`, k.ID, k.Tenant, k.Roles, k.Name, digest, k.CreatedBy)
	if err != nil {
		return false, nil, fmt.Errorf("bootstrap API key: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return true, digest, nil
	}
	if err := s.db.QueryRow(ctx, `SELECT secret_sha256 FROM noetl.api_key WHERE id = $1`, k.ID).Scan(&stored); err != nil {
		return false, nil, fmt.Errorf("bootstrap API key: %w", err)
	}
	return false, stored, nil
}
