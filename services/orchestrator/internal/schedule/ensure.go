package schedule

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Spec is a schedule the platform itself keeps (a system playbook's): its timing, path and
// workload.
type Spec struct {
	// Tenant and Name identify it.
	Tenant, Name string
	// Interval is how often it fires.
	Interval time.Duration
	// Path is the playbook it starts (the latest version).
	Path string
	// Workload is merged over the playbook's.
	Workload map[string]any
	// CreatedBy is recorded when the schedule is created.
	CreatedBy string
}

// Ensure creates the schedule of spec, or brings an existing one to spec, in one
// statement: idempotent across restarts and replicas. An existing schedule keeps whether
// it is paused; its next fire time is recomputed only when its interval changed.
// changed reports whether anything was written.
func (s *Service) Ensure(ctx context.Context, spec Spec) (changed bool, err error) {
	if !nameRE.MatchString(spec.Name) {
		return false, fmt.Errorf("schedule name %q does not match [a-z0-9][a-z0-9_.-]{0,62}", spec.Name)
	}
	if spec.Interval < time.Second {
		return false, fmt.Errorf("schedule %s: interval %s is shorter than a second", spec.Name, spec.Interval)
	}
	workload := []byte("{}")
	if len(spec.Workload) > 0 {
		if workload, err = json.Marshal(spec.Workload); err != nil {
			return false, fmt.Errorf("schedule %s: workload: %w", spec.Name, err)
		}
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	iv := spec.Interval.Truncate(time.Millisecond)
	t, err := ParseTiming("", iv, "UTC", now)
	if err != nil {
		return false, fmt.Errorf("schedule %s: %w", spec.Name, err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return false, err
	}
	tag, err := s.DB.Exec(ctx, `INSERT INTO noetl.schedule AS s (tenant, name, id, cron, interval_ms, time_zone, path, version, workload, catch_up, max_catch_up, anchor_at, next_fire_at, created_by, created_at)
		VALUES ($1, $2, $3, '', $4, 'UTC', $5, 0, $6, 'skip', 10, $7, $8, $9, $7)
		ON CONFLICT (tenant, name) DO UPDATE SET
			cron = '', interval_ms = EXCLUDED.interval_ms, time_zone = 'UTC', path = EXCLUDED.path, version = 0, workload = EXCLUDED.workload,
			anchor_at = CASE WHEN s.interval_ms = EXCLUDED.interval_ms AND s.cron = '' THEN s.anchor_at ELSE EXCLUDED.anchor_at END,
			next_fire_at = CASE WHEN s.interval_ms = EXCLUDED.interval_ms AND s.cron = '' THEN s.next_fire_at ELSE EXCLUDED.next_fire_at END
		WHERE (s.cron, s.interval_ms, s.time_zone, s.path, s.version, s.workload) IS DISTINCT FROM ('', EXCLUDED.interval_ms, 'UTC', EXCLUDED.path, 0::bigint, EXCLUDED.workload)`,
		spec.Tenant, spec.Name, id, iv.Milliseconds(), spec.Path, workload, now, t.Next(now), spec.CreatedBy)
	if err != nil {
		return false, fmt.Errorf("schedule %s: %w", spec.Name, err)
	}
	return tag.RowsAffected() > 0, nil
}
