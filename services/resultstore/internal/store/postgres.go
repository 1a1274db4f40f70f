package store

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
)

// Backend is where result payloads and their references live. Store adds everything that
// does not depend on the medium: validation, digests (computed on write, verified on
// read), retention, metrics and the APIs. Postgres implements it; an object-store tier
// can implement it later (payload as an object, reference as a row).
type Backend interface {
	// Create starts storing the payload of h's result, replacing any earlier result of the
	// same tenant and id once committed.
	Create(ctx context.Context, h *rsv1.PutResultHeader) (BlobWriter, error)
	// Describe returns the reference of a live (unexpired) result of tenant, with its URI
	// unset, and the execution that produced it; NotFound when there is none.
	Describe(ctx context.Context, tenant, id string) (ref *eventv1.ResultRef, executionID string, err error)
	// Latest returns the id of the newest live result of a step of an execution.
	Latest(ctx context.Context, tenant, executionID, step string) (string, error)
	// List returns the ids of an execution's live results, oldest first, at most limit.
	List(ctx context.Context, tenant, executionID string, limit int) ([]string, error)
	// Open returns the payload of a result as a sequence of chunks.
	Open(ctx context.Context, tenant, id string) ChunkReader
	// Sweep deletes up to limit expired results and returns how many.
	Sweep(ctx context.Context, limit int) (int64, error)
	// Purge deletes every result of tenant's executions ids with their chunks and returns
	// how many of each.
	Purge(ctx context.Context, tenant string, ids []string) (results, chunks int64, err error)
	// SweepOrphanChunks deletes up to limit chunks whose result is gone and returns how many.
	SweepOrphanChunks(ctx context.Context, limit int) (int64, error)
}

// BlobWriter receives a payload; nothing is visible until Commit, and Abort (safe after
// Commit) drops an unfinished upload.
type BlobWriter interface {
	io.Writer
	// Commit records the result with its size, digest, row count, schema and expiry.
	Commit(size int64, sha256 string, rowCount int64, schemaJSON string, expires *time.Time) error
	// Abort drops what was written.
	Abort()
}

// ChunkReader returns a payload chunk by chunk; io.EOF after the last.
type ChunkReader interface {
	Next() ([]byte, error)
}

// Postgres keeps results in noetl.result (references) and noetl.result_chunk (payloads in
// chunks of ChunkSize bytea rows).
type Postgres struct {
	DB *pgxpool.Pool
}

// live is the SQL condition of a result that has not expired.
const live = `(expires_at IS NULL OR expires_at > now())`

// pgWriter stores one payload inside one transaction, flushing a chunk as it fills.
type pgWriter struct {
	ctx context.Context
	tx  pgx.Tx
	h   *rsv1.PutResultHeader
	buf []byte
	idx int
}

// Create implements Backend.
func (p *Postgres) Create(ctx context.Context, h *rsv1.PutResultHeader) (BlobWriter, error) {
	tx, err := p.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM noetl.result_chunk WHERE tenant=$1 AND result_id=$2`, h.GetTenant(), h.GetResultId()); err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return &pgWriter{ctx: ctx, tx: tx, h: h, buf: make([]byte, 0, ChunkSize)}, nil
}

// Write implements io.Writer.
func (w *pgWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(ChunkSize-len(w.buf), len(p))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == ChunkSize {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *pgWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	if _, err := w.tx.Exec(w.ctx, `INSERT INTO noetl.result_chunk (tenant, result_id, idx, data) VALUES ($1,$2,$3,$4)`, w.h.GetTenant(), w.h.GetResultId(), w.idx, w.buf); err != nil {
		return err
	}
	w.idx++
	w.buf = w.buf[:0]
	return nil
}

// Commit implements BlobWriter.
func (w *pgWriter) Commit(size int64, sum string, rowCount int64, schemaJSON string, expires *time.Time) error {
	if err := w.flush(); err != nil {
		return err
	}
	h := w.h
	_, err := w.tx.Exec(w.ctx, `INSERT INTO noetl.result (tenant, result_id, execution_id, step, content_type, size, sha256, row_count, extracted, schema_json, expires_at)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)
		ON CONFLICT (tenant, result_id) DO UPDATE SET content_type=EXCLUDED.content_type, size=EXCLUDED.size, sha256=EXCLUDED.sha256,
			row_count=EXCLUDED.row_count, extracted=EXCLUDED.extracted, schema_json=EXCLUDED.schema_json, created_at=now(), expires_at=EXCLUDED.expires_at`,
		h.GetTenant(), h.GetResultId(), h.GetExecutionId(), h.GetStep(), h.GetContentType(), size, sum, rowCount, h.GetExtractedJson(), schemaJSON, expires)
	if err != nil {
		return err
	}
	return w.tx.Commit(w.ctx)
}

// Abort implements BlobWriter.
func (w *pgWriter) Abort() { _ = w.tx.Rollback(w.ctx) }

// Describe implements Backend.
func (p *Postgres) Describe(ctx context.Context, tenant, id string) (*eventv1.ResultRef, string, error) {
	ref := &eventv1.ResultRef{}
	var execID string
	err := p.DB.QueryRow(ctx, `SELECT execution_id, content_type, size, sha256, row_count, extracted, schema_json FROM noetl.result WHERE tenant=$1 AND result_id=$2 AND `+live, tenant, id).
		Scan(&execID, &ref.ContentType, &ref.Size, &ref.Sha256, &ref.RowCount, &ref.ExtractedJson, &ref.SchemaJson)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", status.Errorf(codes.NotFound, "result %s not found", id)
	}
	if err != nil {
		return nil, "", err
	}
	return ref, execID, nil
}

// Latest implements Backend.
func (p *Postgres) Latest(ctx context.Context, tenant, executionID, step string) (string, error) {
	var id string
	err := p.DB.QueryRow(ctx, `SELECT result_id FROM noetl.result WHERE tenant=$1 AND execution_id=$2 AND step=$3 AND `+live+` ORDER BY created_at DESC LIMIT 1`,
		tenant, executionID, step).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", status.Errorf(codes.NotFound, "no stored result for step %s of execution %s", step, executionID)
	}
	return id, err
}

// List implements Backend.
func (p *Postgres) List(ctx context.Context, tenant, executionID string, limit int) ([]string, error) {
	rows, err := p.DB.Query(ctx, `SELECT result_id FROM noetl.result WHERE tenant=$1 AND execution_id=$2 AND `+live+` ORDER BY created_at, result_id LIMIT $3`, tenant, executionID, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// pgReader reads a payload's chunks in order.
type pgReader struct {
	p          *Postgres
	ctx        context.Context
	tenant, id string
	idx        int
}

// Open implements Backend.
func (p *Postgres) Open(ctx context.Context, tenant, id string) ChunkReader {
	return &pgReader{p: p, ctx: ctx, tenant: tenant, id: id}
}

// Next implements ChunkReader.
func (r *pgReader) Next() ([]byte, error) {
	var data []byte
	err := r.p.DB.QueryRow(r.ctx, `SELECT data FROM noetl.result_chunk WHERE tenant=$1 AND result_id=$2 AND idx=$3`, r.tenant, r.id, r.idx).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, io.EOF
	}
	if err != nil {
		return nil, err
	}
	r.idx++
	return data, nil
}

// Sweep implements Backend.
func (p *Postgres) Sweep(ctx context.Context, limit int) (int64, error) {
	tag, err := p.DB.Exec(ctx, `WITH gone AS (
			DELETE FROM noetl.result WHERE (tenant, result_id) IN (
				SELECT tenant, result_id FROM noetl.result WHERE expires_at <= now() ORDER BY expires_at LIMIT $1)
			RETURNING tenant, result_id),
		chunks AS (DELETE FROM noetl.result_chunk c USING gone WHERE c.tenant = gone.tenant AND c.result_id = gone.result_id)
		SELECT 1 FROM gone`, limit)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// Purge implements Backend.
func (p *Postgres) Purge(ctx context.Context, tenant string, ids []string) (results, chunks int64, err error) {
	err = p.DB.QueryRow(ctx, `WITH gone AS (
			DELETE FROM noetl.result WHERE tenant = $1 AND execution_id = ANY ($2) RETURNING tenant, result_id),
		chunks AS (DELETE FROM noetl.result_chunk c USING gone WHERE c.tenant = gone.tenant AND c.result_id = gone.result_id RETURNING 1)
		SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM chunks)`, tenant, ids).Scan(&results, &chunks)
	return results, chunks, err
}

// SweepOrphanChunks implements Backend. An upload writes its chunks before its result row
// in one transaction, so a committed chunk without a row is left by nothing in progress.
func (p *Postgres) SweepOrphanChunks(ctx context.Context, limit int) (int64, error) {
	tag, err := p.DB.Exec(ctx, `DELETE FROM noetl.result_chunk WHERE (tenant, result_id, idx) IN (
			SELECT c.tenant, c.result_id, c.idx FROM noetl.result_chunk c
			WHERE NOT EXISTS (SELECT 1 FROM noetl.result r WHERE r.tenant = c.tenant AND r.result_id = c.result_id)
			LIMIT $1)`, limit)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}
