// Package schema holds NoETL's Postgres schema as embedded goose migrations, the Postgres
// roles of the services that connect to it with the privileges each holds, and the check a
// service makes at start that the schema it needs is in place.
//
// Migrations run once per deployment step (the chart's migrate job, `noetl migrate`,
// `noetl dev`, the tests' meshes), never in the services: a service connects as its own
// role, which may neither create tables nor write another service's.
package schema

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

//go:embed migrations/*.sql
var migrations embed.FS

// VersionTable is the goose table that records the applied migrations. The services read
// it at start (Check).
const VersionTable = "noetl_goose_version"

// version is the newest migration embedded in this build.
var version = func() int64 {
	entries, err := migrations.ReadDir("migrations")
	if err != nil {
		panic(err)
	}
	var v int64
	for _, e := range entries {
		n, err := strconv.ParseInt(strings.SplitN(path.Base(e.Name()), "_", 2)[0], 10, 64)
		if err != nil {
			panic(fmt.Sprintf("schema: migration %s has no version prefix", e.Name()))
		}
		v = max(v, n)
	}
	return v
}()

// Version returns the newest migration embedded in this build: the schema version the
// services of this build need at least.
func Version() int64 { return version }

// Migrate applies every pending migration, then gives each service's group role exactly
// the privileges of Grants (creating the roles where they do not exist yet). pool must
// connect as a role that owns the noetl schema (or may create it) and may create roles.
// Concurrent callers on one database serialise on a Postgres advisory lock.
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
	if err := migrate(ctx, db, log); err != nil {
		return err
	}
	return grant(ctx, pool, log)
}

// lockID is the advisory lock key of schema migrations.
const lockID int64 = 0x6e6f65746c /* "noetl" */

func migrate(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return err
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, sub,
		goose.WithTableName(VersionTable),
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
