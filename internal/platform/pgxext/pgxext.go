// Package pgxext opens pgx pools with NoETL's defaults and checks their health.
package pgxext

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/noetl/noetl/internal/schema"
)

// Open connects a pool to url, waits until Postgres answers (bounded by ctx), and applies
// the schema migrations when migrate is true.
//
// Its connections commit with synchronous_commit on (unless url sets the parameter), whatever
// the server's default: a commit that NoETL acts on (the materializer forwards a command,
// an event references a stored result) must survive a crash of Postgres, and with
// synchronous_commit off an immediate stop discards the last commits.
func Open(ctx context.Context, url string, maxConns int32, migrate bool, log *slog.Logger) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres url: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "noetl"
	if _, set := cfg.ConnConfig.RuntimeParams["synchronous_commit"]; !set {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres pool: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	backoff := 50 * time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = pool.Ping(pctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres not reachable: %w", err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			pool.Close()
			return nil, ctx.Err()
		case <-t.C:
		}
		backoff = min(backoff*2, time.Second)
	}
	if migrate {
		if err := schema.Migrate(ctx, pool, log); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return pool, nil
}

// Check is a readiness check that pings the pool.
func Check(pool *pgxpool.Pool) func(context.Context) error {
	return func(ctx context.Context) error { return pool.Ping(ctx) }
}
