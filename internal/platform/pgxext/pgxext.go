// Package pgxext opens pgx pools with NoETL's defaults and checks their health.
package pgxext

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Open connects a pool to url and waits until Postgres answers (bounded by ctx and 30 s).
// A refusal that waiting cannot cure (a wrong password, a role or database that does not
// exist) is returned at once. Open applies no migrations: the deployment's migrate step
// does, once, and each service checks the schema it needs (package schema).
//
// Its connections commit with synchronous_commit on (unless url sets the parameter), whatever
// the server's default: a commit that NoETL acts on (the materializer forwards a command,
// an event references a stored result) must survive a crash of Postgres, and with
// synchronous_commit off an immediate stop discards the last commits. Half of maxConns stay
// connected from the start (unless url sets pool_min_conns). Its connections poll their
// reads when the process asked for it (SetPollReads). opts adjust the pool further
// (AfterConnect).
func Open(ctx context.Context, url string, maxConns int32, opts ...Option) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres url: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	// Half the pool is kept connected (made in the background once the pool opens): a
	// burst of calls on a pool that had grown to one or two connections waited for new ones
	// to be made, and a connection's start (a backend forked, SCRAM authentication) took
	// far longer than the queries it then served (50 concurrent starts spent 20-25 ms each
	// in a one-row catalog read; with the connections made, 3-13 ms). A URL's
	// pool_min_conns overrides it.
	if cfg.MinConns == 0 {
		cfg.MinConns = (cfg.MaxConns + 1) / 2
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "noetl"
	if _, set := cfg.ConnConfig.RuntimeParams["synchronous_commit"]; !set {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	}
	if n := pollReads.Load(); n > 0 { // pollread.go
		cfg.ConnConfig.DialFunc = pollingDial(cfg.ConnConfig.DialFunc, int(n))
	}
	for _, o := range opts {
		o(cfg)
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
		if refused(err) {
			pool.Close()
			return nil, fmt.Errorf("postgres refused the connection: %w", err)
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
	return pool, nil
}

// Option adjusts the configuration of a pool Open makes.
type Option func(*pgxpool.Config)

// AfterConnect runs fn on every connection the pool makes, before the pool hands it out
// (pgxpool.Config.AfterConnect), after what earlier options set there: work a connection
// needs once, such as preparing the statements a service sends on its hot path, is then
// done when the connection is made rather than on its first calls. An error from fn
// closes the connection and fails the acquire that made it.
func AfterConnect(fn func(context.Context, *pgx.Conn) error) Option {
	return func(cfg *pgxpool.Config) {
		prev := cfg.AfterConnect
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			if prev != nil {
				if err := prev(ctx, c); err != nil {
					return err
				}
			}
			return fn(ctx, c)
		}
	}
}

// WarmUp runs queries, one by one (the simple protocol), on every connection the pool
// makes before the pool hands it out: reads of the tables a service serves its calls
// from, by a key no row has. A backend's first read of a table loads the table's, its
// indexes' and their statistics' catalog entries into its caches, which the call that
// made the read otherwise pays once per connection: measured on the development machine,
// 4-5 ms for a backend's first table and about 0.6 ms for each one after, against 0.2 ms
// for the same read warm. Best-effort: a query that fails (a table not migrated yet) is
// skipped, its read is then paid on first use as before, and the connection is handed out
// all the same. Each query runs on its own, so one that fails leaves the others to run.
func WarmUp(queries ...string) Option {
	return AfterConnect(func(ctx context.Context, c *pgx.Conn) error {
		for _, q := range queries {
			_, _ = c.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol)
		}
		return nil
	})
}

// refused reports whether Postgres answered err for a connection it will keep refusing:
// authentication failed (class 28) or the database does not exist (3D000).
func refused(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return pe.Code == "3D000" || (len(pe.Code) == 5 && pe.Code[:2] == "28")
}

// Check is a readiness check that pings the pool.
func Check(pool *pgxpool.Pool) func(context.Context) error {
	return func(ctx context.Context) error { return pool.Ping(ctx) }
}
