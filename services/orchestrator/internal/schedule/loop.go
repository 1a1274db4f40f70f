package schedule

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/noetl/noetl/internal/failpoint"
)

// Tick is one recorded tick to start.
type Tick struct {
	// Tenant, Name and ID are the schedule's.
	Tenant, Name, ID string
	// Path and Version (zero: the latest) name the playbook.
	Path    string
	Version int64
	// Workload is the JSON object merged over the playbook's workload.
	Workload []byte
	// FireAt is the tick time.
	FireAt time.Time
	// Key is the start's idempotency key, Key(ID, FireAt).
	Key string
}

// Starter starts a tick's execution with its idempotency key and returns the execution's
// id once the start is committed. A start that fails with InvalidArgument, NotFound,
// PermissionDenied, FailedPrecondition or ResourceExhausted is refused for good and not
// retried; any other failure is retried on the next round.
type Starter func(ctx context.Context, t Tick) (executionID string, err error)

// Loop ticks the schedules of one database. Any number of loops (one per orchestrator
// replica) may run on it: each claims due schedules with FOR UPDATE SKIP LOCKED.
type Loop struct {
	// DB is the orchestrator's pool.
	DB *pgxpool.Pool
	// Start starts a tick's execution.
	Start Starter
	// Every is how often due schedules are looked for (zero: a second).
	Every time.Duration
	// Batch bounds the schedules and ticks one round handles (zero: 100).
	Batch int
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Log receives the failures of a round.
	Log *slog.Logger
}

func (l *Loop) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

func (l *Loop) batch() int {
	if l.Batch > 0 {
		return l.Batch
	}
	return 100
}

// Run runs rounds until ctx ends.
func (l *Loop) Run(ctx context.Context) error {
	every := l.Every
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := l.Round(ctx); err != nil && ctx.Err() == nil && l.Log != nil {
			l.Log.Warn("schedule round failed", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Round records the ticks of the due schedules, then starts every recorded tick whose
// start is not yet acknowledged (its own, and those of a replica that crashed in between).
func (l *Loop) Round(ctx context.Context) error {
	if err := l.Record(ctx); err != nil {
		return err
	}
	if err := failpoint.Eval(failpoint.OrchestratorAfterTick); err != nil {
		return err
	}
	return l.StartPending(ctx)
}

// Record claims the due schedules and, in one transaction, records their ticks under
// their catch-up policies and advances their next_fire_at.
func (l *Loop) Record(ctx context.Context) error {
	now := l.now()
	return pgx.BeginFunc(ctx, l.DB, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT tenant, `+columns+` FROM noetl.schedule WHERE NOT paused AND next_fire_at <= $1
			ORDER BY next_fire_at LIMIT $2 FOR UPDATE SKIP LOCKED`, now, l.batch())
		if err != nil {
			return err
		}
		var due []*row
		for rows.Next() {
			var tenant string
			x := &row{}
			if err := rows.Scan(&tenant, &x.Name, &x.ID, &x.Cron, &x.IntervalMS, &x.TimeZone, &x.Path, &x.Version, &x.Workload, &x.CatchUp, &x.MaxCatchUp, &x.Paused, &x.Anchor, &x.NextFire, &x.LastFire, &x.LastExecutionID, &x.CreatedBy, &x.Created); err != nil {
				rows.Close()
				return err
			}
			x.Tenant = tenant
			due = append(due, x)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, x := range due {
			t, err := x.timing()
			if err != nil {
				// Validated when stored; a row that no longer parses (a time zone gone from
				// the zone database) is paused rather than looked at every round.
				if l.Log != nil {
					l.Log.Error("schedule timing no longer parses: pausing it", slog.String("tenant", x.Tenant), slog.String("schedule", x.Name), slog.Any("error", err))
				}
				if _, err := tx.Exec(ctx, `UPDATE noetl.schedule SET paused = true WHERE id = $1`, x.ID); err != nil {
					return err
				}
				continue
			}
			fire, next := t.Due(x.NextFire, now, x.CatchUp, x.MaxCatchUp)
			for _, at := range fire {
				if _, err := tx.Exec(ctx, `INSERT INTO noetl.schedule_tick (schedule_id, fire_at) VALUES ($1, $2) ON CONFLICT DO NOTHING`, x.ID, at); err != nil {
					return err
				}
			}
			last := x.LastFire
			if len(fire) > 0 {
				last = &fire[len(fire)-1]
			}
			if _, err := tx.Exec(ctx, `UPDATE noetl.schedule SET next_fire_at = $2, last_fire_at = $3 WHERE id = $1`, x.ID, next, last); err != nil {
				return err
			}
		}
		return nil
	})
}

// StartPending starts the recorded ticks not yet acknowledged, oldest first, each with its
// idempotency key, and records each acknowledgement. The ticks are locked while they
// start, so two loops do not both start one (and the key makes even that harmless).
func (l *Loop) StartPending(ctx context.Context) error {
	return pgx.BeginFunc(ctx, l.DB, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT s.tenant, s.name, s.id, s.path, s.version, s.workload, t.fire_at
			FROM noetl.schedule_tick t JOIN noetl.schedule s ON s.id = t.schedule_id
			WHERE t.started_at IS NULL ORDER BY t.fire_at LIMIT $1 FOR UPDATE OF t SKIP LOCKED`, l.batch())
		if err != nil {
			return err
		}
		var ticks []Tick
		for rows.Next() {
			var t Tick
			if err := rows.Scan(&t.Tenant, &t.Name, &t.ID, &t.Path, &t.Version, &t.Workload, &t.FireAt); err != nil {
				rows.Close()
				return err
			}
			t.Key = Key(t.ID, t.FireAt)
			ticks = append(ticks, t)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, t := range ticks {
			id, err := l.Start(ctx, t)
			if err != nil {
				if !permanent(err) {
					if l.Log != nil {
						l.Log.Warn("schedule tick start failed; retrying", slog.String("tenant", t.Tenant), slog.String("schedule", t.Name), slog.Time("fire_at", t.FireAt), slog.Any("error", err))
					}
					continue
				}
				if l.Log != nil {
					l.Log.Error("schedule tick refused", slog.String("tenant", t.Tenant), slog.String("schedule", t.Name), slog.Time("fire_at", t.FireAt), slog.Any("error", err))
				}
				if _, err := tx.Exec(ctx, `UPDATE noetl.schedule_tick SET started_at = now(), error = $3 WHERE schedule_id = $1 AND fire_at = $2`, t.ID, t.FireAt, status.Convert(err).Message()); err != nil {
					return err
				}
				continue
			}
			if _, err := tx.Exec(ctx, `UPDATE noetl.schedule_tick SET started_at = now(), execution_id = $3 WHERE schedule_id = $1 AND fire_at = $2`, t.ID, t.FireAt, id); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE noetl.schedule SET last_execution_id = $2 WHERE id = $1 AND last_fire_at <= $3`, t.ID, id, t.FireAt); err != nil {
				return err
			}
		}
		return nil
	})
}

func permanent(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.FailedPrecondition, codes.ResourceExhausted:
		return true
	}
	return false
}
