package credentials

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store holds the SQL of noetl.credential: credentials, their data sealed by the caller
// (Service seals it; a row written before encryption at rest may still hold plaintext until
// SealPlaintext has run). Every read and write is scoped by tenant. Not-found is
// ErrNotFound.
type Store struct {
	db *pgxpool.Pool
}

// NewStore returns a Store on db.
func NewStore(db *pgxpool.Pool) *Store { return &Store{db: db} }

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
