// Package keystore is the orchestrator's store of secrets at rest: credentials
// (noetl.credential, their data sealed by the caller) and API keys (noetl.api_key, their
// secrets kept only as SHA-256 digests).
//
// It holds the SQL and nothing else: validation, sealing and the rules of who may do what
// are the server's. Every read and write is scoped by tenant except the lookups by key id,
// whose ids are global. Not-found is ErrNotFound, for the caller to answer in its own words.
package keystore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotFound is returned for a credential or key that is not stored (or not the tenant's).
var ErrNotFound = errors.New("not found")

// Store reads and writes credentials and API keys.
type Store struct {
	db *pgxpool.Pool
}

// New returns a Store on db.
func New(db *pgxpool.Pool) *Store { return &Store{db: db} }

// Credential is a stored credential without its data.
type Credential struct {
	Name, Type string
	Updated    time.Time
}

// PutCredential stores a sealed credential, replacing one of the same name (and any
// plaintext it had), and returns its update time.
func (s *Store) PutCredential(ctx context.Context, tenant, name, typ string, sealed []byte) (time.Time, error) {
	var updated time.Time
	err := s.db.QueryRow(ctx, `INSERT INTO noetl.credential (tenant, name, type, ciphertext, data) VALUES ($1, $2, $3, $4, NULL)
		ON CONFLICT (tenant, name) DO UPDATE SET type = EXCLUDED.type, ciphertext = EXCLUDED.ciphertext, data = NULL, updated_at = now()
		RETURNING updated_at`, tenant, name, typ, sealed).Scan(&updated)
	if err != nil {
		return time.Time{}, fmt.Errorf("store credential: %w", err)
	}
	return updated, nil
}

// SealedCredential returns a credential's type and sealed data (nil when it is still
// stored in plaintext, from before encryption at rest).
func (s *Store) SealedCredential(ctx context.Context, tenant, name string) (typ string, sealed []byte, err error) {
	err = s.db.QueryRow(ctx, `SELECT type, ciphertext FROM noetl.credential WHERE tenant = $1 AND name = $2`, tenant, name).Scan(&typ, &sealed)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, ErrNotFound
	}
	if err != nil {
		return "", nil, fmt.Errorf("read credential: %w", err)
	}
	return typ, sealed, nil
}

// ListCredentials returns up to limit of a tenant's credentials ordered by name, after the
// name after.
func (s *Store) ListCredentials(ctx context.Context, tenant, after string, limit int) ([]Credential, error) {
	rows, err := s.db.Query(ctx, `SELECT name, type, updated_at FROM noetl.credential
		WHERE tenant = $1 AND name > $2 ORDER BY name LIMIT $3`, tenant, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list credentials: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Credential, error) {
		var c Credential
		err := r.Scan(&c.Name, &c.Type, &c.Updated)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("list credentials: %w", err)
	}
	return out, nil
}

// DeleteCredential deletes a credential; ErrNotFound when there was none.
func (s *Store) DeleteCredential(ctx context.Context, tenant, name string) error {
	tag, err := s.db.Exec(ctx, `DELETE FROM noetl.credential WHERE tenant = $1 AND name = $2`, tenant, name)
	if err != nil {
		return fmt.Errorf("delete credential: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// SealPlaintext seals up to limit credentials still stored in plaintext with seal, in one
// transaction, and clears their plaintext. It returns how many it sealed. Replicas running
// it at once skip each other's locked rows.
func (s *Store) SealPlaintext(ctx context.Context, limit int, seal func(tenant, name string, data []byte) ([]byte, error)) (int, error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("seal credentials: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, `SELECT tenant, name, data::text FROM noetl.credential
		WHERE ciphertext IS NULL ORDER BY tenant, name LIMIT $1 FOR UPDATE SKIP LOCKED`, limit)
	if err != nil {
		return 0, fmt.Errorf("seal credentials: %w", err)
	}
	type row struct {
		tenant, name string
		data         []byte
	}
	batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.tenant, &x.name, &x.data)
		return x, err
	})
	if err != nil {
		return 0, fmt.Errorf("seal credentials: %w", err)
	}
	for _, r := range batch {
		sealed, err := seal(r.tenant, r.name, r.data)
		if err != nil {
			return 0, err
		}
		if _, err := tx.Exec(ctx, `UPDATE noetl.credential SET ciphertext = $3, data = NULL WHERE tenant = $1 AND name = $2`, r.tenant, r.name, sealed); err != nil {
			return 0, fmt.Errorf("seal credentials: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("seal credentials: %w", err)
	}
	return len(batch), nil
}

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
