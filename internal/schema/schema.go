// Package schema holds NoETL's Postgres schema as embedded goose migrations.
package schema

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrate applies every pending migration. Concurrent callers (several services starting at
// once) serialise on a Postgres advisory lock, so it is safe to call from every service
// that owns tables.
func Migrate(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	// Hold a session advisory lock on a dedicated connection for the whole run: waiters
	// block in Postgres (no polling) and proceed as soon as the holder finishes.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migration lock: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockID); err != nil {
		return fmt.Errorf("migration lock: %w", err)
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, lockID) }()
	db := stdlib.OpenDBFromPool(pool)
	defer func() { _ = db.Close() }()
	return migrate(ctx, db, log)
}

// lockID is the advisory lock key of schema migrations.
const lockID int64 = 0x6e6f65746c /* "noetl" */

func migrate(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return err
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, sub,
		goose.WithTableName("noetl_goose_version"),
	)
	if err != nil {
		return fmt.Errorf("migration provider: %w", err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	for _, r := range results {
		if log != nil {
			log.Info("migration applied", slog.Int64("version", r.Source.Version), slog.Duration("took", r.Duration))
		}
	}
	return nil
}
