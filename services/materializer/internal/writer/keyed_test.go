package writer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
)

// A batch of one execution commits through the keyed statements (one row of values per
// event up to valuesMax, the arrays past it) what the arrays would: every row's columns,
// its body, one commit time per transaction, gap-free seqs, and the projection of the
// execution's last seq, status and end.
func TestKeyedStatementsCommitEveryColumnAndTheProjection(t *testing.T) {
	ctx := context.Background()
	w := newWriter(t)
	_, err := w.Commit(ctx, []*eventv1.Event{ev("k", "k0", domain.EventPlaybookStarted)}, nil)
	require.NoError(t, err)
	seq := int64(1)
	for n := 1; n <= valuesMax+1; n++ {
		batch := make([]*eventv1.Event, n)
		for k := range batch {
			batch[k] = ev("k", fmt.Sprintf("k%d-%d", n, k), domain.EventStepEnter)
			batch[k].Step = fmt.Sprintf("step%d", k)
			batch[k].CommandId = fmt.Sprintf("c%d-%d", n, k)
		}
		res, err := w.Commit(ctx, batch, nil)
		require.NoError(t, err)
		for k := range batch {
			require.Equal(t, Committed, res.Outcomes[k], "batch of %d, event %d", n, k)
		}
		got := rowsAfter(t, w, "k", seq)
		k := 0
		for _, x := range got {
			require.Equal(t, []any{seq + int64(k) + 1, batch[k].GetEventId(), "t1", domain.EventStepEnter, batch[k].GetStep(), batch[k].GetCommandId()},
				[]any{x.seq, x.id, x.tenant, x.typ, x.step, x.cmd}, "batch of %d, row %d", n, k)
			stored := &eventv1.Event{}
			require.NoError(t, proto.Unmarshal(x.body, stored))
			require.Equal(t, batch[k].GetEventId(), stored.GetEventId(), "the body is the event's")
			require.True(t, x.at.Equal(got[0].at), "one commit time per transaction")
			k++
		}
		require.Equal(t, n, k, "batch of %d: rows inserted", n)
		seq += int64(n)
		_, last := logOf(t, w, "k")
		require.Equal(t, seq, last, "the projection's last seq after the batch of %d", n)
	}
	taken, _ := w.FastStats()
	require.Equal(t, uint64(valuesMax+1), taken, "every batch after the start went in one round trip, keyed")

	_, err = w.Commit(ctx, []*eventv1.Event{ev("k", "kend", domain.EventPlaybookCompleted)}, nil)
	require.NoError(t, err)
	var status int16
	var ended bool
	require.NoError(t, w.DB.QueryRow(ctx, `SELECT status, ended_at IS NOT NULL FROM noetl.execution WHERE execution_id = 'k'`).Scan(&status, &ended))
	require.Equal(t, int16(eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED), status)
	require.True(t, ended, "the terminal event ends the execution")
}

// loggedRow is a row of the log as a query reads it back.
type loggedRow struct {
	seq                        int64
	id, tenant, typ, step, cmd string
	at                         time.Time
	body                       []byte
}

// rowsAfter reads back the rows of exec's log after seq, in seq order, every column but the
// execution id; the rows are closed before it returns, so a failed assertion on them holds
// no connection.
func rowsAfter(t *testing.T, w *Writer, exec string, seq int64) []loggedRow {
	t.Helper()
	rows, err := w.DB.Query(context.Background(), `SELECT seq, event_id, tenant, type, step, command_id, committed_at, body FROM noetl.event
		WHERE execution_id = $1 AND seq > $2 ORDER BY seq`, exec, seq)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (loggedRow, error) {
		var x loggedRow
		err := r.Scan(&x.seq, &x.id, &x.tenant, &x.typ, &x.step, &x.cmd, &x.at, &x.body)
		return x, err
	})
	require.NoError(t, err)
	return got
}
