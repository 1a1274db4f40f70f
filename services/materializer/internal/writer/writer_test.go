package writer

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func ev(exec, id, typ string) *eventv1.Event {
	e := &eventv1.Event{ExecutionId: exec, EventId: id, Tenant: "t1", Type: typ}
	if typ == domain.EventPlaybookStarted {
		e.PayloadJson = []byte(`{"path":"p","version":1,"workload":{}}`)
	}
	return e
}

// newWriter is a writer, without a decider, on a private migrated Postgres.
func newWriter(t testing.TB) *Writer {
	t.Helper()
	db, err := pgxext.Open(context.Background(), testkit.StartMigratedPostgres(t), 4)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return &Writer{DB: db}
}

func TestCommitDedupesSequencesAndRejects(t *testing.T) {
	ctx := context.Background()
	w := newWriter(t)
	db := w.DB

	wrongTenant := ev("a", "a3", domain.EventStepEnter)
	wrongTenant.Tenant = "t2"
	res, err := w.Commit(ctx, []*eventv1.Event{
		ev("a", "a1", domain.EventPlaybookStarted),
		ev("b", "b1", domain.EventPlaybookStarted),
		ev("a", "a2", domain.EventStepEnter),
		ev("a", "a2", domain.EventStepEnter), // in-batch duplicate
		wrongTenant,
		ev("zzz", "z1", domain.EventStepEnter), // unknown execution
		ev("b", "b2", domain.EventCommandCompleted),
	}, nil)
	require.NoError(t, err)
	require.Equal(t, []Outcome{Committed, Committed, Committed, Duplicate, Rejected, Rejected, Committed}, res.Outcomes)
	require.Equal(t, 4, res.Committed)
	require.Len(t, res.Notices, 2)
	for _, n := range res.Notices {
		require.Equal(t, int64(2), n.GetSeq(), n.GetExecutionId())
		require.True(t, n.GetNeedsDecision())
	}

	// A redelivery of the whole batch changes nothing but still re-sends notices.
	res, err = w.Commit(ctx, []*eventv1.Event{ev("a", "a1", domain.EventPlaybookStarted), ev("a", "a2", domain.EventStepEnter)}, nil)
	require.NoError(t, err)
	require.Equal(t, []Outcome{Duplicate, Duplicate}, res.Outcomes)
	require.Len(t, res.Notices, 1)
	require.Equal(t, int64(2), res.Notices[0].GetSeq())

	// After the terminal event only its duplicate is accepted (as a duplicate).
	res, err = w.Commit(ctx, []*eventv1.Event{ev("a", "a9", domain.EventPlaybookCompleted), ev("a", "a10", domain.EventStepEnter)}, nil)
	require.NoError(t, err)
	require.Equal(t, []Outcome{Committed, Rejected}, res.Outcomes)
	require.True(t, res.Notices[0].GetTerminal())
	require.False(t, res.Notices[0].GetNeedsDecision())
	res, err = w.Commit(ctx, []*eventv1.Event{ev("a", "a9", domain.EventPlaybookCompleted)}, nil)
	require.NoError(t, err)
	require.Equal(t, []Outcome{Duplicate}, res.Outcomes)

	var seqs []int64
	rows, err := db.Query(ctx, `SELECT seq FROM noetl.event WHERE execution_id = 'a' ORDER BY seq`)
	require.NoError(t, err)
	for rows.Next() {
		var s int64
		require.NoError(t, rows.Scan(&s))
		seqs = append(seqs, s)
	}
	require.Equal(t, []int64{1, 2, 3}, seqs)
	var status int16
	require.NoError(t, db.QueryRow(ctx, `SELECT status FROM noetl.execution WHERE execution_id = 'a'`).Scan(&status))
	require.Equal(t, int16(eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED), status)
}

// TestCommitTerminalInsideBatchAndTimers checks what one batch decides about an execution
// that ends inside it: events after the terminal event are refused, a duplicate of the
// terminal event is a duplicate, and a timer scheduled before the end is retired with it.
func TestCommitTerminalInsideBatchAndTimers(t *testing.T) {
	ctx := context.Background()
	w := newWriter(t)
	db := w.DB

	timer := func(exec, id, typ, timerID string) *eventv1.Event {
		e := ev(exec, id, typ)
		e.PayloadJson = []byte(`{"timer_id":"` + timerID + `","due_at":"2030-01-01T00:00:00Z"}`)
		return e
	}
	res, err := w.Commit(ctx, []*eventv1.Event{
		ev("c", "c1", domain.EventPlaybookStarted),
		timer("c", "c2", domain.EventTimerScheduled, "t1"),
		timer("c", "c3", domain.EventTimerScheduled, "t2"),
		timer("c", "c4", domain.EventTimerFired, "t2"),
		ev("c", "c5", domain.EventPlaybookFailed),
		ev("c", "c6", domain.EventStepEnter), // after the terminal event
		ev("c", "c5", domain.EventPlaybookFailed),
		ev("c", "c2", domain.EventTimerScheduled),
	}, nil)
	require.NoError(t, err)
	require.Equal(t, []Outcome{Committed, Committed, Committed, Committed, Committed, Rejected, Duplicate, Duplicate}, res.Outcomes)
	require.Len(t, res.Notices, 1)
	require.Equal(t, int64(5), res.Notices[0].GetSeq())
	require.True(t, res.Notices[0].GetTerminal())
	var status int16
	var ended bool
	require.NoError(t, db.QueryRow(ctx, `SELECT status, ended_at IS NOT NULL FROM noetl.execution WHERE execution_id = 'c'`).Scan(&status, &ended))
	require.Equal(t, int16(eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED), status)
	require.True(t, ended)
	var pending int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM noetl.timer WHERE execution_id = 'c' AND NOT fired`).Scan(&pending))
	require.Zero(t, pending)
	var timers int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM noetl.timer WHERE execution_id = 'c'`).Scan(&timers))
	require.Equal(t, 2, timers)
}

// TestCommitMovesTheCursorAndKeepsBodies checks that a batch moves its partition's cursor
// in its own transaction (never back), and stores events as published when given.
func TestCommitMovesTheCursorAndKeepsBodies(t *testing.T) {
	ctx := context.Background()
	w := newWriter(t)
	db := w.DB
	_, err := db.Exec(ctx, `INSERT INTO noetl.materializer_partition (consumer, partition) VALUES ('g', 3)`)
	require.NoError(t, err)
	cursor := func() int64 {
		var seq int64
		require.NoError(t, db.QueryRow(ctx, `SELECT stream_seq FROM noetl.materializer_partition WHERE consumer = 'g' AND partition = 3`).Scan(&seq))
		return seq
	}

	started := ev("d", "d1", domain.EventPlaybookStarted)
	published, err := proto.Marshal(started)
	require.NoError(t, err)
	res, err := w.Commit(ctx, []*eventv1.Event{started}, [][]byte{published}, Cursor{Group: "g", Partition: 3, StreamSeq: 42})
	require.NoError(t, err)
	require.Equal(t, []Outcome{Committed}, res.Outcomes)
	require.Equal(t, int64(1), started.GetSeq())
	require.Equal(t, int64(42), cursor())
	var body []byte
	require.NoError(t, db.QueryRow(ctx, `SELECT body FROM noetl.event WHERE execution_id = 'd' AND seq = 1`).Scan(&body))
	require.Equal(t, published, body)

	// A batch of duplicates moves it too; a cursor behind the stored one does not move it.
	res, err = w.Commit(ctx, []*eventv1.Event{ev("d", "d1", domain.EventPlaybookStarted)}, nil, Cursor{Group: "g", Partition: 3, StreamSeq: 50})
	require.NoError(t, err)
	require.Equal(t, []Outcome{Duplicate}, res.Outcomes)
	require.Equal(t, int64(50), cursor())
	_, err = w.Commit(ctx, []*eventv1.Event{ev("d", "d2", domain.EventStepEnter)}, nil, Cursor{Group: "g", Partition: 3, StreamSeq: 7})
	require.NoError(t, err)
	require.Equal(t, int64(50), cursor())
}

// TestCommitLargeBatch checks the COPY path (a batch of copyMin new events or more): seqs
// are gap-free per execution in arrival order, and a redelivery is all duplicates.
func TestCommitLargeBatch(t *testing.T) {
	ctx := context.Background()
	w := newWriter(t)
	db := w.DB
	batch := func() []*eventv1.Event {
		evs := []*eventv1.Event{ev("e", "e0", domain.EventPlaybookStarted), ev("f", "f0", domain.EventPlaybookStarted)}
		for i := range 2 * copyMin {
			exec := []string{"e", "f"}[i%2]
			evs = append(evs, ev(exec, fmt.Sprintf("%s%d", exec, i+1), domain.EventStepEnter))
		}
		return append(evs, ev("e", "e1", domain.EventStepEnter)) // an in-batch duplicate
	}
	evs := batch()
	res, err := w.Commit(ctx, evs, nil)
	require.NoError(t, err)
	require.Equal(t, len(evs)-1, res.Committed)
	require.Equal(t, Duplicate, res.Outcomes[len(evs)-1])
	for _, x := range []string{"e", "f"} {
		var n, maxSeq, lastSeq int64
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*), max(seq) FROM noetl.event WHERE execution_id = $1`, x).Scan(&n, &maxSeq))
		require.NoError(t, db.QueryRow(ctx, `SELECT last_seq FROM noetl.execution WHERE execution_id = $1`, x).Scan(&lastSeq))
		require.Equal(t, int64(copyMin+1), n)
		require.Equal(t, n, maxSeq)
		require.Equal(t, n, lastSeq)
	}
	// Arrival order: e's events got seq 1, 2, ... in the order they came.
	for _, e := range evs[:len(evs)-1] {
		var id string
		require.NoError(t, db.QueryRow(ctx, `SELECT event_id FROM noetl.event WHERE execution_id = $1 AND seq = $2`, e.GetExecutionId(), e.GetSeq()).Scan(&id))
		require.Equal(t, e.GetEventId(), id)
	}

	res, err = w.Commit(ctx, batch(), nil)
	require.NoError(t, err)
	require.Zero(t, res.Committed)
	for _, o := range res.Outcomes {
		require.Equal(t, Duplicate, o)
	}
}

// TestCommitKeepsOneOutcomePerCommand: a command's first terminal event is its outcome.
// The log refuses what contradicts it, in a later batch (a redelivered command that ended
// the other way) and in the same batch, and takes the repeats of the first run as
// duplicates; call events that precede every terminal event are all kept.
func TestCommitKeepsOneOutcomePerCommand(t *testing.T) {
	ctx := context.Background()
	w := newWriter(t)
	db := w.DB
	out := func(exec, cmd, typ, result string) *eventv1.Event {
		e := ev(exec, domain.EventID(cmd, typ), typ)
		e.Step, e.CommandId, e.Attempt = "s", cmd, 1
		if result != "" {
			e.ResultJson = []byte(result)
		}
		return e
	}
	commit := func(evs ...*eventv1.Event) []Outcome {
		t.Helper()
		res, err := w.Commit(ctx, evs, nil)
		require.NoError(t, err)
		return res.Outcomes
	}
	logged := func(exec string) []string {
		t.Helper()
		rows, err := db.Query(ctx, `SELECT type FROM noetl.event WHERE execution_id = $1 AND command_id <> '' ORDER BY seq`, exec)
		require.NoError(t, err)
		defer rows.Close()
		var types []string
		for rows.Next() {
			var typ string
			require.NoError(t, rows.Scan(&typ))
			types = append(types, typ)
		}
		require.NoError(t, rows.Err())
		return types
	}
	done, callErr := domain.EventCallDone, domain.EventCallError
	completed, failed := domain.EventCommandCompleted, domain.EventCommandFailed

	// Across batches: the first run completes; its redelivery fails, then repeats the
	// first run's call.done (a duplicate) with another result.
	require.Equal(t, []Outcome{Committed}, commit(ev("x", "x0", domain.EventPlaybookStarted)))
	require.Equal(t, []Outcome{Committed, Committed}, commit(out("x", "c1", done, `{"run":"A"}`), out("x", "c1", completed, "")))
	require.Equal(t, []Outcome{Superseded, Superseded, Duplicate, Duplicate},
		commit(out("x", "c1", callErr, ""), out("x", "c1", failed, ""), out("x", "c1", done, `{"run":"B"}`), out("x", "c1", completed, "")))
	// In one batch: command.failed, then command.completed and call.done of another run.
	require.Equal(t, []Outcome{Committed, Committed, Superseded, Superseded},
		commit(out("x", "c2", callErr, ""), out("x", "c2", failed, ""), out("x", "c2", completed, ""), out("x", "c2", done, `{"run":"B"}`)))
	// Two runs that overlapped: both call events come before either terminal event.
	require.Equal(t, []Outcome{Committed, Committed, Committed, Superseded},
		commit(out("x", "c3", done, `{"run":"A"}`), out("x", "c3", callErr, ""), out("x", "c3", completed, ""), out("x", "c3", failed, "")))
	// Another command and another execution are not affected.
	require.Equal(t, []Outcome{Committed}, commit(ev("y", "y0", domain.EventPlaybookStarted)))
	require.Equal(t, []Outcome{Committed, Committed}, commit(out("x", "c4", failed, ""), out("y", "c1", failed, "")))

	require.Equal(t, []string{done, completed, callErr, failed, done, callErr, completed, failed}, logged("x"))
	require.Equal(t, []string{failed}, logged("y"))
	var body []byte
	require.NoError(t, db.QueryRow(ctx, `SELECT body FROM noetl.event WHERE execution_id = 'x' AND event_id = $1`, domain.EventID("c1", done)).Scan(&body))
	var kept eventv1.Event
	require.NoError(t, proto.Unmarshal(body, &kept))
	require.JSONEq(t, `{"run":"A"}`, string(kept.GetResultJson()), "the first run's call.done stays")
}

func TestCommitProjectsTheLabelsOfAStart(t *testing.T) {
	ctx := context.Background()
	w := newWriter(t)
	db := w.DB
	var err error
	labelled := ev("l", "l1", domain.EventPlaybookStarted)
	labelled.PayloadJson = []byte(`{"path":"p","version":1,"workload":{},"labels":{"team":"data","env":"prod"}}`)
	_, err = w.Commit(ctx, []*eventv1.Event{labelled, ev("u", "u1", domain.EventPlaybookStarted)}, nil)
	require.NoError(t, err)
	for id, want := range map[string]string{"l": `{"env": "prod", "team": "data"}`, "u": `{}`} {
		var got string
		require.NoError(t, db.QueryRow(ctx, `SELECT labels::text FROM noetl.execution WHERE execution_id = $1`, id).Scan(&got))
		require.Equal(t, want, got, id)
	}
}

// A notice carries the events its execution committed in the batch, in seq order with
// their seq and commit time, exactly as the log holds them; nothing for a batch of
// duplicates, and nothing for one over NoticeEventsBudget.
func TestNoticesCarryTheCommittedEvents(t *testing.T) {
	ctx := context.Background()
	w := newWriter(t)
	db := w.DB

	res, err := w.Commit(ctx, []*eventv1.Event{
		ev("a", "a1", domain.EventPlaybookStarted),
		ev("b", "b1", domain.EventPlaybookStarted),
		ev("a", "a2", domain.EventStepEnter),
		ev("a", "a2", domain.EventStepEnter), // in-batch duplicate: carried once
		ev("b", "b2", domain.EventStepEnter),
		issued("a", "a3"),
	}, nil)
	require.NoError(t, err)
	carried := map[string][]string{}
	for _, n := range res.Notices {
		var prev int64
		for _, e := range n.GetEvents() {
			require.Equal(t, prev+1, e.GetSeq(), "gap-free, in seq order")
			require.NotNil(t, e.GetCommitTime())
			prev = e.GetSeq()
			carried[n.GetExecutionId()] = append(carried[n.GetExecutionId()], e.GetEventId())
		}
		require.Equal(t, n.GetSeq(), prev, "the last carried event is the notice's seq")
		require.Equal(t, n.GetEvents()[len(n.GetEvents())-1].GetEventId(), n.GetLastEventId(), "the notice names its head")
	}
	require.Equal(t, map[string][]string{"a": {"a1", "a2", "a3"}, "b": {"b1", "b2"}}, carried)

	// The carried events are the log's: the stored body with the seq and commit time, less
	// a command.issued's command (forwarded to the workers as before).
	for _, e := range res.Notices[0].GetEvents() {
		var body []byte
		var committed time.Time
		require.NoError(t, db.QueryRow(ctx, `SELECT body, committed_at FROM noetl.event WHERE execution_id = 'a' AND seq = $1`, e.GetSeq()).Scan(&body, &committed))
		logged := &eventv1.Event{}
		require.NoError(t, proto.Unmarshal(body, logged))
		if logged.GetType() == domain.EventCommandIssued {
			require.NotNil(t, logged.GetCommand(), "the log keeps the command")
			logged.Command = nil
		}
		// The same commit time as the log's, to the microsecond Postgres keeps: a state
		// folded from the notice and one read from the log decide alike.
		require.True(t, committed.Equal(e.GetCommitTime().AsTime()), "commit time %v, logged %v", e.GetCommitTime().AsTime(), committed)
		logged.Seq, logged.CommitTime = e.GetSeq(), e.GetCommitTime()
		require.True(t, proto.Equal(logged, e), "%v != %v", logged, e)
	}
	require.Len(t, res.Commands, 1)
	require.Equal(t, "a3-cmd", res.Commands[0].GetCommandId(), "the command is still forwarded")
	require.Equal(t, [][]byte{nil}, res.EncodedCommands, "no bodies given: the forward encodes it")

	res, err = w.Commit(ctx, []*eventv1.Event{ev("a", "a2", domain.EventStepEnter)}, nil)
	require.NoError(t, err)
	require.Len(t, res.Notices, 1)
	require.Empty(t, res.Notices[0].GetEvents(), "duplicates only: nothing new to carry")
	require.Empty(t, res.Notices[0].GetLastEventId(), "a writer that does not decide reads no head under its lock")

	big := ev("a", "a4", domain.EventCommandCompleted)
	big.ResultJson = []byte(fmt.Sprintf("%q", make([]byte, NoticeEventsBudget)))
	res, err = w.Commit(ctx, []*eventv1.Event{big}, nil)
	require.NoError(t, err)
	require.Equal(t, []Outcome{Committed}, res.Outcomes)
	require.EqualValues(t, 4, res.Notices[0].GetSeq())
	require.Empty(t, res.Notices[0].GetEvents(), "over the budget: readers read the log")
	require.Equal(t, "a4", res.Notices[0].GetLastEventId(), "the head is named all the same")
}

// A commands.issued is one row of the log; its commands are forwarded one by one, each as
// the group's body encodes it, and its notice carries what a fold reads of it.
func TestAGroupOfCommandsIsOneRowAndEachCommandIsForwarded(t *testing.T) {
	ctx := context.Background()
	w := newWriter(t)
	_, err := w.Commit(ctx, []*eventv1.Event{ev("g", "g1", domain.EventPlaybookStarted), ev("g", "g2", domain.EventStepEnter)}, nil)
	require.NoError(t, err)
	grp := ev("g", "g3", domain.EventCommandsIssued)
	for i := range 3 {
		grp.Commands = append(grp.Commands, &eventv1.Command{CommandId: fmt.Sprintf("g-cmd-%d", i), ExecutionId: "g", Tenant: "t1", Step: "s", Attempt: 1,
			IssuedEventId: "g3", Iteration: &eventv1.Iteration{Epoch: 1, Index: int32(i)}, ContextJson: []byte(`{"iter":{"i":` + fmt.Sprint(i) + `}}`)})
	}
	body, err := proto.Marshal(grp)
	require.NoError(t, err)
	res, err := w.Commit(ctx, []*eventv1.Event{grp, ev("g", "g4", domain.EventCommandCompleted)}, [][]byte{body, nil})
	require.NoError(t, err)
	require.Equal(t, []Outcome{Committed, Committed}, res.Outcomes)
	require.Len(t, res.Commands, 3)
	require.Len(t, res.EncodedCommands, 3, "index-aligned with the commands")
	for i, c := range res.Commands {
		require.Equal(t, fmt.Sprintf("g-cmd-%d", i), c.GetCommandId(), "in order")
		got := &eventv1.Command{}
		require.NoError(t, proto.Unmarshal(res.EncodedCommands[i], got), "the command as the group's body encodes it")
		require.True(t, proto.Equal(c, got))
	}
	var rows int
	require.NoError(t, w.DB.QueryRow(ctx, `SELECT count(*) FROM noetl.event WHERE execution_id = 'g' AND type = 'commands.issued'`).Scan(&rows))
	require.Equal(t, 1, rows, "one row for the group")
	require.Len(t, res.Notices, 1)
	carried := res.Notices[0].GetEvents()
	require.Len(t, carried, 2)
	require.Equal(t, domain.EventCommandsIssued, carried[0].GetType())
	require.Len(t, carried[0].GetCommands(), 3)
	for i, c := range carried[0].GetCommands() {
		require.Equal(t, fmt.Sprintf("g-cmd-%d", i), c.GetCommandId())
		require.Equal(t, int32(i), c.GetIteration().GetIndex())
		require.Empty(t, c.GetContextJson(), "what workers run stays out of notices")
	}
	require.JSONEq(t, `{"iter":{"i":0}}`, string(grp.GetCommands()[0].GetContextJson()), "the batch's own event keeps its commands")
}

func issued(exec, id string) *eventv1.Event {
	e := ev(exec, id, domain.EventCommandIssued)
	e.CommandId = id + "-cmd"
	e.Command = &eventv1.Command{CommandId: id + "-cmd", ExecutionId: exec, Tenant: "t1", Step: "s", ContextJson: []byte(`{"workload":{"k":"v"}}`)}
	return e
}

// The writer's plan settings are its connections' session settings, made by the first
// transaction a connection commits for it, and not made again: a connection the writer
// never committed on keeps the server's defaults.
func TestSettingsAreTheSessionsOnce(t *testing.T) {
	ctx := context.Background()
	db, err := pgxext.Open(ctx, testkit.StartMigratedPostgres(t), 1)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	show := func() (seqscan, plans string, isSettled bool) {
		conn, err := db.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		require.NoError(t, conn.QueryRow(ctx, `SELECT current_setting('enable_seqscan'), current_setting('plan_cache_mode')`).Scan(&seqscan, &plans))
		return seqscan, plans, settled(conn)
	}
	seqscan, plans, isSettled := show()
	require.Equal(t, []any{"on", "auto", false}, []any{seqscan, plans, isSettled}, "a connection the writer has not used")

	w := &Writer{DB: db}
	_, err = w.Commit(ctx, []*eventv1.Event{ev("s", "s1", domain.EventPlaybookStarted)}, nil)
	require.NoError(t, err)
	seqscan, plans, isSettled = show()
	require.Equal(t, []any{"off", "force_generic_plan", true}, []any{seqscan, plans, isSettled}, "after its first commit")
	res, err := w.Commit(ctx, []*eventv1.Event{ev("s", "s2", domain.EventStepEnter)}, nil)
	require.NoError(t, err)
	require.Equal(t, []Outcome{Committed}, res.Outcomes, "a settled connection commits without the settings statement")
}

// TestFewLargeEventsGoInWithCopy: a batch whose new events are few but large (a wide
// fan-out's groups of commands) is inserted with COPY, bodies intact, and a batch of as
// many small events is not.
func TestFewLargeEventsGoInWithCopy(t *testing.T) {
	ctx := context.Background()
	w := newWriter(t)
	_, err := w.Commit(ctx, []*eventv1.Event{ev("L", "L0", domain.EventPlaybookStarted)}, nil)
	require.NoError(t, err)
	small := []*eventv1.Event{ev("L", "L1", domain.EventStepEnter), ev("L", "L2", domain.EventStepEnter)}
	before := w.copies.Load()
	_, err = w.Commit(ctx, small, nil)
	require.NoError(t, err)
	require.Equal(t, before, w.copies.Load(), "two small events go in with an INSERT")

	large := make([]*eventv1.Event, 3)
	for i := range large {
		large[i] = ev("L", fmt.Sprintf("L%d", i+3), domain.EventStepEnter)
		large[i].PayloadJson = []byte(`{"pad":"` + strings.Repeat("x", copyBytes/2) + `"}`)
	}
	res, err := w.Commit(ctx, large, nil)
	require.NoError(t, err)
	require.Equal(t, 3, res.Committed)
	require.Equal(t, before+1, w.copies.Load(), "three events of half copyBytes each go in with COPY")
	for _, e := range large {
		var body []byte
		require.NoError(t, w.DB.QueryRow(ctx, `SELECT body FROM noetl.event WHERE execution_id = 'L' AND event_id = $1`, e.GetEventId()).Scan(&body))
		got := &eventv1.Event{}
		require.NoError(t, proto.Unmarshal(body, got))
		require.Equal(t, e.GetPayloadJson(), got.GetPayloadJson())
	}
	var last int64
	require.NoError(t, w.DB.QueryRow(ctx, `SELECT last_seq FROM noetl.execution WHERE execution_id = 'L'`).Scan(&last))
	require.Equal(t, int64(6), last)
}
