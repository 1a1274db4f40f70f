package writer

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/noetl/noetl/internal/sysop"
)

// Purge deletes, in one transaction, up to req.Limit terminal executions that ended more
// than their tenant's retention ago (Postgres's clock), oldest first, with their events
// and timers, through noetl.purge_executions: the one way out of the log, which only the
// materializer's role may call (migration 00015). The answer lists what was deleted, once
// committed.
func (w *Writer) Purge(ctx context.Context, req sysop.PurgeRequest) (*sysop.PurgeResponse, error) {
	minMS := sysop.MinRetention.Milliseconds()
	if req.RetentionMS < minMS {
		return nil, fmt.Errorf("purge: retention_ms %d is shorter than the minimum of %d (%s)", req.RetentionMS, minMS, sysop.MinRetention)
	}
	limit := req.Limit
	if limit <= 0 || limit > sysop.MaxPurge {
		limit = sysop.MaxPurge
	}
	var tenants []string
	var ages []int64
	for t, ms := range req.Tenants {
		if ms < minMS {
			return nil, fmt.Errorf("purge: the retention of tenant %q, %d ms, is shorter than the minimum of %s", t, ms, sysop.MinRetention)
		}
		tenants, ages = append(tenants, t), append(ages, ms)
	}
	exclude := req.Exclude
	if exclude == nil {
		exclude = []string{}
	}
	resp := &sysop.PurgeResponse{Executions: []sysop.Purged{}}
	err := pgx.BeginFunc(ctx, w.DB, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT x.execution_id FROM noetl.execution x
			LEFT JOIN unnest($2::text[], $3::bigint[]) AS r(tenant, ms) ON r.tenant = x.tenant
			WHERE x.status IN (2, 3, 4) AND x.ended_at IS NOT NULL
			  AND x.ended_at < now() - make_interval(secs => coalesce(r.ms, $1) / 1000.0)
			  AND ($4 = '' OR x.tenant = $4) AND NOT (x.tenant = ANY ($5::text[]))
			ORDER BY x.ended_at LIMIT $6`, req.RetentionMS, tenants, ages, req.Tenant, exclude, limit)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		resp.More = len(ids) == limit
		if len(ids) == 0 {
			return nil
		}
		rows, err = tx.Query(ctx, `SELECT tenant, execution_id, events FROM noetl.purge_executions($1)`, ids)
		if err != nil {
			return err
		}
		resp.Executions, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (sysop.Purged, error) {
			var g sysop.Purged
			return g, r.Scan(&g.Tenant, &g.ExecutionID, &g.Events)
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("purge: %w", err)
	}
	return resp, nil
}
