package writer

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
)

// Commits in one round trip.
//
// A commit's first round trip locks the batch's executions and reads what the log holds
// of them: each one's last seq and status, and which of the batch's events (and of their
// rival outcomes) are logged already. For an execution whose last commit was this
// writer's, its head (inline.go) already says what the lock would find, and a batch of
// new events finds nothing logged. The writer then skips that round trip: it classifies
// the batch on the heads, takes the decisions the batch causes (asked before, on the same
// heads), and sends the whole transaction at once, its first statements guards that abort
// it unless the prediction holds:
//
//   - sqlExpectHeads locks the executions, in id order as the first round trip does, and
//     aborts unless each one's last seq and tenant are the heads' (seqs only grow and
//     status changes only with an event, so the same last seq is the same head);
//   - sqlExpectNoRivals, a statement of its own so its snapshot follows the lock, aborts
//     if the rival outcome of one of the batch's outcomes is logged;
//   - an event of the batch already logged aborts the insert on the log's unique key.
//
// What holds:
//   - A mispredicted batch writes nothing: the guards abort the transaction before it
//     commits, and Commit commits the batch again the two-round-trip way, on the log as it
//     stands (errMoved). The heads of its executions are forgotten.
//   - Everything else is the two-round-trip commit's: the same classification, the same
//     writes, the same decisions inside the commit, the same notices, and the commands
//     forwarded only after the commit.
//   - Only batches that the heads describe whole go this way: none that starts an
//     execution, none with an execution this writer has no head for or another tenant's
//     event, and only on a connection whose session has the writer's settings.
//
// A chain step commits in one round trip this way. It pays when the decision is at hand
// as soon as the batch is (an orchestrator in the same process, decisionlink): asked over
// the network, the decision takes about as long as the round trip it saves.

// errMoved is returned by a one-round-trip commit whose prediction did not hold; nothing
// of the batch was written.
var errMoved = errors.New("writer: the log moved past the heads")

// codeMoved is the SQLSTATE noetl.writer_expect raises; codeUniqueViolation Postgres's
// for a key already present (an event of the batch logged already).
const (
	codeMoved           = "NX001"
	codeUniqueViolation = "23505"
)

const (
	sqlExpectHeads = `SELECT noetl.writer_expect(count(*) = $4) FROM (SELECT x.execution_id FROM noetl.execution x
		JOIN unnest($1::text[], $2::bigint[], $3::text[]) AS h(ex, seq, tn) ON x.execution_id = h.ex
		WHERE x.last_seq = h.seq AND x.tenant = h.tn ORDER BY x.execution_id FOR UPDATE OF x) AS l`
	sqlExpectNoRivals = `SELECT noetl.writer_expect(NOT EXISTS (SELECT 1 FROM unnest($1::text[], $2::text[]) AS r(ex, ev)
		CROSS JOIN LATERAL (SELECT 1 FROM noetl.event e WHERE e.execution_id = r.ex AND e.event_id = r.ev LIMIT 1) AS hit))`
	// sqlExpectHead and sqlExpectNoRival are the guards of a batch of one execution, and
	// of one outcome, keyed by scalars (see keyed.go).
	sqlExpectHead = `SELECT noetl.writer_expect(count(*) = 1) FROM (SELECT x.execution_id FROM noetl.execution x
		WHERE x.execution_id = $1::text AND x.last_seq = $2::bigint AND x.tenant = $3::text FOR UPDATE OF x) AS l`
	sqlExpectNoRival = `SELECT noetl.writer_expect(NOT EXISTS (SELECT 1 FROM noetl.event e WHERE e.execution_id = $1::text AND e.event_id = $2::text))`
)

// predict fills state from the writer's heads and reports whether the batch may commit in
// one round trip.
func (w *Writer) predict(conn *pgxpool.Conn, evs []*eventv1.Event, distinct []int, execs []string, state map[string]*execState) bool {
	if !settled(conn) {
		return false
	}
	w.headsMu.Lock()
	defer w.headsMu.Unlock()
	for _, id := range execs {
		if _, ok := w.heads[id]; !ok {
			return false
		}
	}
	for _, i := range distinct {
		ev := evs[i]
		if ev.GetType() == domain.EventPlaybookStarted || ev.GetTenant() != w.heads[ev.GetExecutionId()].tenant {
			return false
		}
	}
	for _, id := range execs {
		h := w.heads[id]
		state[id] = &execState{known: true, tenant: h.tenant, lastSeq: h.seq, lastID: h.id, status: h.status}
	}
	w.fastTaken.Add(1)
	return true
}

// queueGuards queues the guards of a one-round-trip commit (after its BEGIN).
func (w *Writer) queueGuards(b *pgx.Batch, evs []*eventv1.Event, distinct []int, execs []string, state map[string]*execState) {
	seqs, tenants := make([]int64, len(execs)), make([]string, len(execs))
	for k, id := range execs {
		seqs[k], tenants[k] = state[id].lastSeq, state[id].tenant
	}
	if len(execs) == 1 {
		b.Queue(sqlExpectHead, execs[0], seqs[0], tenants[0])
	} else {
		b.Queue(sqlExpectHeads, execs, seqs, tenants, len(execs))
	}
	var rivalExec, rivalID []string
	for _, i := range distinct {
		if r := domain.OutcomeRival(evs[i]); r != "" {
			rivalExec, rivalID = append(rivalExec, evs[i].GetExecutionId()), append(rivalID, r)
		}
	}
	switch len(rivalExec) {
	case 0:
	case 1:
		b.Queue(sqlExpectNoRival, rivalExec[0], rivalID[0])
	default:
		b.Queue(sqlExpectNoRivals, textArray(rivalExec), textArray(rivalID))
	}
}

// moved maps the error of a one-round-trip commit's statements: errMoved when a guard or
// the log's unique keys refused the prediction (the heads of execs are then forgotten),
// else the error.
func (w *Writer) moved(err error, execs []string) error {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != codeMoved && pg.Code != codeUniqueViolation {
		return fmt.Errorf("append events: %w", err)
	}
	w.headsMu.Lock()
	defer w.headsMu.Unlock()
	for _, id := range execs {
		delete(w.heads, id)
	}
	return errMoved
}

// FastStats reports how many commits went in one round trip (taken) and how many of those
// found the log moved and were committed again (missed).
func (w *Writer) FastStats() (taken, missed uint64) {
	return w.fastTaken.Load(), w.fastMissed.Load()
}

// execAll reads the results of n statements that return no rows the caller needs.
func execAll(n int) func(pgx.BatchResults) error {
	return func(br pgx.BatchResults) error {
		for range n {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		return nil
	}
}
