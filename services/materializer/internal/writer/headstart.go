package writer

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A one-round-trip commit's head start.
//
// A one-round-trip commit (fast.go) waits for the decision its batch causes before it sends
// anything, though most of its transaction does not depend on the decision: the BEGIN, the
// guards and the insert of the batch's own events. With a decision to wait for, the writer
// sends those first, in pipeline mode and without a synchronisation point, so Postgres runs
// them while the decision is taken; then it sends the rest (the decision's events, the
// projections, the cursor, the COMMIT) and the Sync, and reads every result. On a chain
// step the decision (about 50 us) then overlaps Postgres's work on the head instead of
// preceding it: chain 200, 8 interleaved runs, 0.550 ms a step against 0.597.
//
// What holds: it is the same transaction, the same statements in the same order, on the
// same connection, so a guard that fails or a key already logged aborts it before the
// COMMIT as before (errMoved), and a crash between the two parts leaves an open
// transaction that Postgres rolls back with the connection. It is used only when there is
// a decision to overlap, for a batch of one execution (a latency-bound one: a batch of
// several means the writer is behind, where the second insert statement and the backend's
// second wake-up cost throughput), when the batch's own rows are too few to copy, and
// never under failpoints (whose split commit is a statement of its own). Should the
// decision add rows enough to copy, the head is synchronised first and the rest goes the
// usual way, inside the still open transaction.

// headStart is a one-round-trip commit's first part, sent and running.
type headStart struct {
	conn  *pgx.Conn
	descs map[string]*pgconn.StatementDescription // of headStatements, by SQL
	p     *pgconn.Pipeline
	args  pgx.ExtendedQueryBuilder
	done  bool
}

// headStatements are the statements a head start may send, prepared on the connection
// before its pipeline starts (a pipeline cannot prepare and wait for the description).
var headStatements = append([]string{sqlExpectHeads, sqlExpectNoRivals, sqlExpectHead, sqlExpectNoRival, sqlInsert, sqlProject, sqlProjectOne,
	sqlTimerScheduled, sqlTimerFired, sqlTimerRetired, sqlCursor}, sqlInsertValues[1:]...)

// startHead prepares the connection's statements (once per connection), starts a pipeline
// and sends the BEGIN and the queries of b (the guards and the insert of the batch's own
// events), flushed without a synchronisation point.
func startHead(ctx context.Context, conn *pgxpool.Conn, b *pgx.Batch) (*headStart, error) {
	c := conn.Conn()
	descs := make(map[string]*pgconn.StatementDescription, len(headStatements))
	for _, sql := range headStatements {
		sd, err := c.Prepare(ctx, sql, sql) // a map lookup once prepared
		if err != nil {
			return nil, fmt.Errorf("append events: prepare: %w", err)
		}
		descs[sql] = sd
	}
	holdWire(c, wireSize(b)) // buffers.go
	h := &headStart{conn: c, descs: descs, p: c.PgConn().StartPipeline(ctx)}
	h.p.SendQueryParams("BEGIN", nil, nil, nil, nil)
	if err := h.send(b); err != nil {
		_ = h.close()
		return nil, err
	}
	if err := h.p.Flush(); err != nil {
		_ = h.close()
		return nil, fmt.Errorf("append events: %w", err)
	}
	return h, nil
}

// send queues the queries of b on the pipeline (COMMIT as a plain query, the rest as the
// statements startHead prepared, their arguments encoded as pgx encodes a batch's).
func (h *headStart) send(b *pgx.Batch) error {
	for _, q := range b.QueuedQueries {
		if q.SQL == "COMMIT" {
			h.p.SendQueryParams(q.SQL, nil, nil, nil, nil)
			continue
		}
		desc, err := h.describe(q.SQL)
		if err != nil {
			return err
		}
		if err := h.args.Build(h.conn.TypeMap(), desc, q.Arguments); err != nil {
			return fmt.Errorf("append events: %w", err)
		}
		// SendQueryStatement copies the values into the connection's buffer: the builder
		// is free for the next query.
		h.p.SendQueryStatement(desc, h.args.ParamValues, h.args.ParamFormats, h.args.ResultFormats)
	}
	return nil
}

// describe is the description of a statement startHead prepared.
func (h *headStart) describe(sql string) (*pgconn.StatementDescription, error) {
	if sd, ok := h.descs[sql]; ok {
		return sd, nil
	}
	return nil, fmt.Errorf("append events: statement not prepared for the head start: %.40s", sql)
}

// sync ends the pipeline after the queries of rest (nil: none): it sends them and a Sync and
// reads every result, returning the first error. The transaction stays open unless rest
// commits it, and the connection is back in normal mode.
func (h *headStart) sync(rest *pgx.Batch) error {
	if rest != nil {
		holdWire(h.conn, wireSize(rest))
		if err := h.send(rest); err != nil {
			_ = h.close()
			return err
		}
	}
	if err := h.p.Sync(); err != nil {
		_ = h.close()
		return err
	}
	for {
		r, err := h.p.GetResults()
		if err == nil {
			if rr, ok := r.(*pgconn.ResultReader); ok {
				_, err = rr.Close()
			} else {
				return h.close() // the Sync (or, past it, nothing)
			}
		}
		if err != nil {
			// The server skipped the rest until the Sync, which Close reads past.
			if cerr := h.close(); cerr != nil && !isPgError(cerr) {
				return errors.Join(err, cerr)
			}
			return err
		}
	}
}

// close ends the pipeline once. With requests not synchronised it closes the connection,
// which the pool then drops (its open transaction rolled back by Postgres).
func (h *headStart) close() error {
	if h.done {
		return nil
	}
	h.done = true
	return h.p.Close()
}

// isPgError reports whether err is an error Postgres answered (not the connection's).
func isPgError(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg)
}

// ownRows is the number of the batch's own events (its first n) that commit.
func ownRows(outcomes []Outcome, distinct []int, n int) int {
	rows := 0
	for _, i := range distinct {
		if i < n && outcomes[i] == Committed {
			rows++
		}
	}
	return rows
}

// HeadStarts reports how many one-round-trip commits sent their head before their
// decision was at hand.
func (w *Writer) HeadStarts() uint64 { return w.headStarts.Load() }
