package writer

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/testkit"
)

// A connection a pool with Warm makes has the writer's settings and every statement a
// commit sends prepared before its first commit: the commits below (a start decided
// inside its commit, one-round-trip head starts of one and of several rows, a batch of
// several executions, a batch large enough to copy, a terminal event) prepare nothing more
// on it.
func TestWarmPreparesEveryStatementACommitSends(t *testing.T) {
	ctx := context.Background()
	db, err := pgxext.Open(ctx, testkit.StartMigratedPostgres(t), 1, pgxext.AfterConnect(Warm))
	require.NoError(t, err)
	t.Cleanup(db.Close)
	// prepared is the session's prepared statements, asked without preparing the question.
	prepared := func() (n int, isSettled bool, seqscan string) {
		conn, err := db.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_prepared_statements), current_setting('enable_seqscan')`,
			pgx.QueryExecModeSimpleProtocol).Scan(&n, &seqscan))
		return n, settled(conn), seqscan
	}
	before, isSettled, seqscan := prepared()
	require.GreaterOrEqual(t, before, len(warmStatements), "every statement prepared when the connection was made")
	require.Equal(t, []any{true, "off"}, []any{isSettled, seqscan}, "the session has the writer's settings before its first commit")

	w := &Writer{DB: db, Decide: &decider{answer: next}}
	commit := func(evs ...*eventv1.Event) {
		t.Helper()
		res, err := w.Commit(ctx, evs, nil)
		require.NoError(t, err)
		for i, o := range res.Outcomes {
			require.Equal(t, Committed, o, "event %d of %s", i, evs[i].GetEventId())
		}
	}
	commit(ev("w", "w0", domain.EventPlaybookStarted))
	commit(ev("v", "v0", domain.EventPlaybookStarted), ev("u", "u0", domain.EventPlaybookStarted))
	for n := 1; n <= valuesMax+1; n++ {
		batch := make([]*eventv1.Event, n)
		for k := range batch {
			batch[k] = ev("w", fmt.Sprintf("w%d-%d", n, k), domain.EventCallDone)
		}
		commit(batch...)
	}
	commit(ev("v", "v1", domain.EventCallDone), ev("u", "u1", domain.EventCallDone))
	large := make([]*eventv1.Event, copyMin)
	for k := range large {
		large[k] = ev("u", fmt.Sprintf("u-large-%d", k), domain.EventCallDone)
	}
	commit(large...)
	commit(ev("w", "wend", domain.EventPlaybookCompleted))
	taken, _ := w.FastStats()
	require.Positive(t, taken, "some commits went in one round trip")
	require.Positive(t, w.headStarts.Load(), "some commits had a head start")

	after, _, _ := prepared()
	require.Equal(t, before, after, "no commit prepared a statement on the warmed connection")
}
