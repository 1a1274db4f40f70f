package store

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/platform/auth"
)

// Bounds of the system calls.
const (
	maxPurgeIDs         = 1000
	defaultOrphanLimit  = 10000
	defaultQueryRows    = 1000
	maxQueryRows        = 10000
	defaultQueryTimeout = 5 * time.Second
	maxQueryTimeout     = time.Minute
	maxQuerySQL         = 64 << 10
)

// purged reports whether an execution is gone from noetl.execution (retention deleted it).
func (s *Store) purged(ctx context.Context, id string) (bool, error) {
	var exists bool
	if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM noetl.execution WHERE execution_id = $1)`, id).Scan(&exists); err != nil {
		return false, err
	}
	return !exists, nil
}

// PurgeSnapshots implements StateService: the snapshots of purged executions go with
// them, through their owner.
func (s *Store) PurgeSnapshots(ctx context.Context, req *sbv1.PurgeSnapshotsRequest) (*sbv1.PurgeSnapshotsResponse, error) {
	if err := auth.RequireService(ctx); err != nil {
		return nil, err
	}
	if len(req.GetExecutionIds()) > maxPurgeIDs {
		return nil, status.Errorf(codes.InvalidArgument, "execution_ids: %d exceeds the limit of %d", len(req.GetExecutionIds()), maxPurgeIDs)
	}
	resp := &sbv1.PurgeSnapshotsResponse{}
	if ids := req.GetExecutionIds(); len(ids) > 0 {
		tag, err := s.db.Exec(ctx, `DELETE FROM noetl.state_snapshot s WHERE s.execution_id = ANY ($1)
			AND NOT EXISTS (SELECT 1 FROM noetl.execution x WHERE x.execution_id = s.execution_id)`, ids)
		if err != nil {
			return nil, err
		}
		resp.Deleted = tag.RowsAffected()
		for _, id := range ids {
			s.drop(id)
		}
	}
	if req.GetOrphans() {
		limit := int(req.GetOrphanLimit())
		if limit <= 0 {
			limit = defaultOrphanLimit
		}
		rows, err := s.db.Query(ctx, `DELETE FROM noetl.state_snapshot WHERE execution_id IN (
				SELECT s.execution_id FROM noetl.state_snapshot s
				WHERE NOT EXISTS (SELECT 1 FROM noetl.execution x WHERE x.execution_id = s.execution_id) LIMIT $1)
			RETURNING execution_id`, limit)
		if err != nil {
			return nil, err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			s.drop(id)
		}
		resp.Orphans = int64(len(ids))
	}
	return resp, nil
}

// QueryReadOnly implements StateService: one statement in a READ ONLY transaction with a
// statement timeout, search_path noetl, and at most max_rows rows, as the statebuilder's
// role, which may only read the log, the executions, the timers and the snapshots.
func (s *Store) QueryReadOnly(ctx context.Context, req *sbv1.QueryReadOnlyRequest) (*sbv1.QueryReadOnlyResponse, error) {
	if err := auth.RequireService(ctx); err != nil {
		return nil, err
	}
	sql := strings.TrimSpace(req.GetSql())
	switch {
	case sql == "":
		return nil, status.Error(codes.InvalidArgument, "sql: required")
	case len(sql) > maxQuerySQL:
		return nil, status.Errorf(codes.InvalidArgument, "sql: %d bytes exceeds the limit of %d", len(sql), maxQuerySQL)
	}
	var params []any
	if b := req.GetParamsJson(); len(b) > 0 {
		if err := json.Unmarshal(b, &params); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "params: not a JSON array: %v", err)
		}
	}
	maxRows := int(req.GetMaxRows())
	switch {
	case maxRows == 0:
		maxRows = defaultQueryRows
	case maxRows < 0 || maxRows > maxQueryRows:
		return nil, status.Errorf(codes.InvalidArgument, "max_rows: must be between 1 and %d", maxQueryRows)
	}
	timeout := time.Duration(req.GetTimeoutMs()) * time.Millisecond
	switch {
	case timeout == 0:
		timeout = defaultQueryTimeout
	case timeout < 0 || timeout > maxQueryTimeout:
		return nil, status.Errorf(codes.InvalidArgument, "timeout_ms: must be between 1 and %d", maxQueryTimeout.Milliseconds())
	}
	resp := &sbv1.QueryReadOnlyResponse{}
	err := pgx.BeginTxFunc(ctx, s.db, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('statement_timeout', $1, true), set_config('search_path', 'noetl', true)`, strconv.FormatInt(timeout.Milliseconds(), 10)); err != nil {
			return err
		}
		// Extended protocol, not cached: one statement only, parameters bound, never
		// interpolated.
		rows, err := tx.Query(ctx, sql, append([]any{pgx.QueryExecModeDescribeExec}, params...)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for _, f := range rows.FieldDescriptions() {
			resp.Columns = append(resp.Columns, f.Name)
		}
		out := [][]any{}
		for rows.Next() {
			if len(out) == maxRows {
				resp.Truncated = true
				break
			}
			vals, err := rows.Values()
			if err != nil {
				return err
			}
			out = append(out, vals)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		resp.RowsJson, err = json.Marshal(out)
		return err
	})
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return nil, status.Errorf(codes.InvalidArgument, "sql: %s (SQLSTATE %s)", pe.Message, pe.Code)
		}
		return nil, err
	}
	return resp, nil
}
