// Package writer is the materializer's commit path: it turns a batch of transported events
// into one Postgres transaction that dedupes them, assigns each execution a gap-free seq,
// inserts them and updates the projections (execution summary, timers).
//
// What the log takes, decided here under each execution's row lock: an event once (by
// event id), nothing of an unknown execution or of another tenant, nothing after the
// execution's terminal event, and one outcome per command: an event that domain.OutcomeRival
// says contradicts the command's terminal event already in the log (or earlier in the
// batch) is refused as Superseded.
//
// What it announces: one commit notice per execution the batch touched, built only from
// what this transaction committed (or found already committed); the events a notice
// carries are the rows it inserted, with their seq and commit time, in seq order (a
// command.issued without its command, a commands.issued with only its commands' ids,
// attempts and iterations, which is all a fold reads), so a reader that folds them
// holds the state a read of the log would give it.
package writer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/commandbus"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/failpoint"
)

// Outcome is what happened to one input event.
type Outcome int

// Outcomes.
const (
	Committed  Outcome = iota // inserted with a new seq
	Duplicate                 // already in the log
	Rejected                  // dropped: execution terminal, unknown, or tenant mismatch
	Superseded                // dropped: its command already ended the other way (domain.OutcomeRival)
)

// Result describes a committed batch.
type Result struct {
	// Outcomes, index-aligned with the input.
	Outcomes []Outcome
	// Notices has one entry per execution that gained events (or saw duplicates, so a lost
	// notice is re-sent).
	Notices []*eventv1.CommitNotice
	// Commands are the commands of the batch's command.issued and commands.issued events
	// that are in the log (newly or before), in order. Re-forwarding a duplicate's command
	// is safe: the command publish is deduplicated by its id, and commands are
	// at-least-once anyway.
	Commands []*eventv1.Command
	// EncodedCommands is index-aligned with Commands: each command as its issuing event's
	// body encodes it (commandbus.CommandOf, CommandsOf), nil when that body was not at
	// hand; the forward sends these bytes instead of encoding the commands again.
	EncodedCommands [][]byte
	// Committed counts events inserted, the decisions' included.
	Committed int
	// Decided counts the events of decisions taken inside the commit (inline.go).
	Decided int
	// DecisionTraces holds, by execution, the trace context (W3C carrier) of the decision
	// taken inside the commit: the commands it issued continue it.
	DecisionTraces map[string]map[string]string
	// Cancelled lists executions whose playbook.cancelled, or playbook.failed at their
	// deadline, was committed (or redelivered) in this batch: their running commands stop.
	Cancelled []string
	// Inline holds the executions whose decision was taken inside this commit (inline.go)
	// and committed whole: the orchestrator that answered holds their state as committed,
	// so their notices are only for waiters and watchers (natsx.AdvancedSubject).
	Inline map[string]bool
}

// Cursor is a partition cursor moved in the same transaction as a batch: the stream
// sequence up to which every event of the partition has been committed and forwarded
// (noetl.materializer_partition.stream_seq, never moved back).
type Cursor struct {
	Group     string
	Partition int
	StreamSeq uint64
}

// Writer commits event batches.
type Writer struct {
	DB *pgxpool.Pool
	// Now returns the commit time; tests may fix it.
	Now func() time.Time
	// Decide, when set, is asked under the locks what the executions that need a decision
	// decide once the batch is committed (orchestrator DecisionService), and the answer is
	// committed in the same transaction (inline.go).
	Decide Decider
	// fastTaken and fastMissed count the commits tried in one round trip and those of
	// them that found the log moved (fast.go).
	fastTaken, fastMissed atomic.Uint64
	// headStarts counts the one-round-trip commits whose head ran while their decision
	// was taken (headstart.go).
	headStarts atomic.Uint64
	// copies counts the commits whose rows went in with COPY (copyMin, copyBytes).
	copies atomic.Uint64
	// noHeadStart turns head starts off (for benchmarks comparing them).
	noHeadStart bool
	// decideRestUntil is when (Unix nanoseconds) the decider may be asked again after a
	// failed call.
	decideRestUntil atomic.Int64
	// heads holds each execution's last event as this writer committed it (inline.go).
	headsMu sync.Mutex
	heads   map[string]head
}

// The transaction's statements. Every read is by key, for about a thousand keys per batch:
// an index probe is always right whatever the statistics say (a log that grew since the
// last ANALYZE looks small and would be scanned whole per batch), and compiling a plan is
// never worth it. Each statement is planned once per connection (a generic plan,
// plan_cache_mode): planning it again for each batch's arrays cost more than running it
// (a chain step's four bind phases took 0.49 ms of Postgres's 0.87 ms per commit). The
// settings are the session's, made in the first transaction a connection commits for the
// writer (settled): setting them in every transaction was a statement a commit, an eighth
// of a chain step's Postgres time. They only steer plans, and the materializer's other
// statements on its connections (leases, cursors, purges) are keyed too.
const (
	sqlSettings = `SELECT set_config('enable_seqscan', 'off', false), set_config('enable_hashjoin', 'off', false),
		set_config('enable_mergejoin', 'off', false), set_config('jit', 'off', false), set_config('plan_cache_mode', 'force_generic_plan', false)`
	sqlStart = `INSERT INTO noetl.execution (execution_id, tenant, playbook_path, playbook_version, parent_execution_id, started_at, labels)
		SELECT r.ex, r.tn, r.path, r.ver, r.parent, $6, r.labels::jsonb
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $7::text[]) AS r(ex, tn, path, ver, parent, labels)
		ON CONFLICT (execution_id) DO NOTHING`
	// The lock serialises writers per execution, in one order (no deadlock), and returns
	// each row's latest version whoever committed it.
	sqlLock = `SELECT execution_id, tenant, last_seq, status, '' FROM noetl.execution
		WHERE execution_id = ANY ($1::text[]) ORDER BY execution_id FOR UPDATE`
	// sqlLockLast is sqlLock that also returns the id of each execution's last event, for
	// the decisions taken inside the commit (a keyed probe of the primary key).
	sqlLockLast = `SELECT x.execution_id, x.tenant, x.last_seq, x.status, coalesce(l.event_id, '') FROM noetl.execution x
		LEFT JOIN LATERAL (SELECT e.event_id FROM noetl.event e WHERE e.execution_id = x.execution_id AND e.seq = x.last_seq) AS l ON true
		WHERE x.execution_id = ANY ($1::text[]) ORDER BY x.execution_id FOR UPDATE OF x`
	// The dedupe probe runs after the lock is granted, so its snapshot holds every event a
	// writer that held the lock before committed. LATERAL with LIMIT keeps it a keyed
	// probe per event.
	sqlLogged = `SELECT r.i FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS r(ex, ev, i)
		CROSS JOIN LATERAL (SELECT 1 FROM noetl.event e WHERE e.execution_id = r.ex AND e.event_id = r.ev LIMIT 1) AS hit`
	sqlInsert = `INSERT INTO noetl.event (execution_id, seq, event_id, tenant, type, step, command_id, committed_at, body)
		SELECT r.ex, r.seq, r.ev, r.tn, r.ty, r.st, r.cmd, $8, r.body
		FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $9::bytea[])
		  AS r(ex, seq, ev, tn, ty, st, cmd, body)`
	sqlProject = `UPDATE noetl.execution x
		SET last_seq = a.seq, status = a.status, updated_at = $5, ended_at = CASE WHEN a.ended THEN $5 ELSE x.ended_at END
		FROM unnest($1::text[], $2::bigint[], $3::smallint[], $4::bool[]) AS a(ex, seq, status, ended)
		WHERE x.execution_id = a.ex`
	// sqlProjectOne is sqlProject for one execution (keyed.go).
	sqlProjectOne = `UPDATE noetl.execution
		SET last_seq = $2::bigint, status = $3::smallint, updated_at = $5::timestamptz,
		    ended_at = CASE WHEN $4::boolean THEN $5::timestamptz ELSE ended_at END
		WHERE execution_id = $1::text`
	sqlTimerScheduled = `INSERT INTO noetl.timer (execution_id, timer_id, tenant, due_at, step)
		SELECT r.ex, r.timer, r.tn, r.due, r.st
		FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[]) WITH ORDINALITY AS r(ex, timer, tn, due, st, k)
		ORDER BY r.k
		ON CONFLICT (execution_id, timer_id) DO NOTHING`
	sqlTimerFired = `UPDATE noetl.timer t SET fired = true
		FROM unnest($1::text[], $2::text[]) AS r(ex, timer)
		WHERE t.execution_id = r.ex AND t.timer_id = r.timer`
	sqlTimerRetired = `UPDATE noetl.timer SET fired = true WHERE execution_id = ANY ($1::text[]) AND NOT fired`
	sqlCursor       = `UPDATE noetl.materializer_partition SET stream_seq = greatest(stream_seq, $3)
		WHERE consumer = $1 AND partition = $2`
)

// copyMin is the number of new events from which a batch is inserted with COPY. COPY costs
// Postgres about a quarter less than an INSERT of the same rows but two more round trips
// on the commit's path, and on a busy mesh a round trip costs more than Postgres's part of
// it: with the Go scheduler on one processor (mesh.LeaveCoreToPostgres) and runnable
// goroutines always queued, as a fan-out's workers keep them, the runtime looks for
// Postgres's reply only at its periodic network poll, every 10 ms. A 1,000-wide fan-out's
// commits of a few hundred outcomes spent 6-10 ms in each round trip before their COPY.
// So batches up to a thousand rows go in one round trip, and the materializer's full
// batches (NOETL_MATERIALIZER_BATCH, 4,096) and megabytes of bodies (copyBytes) still copy.
const copyMin = 1024

// copyBytes is the size of the new events' bodies from which a batch is inserted with
// COPY, however few they are: a wide fan-out's groups of commands (about 80 KiB per 250).
// An INSERT copies its values whole twice on the client (the statement's parameters,
// then the message), each in a buffer grown by doubling, so it allocates about four
// times the bodies' size; COPY streams rows in chunks of about 64 KiB but costs two more
// round trips on the commit's path. Measured on the 2-core development machine: a
// 10,000-wide fan-out (40 groups, 3.2 MB) ran about 14% faster with COPY and allocated
// 19 MB less; at 1,000 wide (320 KiB) the two were within the runs' spread.
const copyBytes = 1 << 20

var eventColumns = []string{"execution_id", "seq", "event_id", "tenant", "type", "step", "command_id", "committed_at", "body"}

// execState is an execution's row as locked, and as the batch leaves it.
type execState struct {
	known   bool
	tenant  string
	lastSeq int64  // before the batch
	lastID  string // the id of the event at lastSeq (read only when the writer decides inline)
	status  int16  // before the batch
	seq     int64  // after the batch
	after   int16  // status after the batch
	// present: a row of the execution was not rejected; decide: one of them asks the
	// orchestrator to decide.
	present, decide bool
}

// Commit writes evs in one transaction; each of cursors is moved in it too. The
// transaction costs two round trips: the first creates the executions the batch starts,
// locks the batch's executions (in id order) and finds which events are already logged;
// the second inserts the new events, updates the projections and commits. Between them
// the batch is classified here, under the locks: dedupe by (execution_id, event_id),
// refusal after the terminal event (a duplicate of the terminal event is a duplicate), for
// an unknown execution or another tenant, or of a command's second outcome (the first
// probe also looks up each outcome's rival), and each execution's next seqs.
//
// When the writer's heads say what the first round trip would find (the executions' last
// commits were this writer's), the transaction goes in one round trip, guarded, and falls
// back to two if the log moved (fast.go).
//
// bodies, when not nil, holds each event as published (index-aligned with evs): an event
// published without seq and commit time is stored as those bytes, not marshalled again.
func (w *Writer) Commit(ctx context.Context, evs []*eventv1.Event, bodies [][]byte, cursors ...Cursor) (*Result, error) {
	asked := map[string]bool{}
	res, err := w.commit(ctx, evs, bodies, true, asked, cursors)
	if errors.Is(err, errMoved) {
		// The one round trip found the log elsewhere than the heads said, and wrote
		// nothing: commit the batch as the log stands (fast.go). The executions asked
		// about are not asked again: the orchestrator speculated on the answer, so it is
		// their notices' to decide, as for an early answer the lock does not find.
		w.fastMissed.Add(1)
		res, err = w.commit(ctx, evs, bodies, false, asked, cursors)
	}
	return res, err
}

// commit is Commit, in one round trip when mayFast and the writer's heads predict the
// first round trip (fast.go); it then returns errMoved, having written nothing, when the
// log is not where they said. asked holds the executions the decider was asked about (by
// an earlier attempt too), which are not asked again.
func (w *Writer) commit(ctx context.Context, evs []*eventv1.Event, bodies [][]byte, mayFast bool, asked map[string]bool, cursors []Cursor) (*Result, error) {
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	res := &Result{Outcomes: make([]Outcome, len(evs))}
	if len(evs) == 0 {
		return res, nil // and the cursor stays: a batch without events moves it by itself
	}
	// To the microsecond, as Postgres keeps it: the commit time a notice's events carry is
	// then the one a read of the log gives, so a state folded from either decides alike (a
	// retry's due time derives from it).
	commitTime := now().UTC().Truncate(time.Microsecond)
	// Group by execution, keeping each execution's arrival order.
	order := make([]int, len(evs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return evs[order[a]].GetExecutionId() < evs[order[b]].GetExecutionId() })
	// Copies of one event (same execution, id and tenant) share the first one's fate: only
	// distinct rows go to Postgres. copyOf[i] is the input index of i's first copy, or -1.
	copyOf := make([]int, len(evs))
	firstOf := make(map[[3]string]int, len(evs))
	var distinct []int // input indices, grouped by execution
	var execs []string // distinct, ascending
	for _, i := range order {
		ev := evs[i]
		key := [3]string{ev.GetExecutionId(), ev.GetEventId(), ev.GetTenant()}
		if f, ok := firstOf[key]; ok {
			copyOf[i] = f
			continue
		}
		firstOf[key], copyOf[i] = i, -1
		distinct = append(distinct, i)
		if n := len(execs); n == 0 || execs[n-1] != ev.GetExecutionId() {
			execs = append(execs, ev.GetExecutionId())
		}
	}

	// The decisions the batch causes are asked now, on the heads this writer last
	// committed, so the call overlaps the first round trip (inline.go).
	var early *earlyAsk
	if w.Decide != nil {
		early = w.askEarly(ctx, evs, distinct, execs, commitTime)
		defer early.stop()
	}
	conn, err := w.DB.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("append events: %w", err)
	}
	defer conn.Release()
	withArrays(conn.Conn())
	open := false
	defer func() {
		if open { // the pool drops the connection if this fails too
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_, _ = conn.Exec(rctx, "ROLLBACK")
		}
	}()

	state := make(map[string]*execState, len(execs))
	logged := map[int]bool{}      // input indices
	rivalLogged := map[int]bool{} // input indices whose rival outcome is in the log
	// One round trip when the heads predict what the first would find (fast.go): the state
	// is the heads', the batch holds nothing logged, and the transaction's guards check both.
	fast := mayFast && w.predict(conn, evs, distinct, execs, state)
	var b *pgx.Batch
	settle := false
	if !fast {
		open = true // the first statement opens the transaction
		if err := w.lockAndProbe(ctx, conn, evs, distinct, execs, commitTime, state, logged, rivalLogged, &settle); err != nil {
			return nil, err
		}
	}

	// Classify, execution by execution in arrival order. committedIDs holds the
	// (execution, event id) of the batch's events committed so far, for the rival outcome
	// that is earlier in the same batch.
	seqs := make([]int64, len(evs))
	committedIDs := map[[2]string]bool{}
	for _, id := range execs {
		if state[id] == nil {
			state[id] = &execState{}
		}
		s := state[id]
		s.seq, s.after = s.lastSeq, s.status
	}
	for _, i := range distinct {
		ev := evs[i]
		s := state[ev.GetExecutionId()]
		switch {
		case !s.known || s.tenant != ev.GetTenant():
			res.Outcomes[i] = Rejected
		case logged[i]:
			res.Outcomes[i] = Duplicate
		case domain.IsTerminalStatus(eventv1.ExecutionStatus(s.after)):
			res.Outcomes[i] = Rejected
		case rivalLogged[i] || committedRival(committedIDs, ev):
			res.Outcomes[i] = Superseded
		default:
			res.Outcomes[i] = Committed
			committedIDs[[2]string{ev.GetExecutionId(), ev.GetEventId()}] = true
			s.seq++
			seqs[i] = s.seq
			if st, ok := terminalStatus(ev.GetType()); ok {
				s.after = st
			}
		}
	}
	for _, i := range order {
		if f := copyOf[i]; f >= 0 {
			res.Outcomes[i] = Duplicate
			if o := res.Outcomes[f]; o == Rejected || o == Superseded {
				res.Outcomes[i] = o
			}
		}
		ev := evs[i]
		if o := res.Outcomes[i]; o == Rejected || o == Superseded {
			continue
		}
		s := state[ev.GetExecutionId()]
		s.present = true
		s.decide = s.decide || domain.NeedsDecision(ev.GetType())
		if stopsCommands(ev) {
			res.Cancelled = append(res.Cancelled, ev.GetExecutionId())
		}
	}

	// While the decision the batch causes is taken, Postgres runs the head of a
	// one-round-trip commit: its BEGIN, guards and the batch's own rows (headstart.go).
	nIn := len(evs)
	var head *headStart
	if fast && early != nil && len(execs) == 1 && !w.noHeadStart && !failpoint.Active() && ownRows(res.Outcomes, distinct, nIn) < copyMin {
		hb := &pgx.Batch{}
		w.queueGuards(hb, evs, distinct, execs, state)
		var own eventRows
		for _, i := range distinct {
			if res.Outcomes[i] == Committed {
				if err := own.add(evs[i], bodies, i, seqs[i]); err != nil {
					return nil, err
				}
			}
		}
		if len(own.ex) > 0 {
			own.queue(hb, commitTime)
		}
		if head, err = startHead(ctx, conn, hb); err != nil {
			return nil, err
		}
		open = true // the BEGIN is sent
		defer func() {
			if head != nil { // ended early: the transaction stays open for the rollback
				_ = head.sync(nil)
			}
		}()
		w.headStarts.Add(1)
	}

	// The decisions the batch causes, committed with it (inline.go).
	if w.Decide != nil {
		evs, bodies = w.decideInline(ctx, early, asked, evs, bodies, distinct, res, execs, state, commitTime)
		if len(evs) > nIn {
			seqs = append(seqs, make([]int64, len(evs)-nIn)...)
			for i := nIn; i < len(evs); i++ {
				distinct = append(distinct, i)
				s := state[evs[i].GetExecutionId()]
				res.Outcomes = append(res.Outcomes, Committed)
				if domain.IsTerminalStatus(eventv1.ExecutionStatus(s.after)) {
					res.Outcomes[i] = Rejected
					delete(res.Inline, evs[i].GetExecutionId()) // not committed as answered
					continue
				}
				s.seq++
				seqs[i] = s.seq
				if st, ok := terminalStatus(evs[i].GetType()); ok {
					s.after = st
				}
				if stopsCommands(evs[i]) {
					res.Cancelled = append(res.Cancelled, evs[i].GetExecutionId())
				}
			}
		}
		if err := failpoint.Eval(failpoint.MaterializerAfterDecide); err != nil {
			return nil, err // the deferred rollback releases the locks
		}
	}

	// Round trip 2: insert, project, commit; a large batch is inserted with COPY before
	// it, which costs Postgres about a quarter less than an INSERT and two round trips more.
	// In the fast path the same round trip opens the transaction and runs the guards first
	// (a batch to COPY has them run on their own before it).
	b = &pgx.Batch{}
	inserted := 0
	if head != nil {
		inserted = nIn // the head inserted the batch's own rows
	} else if fast {
		b.Queue("BEGIN")
		open = true
		w.queueGuards(b, evs, distinct, execs, state)
	}
	guards := b.Len()
	copyRows, err := w.queueWrites(b, evs, bodies, distinct, res.Outcomes, seqs, execs, state, commitTime, inserted)
	if err != nil {
		return nil, err
	}
	if head != nil && copyRows != nil {
		// Rows enough to copy: the head is read first, and the rest goes the usual way
		// inside the open transaction.
		err := head.sync(nil)
		head = nil
		if err != nil {
			return nil, w.moved(err, execs)
		}
	}
	if fast && guards > 0 && copyRows != nil {
		g := &pgx.Batch{QueuedQueries: b.QueuedQueries[:guards]}
		b.QueuedQueries = b.QueuedQueries[guards:]
		if err := w.run(ctx, conn, g, execAll(g.Len())); err != nil {
			return nil, w.moved(err, execs)
		}
	}
	if copyRows != nil {
		if _, err := conn.Conn().PgConn().CopyFrom(ctx, copyRows, sqlCopy); err != nil {
			if fast {
				return nil, w.moved(err, execs) // an event logged already
			}
			return nil, fmt.Errorf("append events: %w", err)
		}
		w.copies.Add(1)
	}
	for _, c := range cursors {
		if c.StreamSeq > 0 {
			b.Queue(sqlCursor, c.Group, c.Partition, int64(c.StreamSeq))
		}
	}
	// Under tests with failpoints the commit is a statement of its own, so a crash between
	// insert and commit can be simulated.
	split := failpoint.Active()
	if !split {
		b.Queue("COMMIT")
	}
	if head != nil {
		err := head.sync(b)
		head = nil
		if err != nil {
			return nil, w.moved(err, execs)
		}
	} else if b.Len() > 0 {
		if err := w.run(ctx, conn, b, execAll(b.Len())); err != nil {
			if fast {
				return nil, w.moved(err, execs)
			}
			return nil, fmt.Errorf("append events: %w", err)
		}
	}
	if split {
		if err := failpoint.Eval(failpoint.MaterializerAfterInsert); err != nil {
			return nil, err // the deferred rollback undoes the insert
		}
		if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
			return nil, fmt.Errorf("commit: %w", err)
		}
	}
	open = false
	if settle {
		markSettled(conn.Conn())
	}

	lastIDs := make(map[string]string, len(execs)) // execution -> id of its last event committed here
	for i, ev := range evs {
		ev.Seq, ev.CommitTime = 0, nil
		if res.Outcomes[i] == Committed {
			ev.Seq, ev.CommitTime = seqs[i], timestamppb.New(commitTime)
			res.Committed++
			if seqs[i] == state[ev.GetExecutionId()].seq {
				lastIDs[ev.GetExecutionId()] = ev.GetEventId()
			}
		}
	}
	w.noteHeads(execs, state, lastIDs)
	// The committed events ride in their execution's notice (in seq order: distinct is
	// grouped by execution in arrival order), within NoticeEventsBudget; not in the notice
	// of a commit that carried its own decision, whose readers need only its seq.
	carried := make(map[string][]*eventv1.Event, len(execs))
	for _, i := range distinct {
		if res.Outcomes[i] == Committed && !res.Inline[evs[i].GetExecutionId()] {
			carried[evs[i].GetExecutionId()] = append(carried[evs[i].GetExecutionId()], noticeCopy(evs[i]))
		}
	}
	for _, id := range execs {
		s := state[id]
		if !s.present || s.seq == 0 {
			continue
		}
		ended := domain.IsTerminalStatus(eventv1.ExecutionStatus(s.after))
		last := s.lastID // the head under the lock (known when the writer decides inline)
		if s.seq > s.lastSeq {
			last = lastIDs[id]
		}
		n := &eventv1.CommitNotice{ExecutionId: id, Tenant: s.tenant, Seq: s.seq, Terminal: ended, NeedsDecision: s.decide && !ended, LastEventId: last}
		if evs := carried[id]; fits(evs) {
			n.Events = evs
		}
		res.Notices = append(res.Notices, n)
	}
	for i, ev := range evs {
		if res.Outcomes[i] == Rejected {
			continue
		}
		switch cmds := ev.GetCommands(); {
		case ev.GetType() == domain.EventCommandIssued && ev.GetCommand() != nil:
			var enc []byte
			if bodies != nil {
				enc = commandbus.CommandOf(bodies[i])
			}
			res.Commands, res.EncodedCommands = append(res.Commands, ev.GetCommand()), append(res.EncodedCommands, enc)
		case ev.GetType() == domain.EventCommandsIssued && len(cmds) > 0:
			var enc [][]byte
			if bodies != nil {
				if enc = commandbus.CommandsOf(bodies[i]); len(enc) != len(cmds) {
					enc = nil // not the body the event decoded from: encode the commands again
				}
			}
			res.Commands = append(res.Commands, cmds...)
			if enc == nil {
				enc = make([][]byte, len(cmds))
			}
			res.EncodedCommands = append(res.EncodedCommands, enc...)
		}
	}
	res.Decided = len(evs) - nIn
	res.Outcomes = res.Outcomes[:nIn] // index-aligned with the input
	return res, nil
}

// lockAndProbe is a commit's first round trip: it opens the transaction, starts the
// executions the batch starts, locks the batch's executions (in id order) into state, and
// finds which of the batch's events (logged) and which of their rival outcomes
// (rivalLogged) are already in the log. settle is set when the round trip also gave the
// connection's session the writer's settings.
func (w *Writer) lockAndProbe(ctx context.Context, conn *pgxpool.Conn, evs []*eventv1.Event, distinct []int, execs []string, commitTime time.Time,
	state map[string]*execState, logged, rivalLogged map[int]bool, settle *bool) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	*settle = !settled(conn)
	execs0 := 1
	if *settle {
		b.Queue(sqlSettings) // the session's from this commit on (a rollback undoes them)
		execs0++
	}
	started := w.queueStarts(b, evs, distinct, commitTime)
	if w.Decide != nil {
		b.Queue(sqlLockLast, execs)
	} else {
		b.Queue(sqlLock, execs)
	}
	// The probe asks for each distinct event's id and then for the rival outcome of each
	// worker's outcome event (domain.OutcomeRival): rivalOf[k] is the input index whose
	// rival probe k-len(distinct) is.
	probeExec, probeID := make([]string, len(distinct)), make([]string, len(distinct))
	var rivalOf []int
	for k, i := range distinct {
		probeExec[k], probeID[k] = evs[i].GetExecutionId(), evs[i].GetEventId()
	}
	for _, i := range distinct {
		if r := domain.OutcomeRival(evs[i]); r != "" {
			probeExec, probeID, rivalOf = append(probeExec, evs[i].GetExecutionId()), append(probeID, r), append(rivalOf, i)
		}
	}
	b.Queue(sqlLogged, textArray(probeExec), textArray(probeID))
	err := w.run(ctx, conn, b, func(br pgx.BatchResults) error {
		for range execs0 + started {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			s := &execState{known: true}
			var id string
			if err := rows.Scan(&id, &s.tenant, &s.lastSeq, &s.status, &s.lastID); err != nil {
				rows.Close()
				return err
			}
			state[id] = s
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			var k int64
			if err := rows.Scan(&k); err != nil {
				rows.Close()
				return err
			}
			if k <= int64(len(distinct)) {
				logged[distinct[k-1]] = true
			} else {
				rivalLogged[rivalOf[k-1-int64(len(distinct))]] = true
			}
		}
		rows.Close()
		return rows.Err()
	})
	if err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	return nil

}

// NoticeEventsBudget bounds the encoded size of the events a commit notice carries; an
// execution's batch larger than this is announced without them, and its readers read the
// log instead.
const NoticeEventsBudget = 64 << 10

// settledKey marks, in a connection's custom data, that its session has the writer's
// settings (sqlSettings).
const settledKey = "noetl.writer.settled"

// settled reports whether conn's session has the writer's settings.
func settled(conn *pgxpool.Conn) bool {
	return conn.Conn().PgConn().CustomData()[settledKey] != nil
}

// markSettled records that c's session has the writer's settings: after the commit that
// gave them, or when the pool made it (Warm).
func markSettled(c *pgx.Conn) {
	c.PgConn().CustomData()[settledKey] = true
}

// noticeCopy is ev as a commit notice carries it: without the command a command.issued
// carries (its tools, input and render scope, for workers; no fold reads it), which would
// make the notice as large as the command again.
func noticeCopy(ev *eventv1.Event) *eventv1.Event {
	if ev.GetCommand() == nil && len(ev.GetCommands()) == 0 {
		return ev
	}
	return domain.FoldCopy(ev)
}

// fits reports whether evs can ride in one commit notice.
func fits(evs []*eventv1.Event) bool {
	n := 0
	for _, ev := range evs {
		if n += proto.Size(ev); n > NoticeEventsBudget {
			return false
		}
	}
	return true
}

// committedRival reports whether the rival outcome of ev (domain.OutcomeRival) is among
// the batch's events committed so far.
func committedRival(committed map[[2]string]bool, ev *eventv1.Event) bool {
	r := domain.OutcomeRival(ev)
	return r != "" && committed[[2]string{ev.GetExecutionId(), r}]
}

// run sends b and reads its results with read.
func (w *Writer) run(ctx context.Context, conn *pgxpool.Conn, b *pgx.Batch, read func(pgx.BatchResults) error) error {
	holdWire(conn.Conn(), wireSize(b)) // buffers.go
	br := conn.SendBatch(ctx, b)
	err := read(br)
	return errors.Join(err, br.Close())
}

// queueStarts queues the creation of the executions whose playbook.started is in the
// batch and returns how many statements it queued.
func (w *Writer) queueStarts(b *pgx.Batch, evs []*eventv1.Event, distinct []int, at time.Time) int {
	var ex, tn, path, parent, labels []string
	var ver []int64
	for _, i := range distinct {
		ev := evs[i]
		if ev.GetType() != domain.EventPlaybookStarted {
			continue
		}
		var p domain.StartedPayload
		_ = json.Unmarshal(ev.GetPayloadJson(), &p) // a malformed payload starts it unnamed
		ex, tn, path, ver, parent = append(ex, ev.GetExecutionId()), append(tn, ev.GetTenant()), append(path, p.Path), append(ver, p.Version), append(parent, ev.GetParentExecutionId())
		l, err := json.Marshal(p.Labels)
		if err != nil || p.Labels == nil {
			l = []byte("{}")
		}
		labels = append(labels, string(l))
	}
	if len(ex) == 0 {
		return 0
	}
	b.Queue(sqlStart, ex, tn, path, ver, parent, at, labels)
	return 1
}

// queueWrites queues the insert of the committed events, or returns them as a COPY stream
// (copyStream) when there are copyMin or more or their bodies reach copyBytes, and queues
// the projection updates. The first inserted events of evs are not inserted again (a head
// start inserted them, headstart.go), though their timers are projected.
func (w *Writer) queueWrites(b *pgx.Batch, evs []*eventv1.Event, bodies [][]byte, distinct []int, outcomes []Outcome, seqs []int64,
	execs []string, state map[string]*execState, at time.Time, inserted int) (*copyStream, error) {
	var rows eventRows
	var tEx, tID, tTn, tStep, fEx, fID, retired []string
	var tDue []time.Time
	for _, i := range distinct {
		e := evs[i]
		if outcomes[i] != Committed {
			continue
		}
		if i >= inserted {
			if err := rows.add(e, bodies, i, seqs[i]); err != nil {
				return nil, err
			}
		}
		switch e.GetType() {
		case domain.EventTimerScheduled, domain.EventTimerFired:
			var p domain.TimerPayload
			if err := json.Unmarshal(e.GetPayloadJson(), &p); err != nil || p.TimerID == "" {
				break // no timer to schedule or fire
			}
			if e.GetType() == domain.EventTimerScheduled {
				tEx, tID, tTn, tDue, tStep = append(tEx, e.GetExecutionId()), append(tID, p.TimerID), append(tTn, e.GetTenant()), append(tDue, p.DueAt), append(tStep, e.GetStep())
			} else {
				fEx, fID = append(fEx, e.GetExecutionId()), append(fID, p.TimerID)
			}
		case domain.EventPlaybookCompleted, domain.EventPlaybookFailed, domain.EventPlaybookCancelled:
			retired = append(retired, e.GetExecutionId())
		}
	}
	var copyRows *copyStream
	switch r := &rows; {
	case len(r.ex) >= copyMin || r.bytes >= copyBytes:
		copyRows = copyRowsOf(r, at) // copydata.go
	case len(r.ex) > 0:
		r.queue(b, at)
	}
	// The projection: each execution's counters after the batch.
	var pEx []string
	var pSeq []int64
	var pStatus []int16
	var pEnded []bool
	for _, id := range execs {
		s := state[id]
		if !s.known || s.seq == s.lastSeq {
			continue
		}
		pEx, pSeq, pStatus = append(pEx, id), append(pSeq, s.seq), append(pStatus, s.after)
		pEnded = append(pEnded, s.after != s.status && domain.IsTerminalStatus(eventv1.ExecutionStatus(s.after)))
	}
	switch len(pEx) {
	case 0:
	case 1:
		b.Queue(sqlProjectOne, pEx[0], pSeq[0], pStatus[0], pEnded[0], at)
	default:
		b.Queue(sqlProject, pEx, pSeq, pStatus, pEnded, at)
	}
	// Timers: timer.scheduled inserts its row, timer.fired marks it fired, a terminal event
	// retires the execution's pending ones (in that order, so a timer scheduled and fired
	// or retired in one batch ends fired).
	if len(tEx) > 0 {
		b.Queue(sqlTimerScheduled, tEx, tID, tTn, tDue, tStep)
	}
	if len(fEx) > 0 {
		b.Queue(sqlTimerFired, fEx, fID)
	}
	if len(retired) > 0 {
		b.Queue(sqlTimerRetired, retired)
	}
	return copyRows, nil
}

// eventRows are the columns of events to insert into the log.
type eventRows struct {
	ex, ev, tn, ty, st, cmd []string
	seq                     []int64
	body                    [][]byte
	bytes                   int // the bodies' total size
}

// add adds evs[i], committed at seq. Its seq and commit time live in columns; the stored
// body is the event as published (bodies[i], when not nil and the event was published
// without them), else the event marshalled without them.
func (r *eventRows) add(e *eventv1.Event, bodies [][]byte, i int, seq int64) error {
	var bb []byte
	if bodies != nil && bodies[i] != nil && e.GetSeq() == 0 && e.GetCommitTime() == nil {
		bb = bodies[i]
	} else {
		e.Seq, e.CommitTime = 0, nil // restored when committed
		var err error
		if bb, err = proto.Marshal(e); err != nil {
			return err
		}
	}
	r.ex, r.seq, r.ev = append(r.ex, e.GetExecutionId()), append(r.seq, seq), append(r.ev, e.GetEventId())
	r.tn, r.ty, r.st, r.cmd = append(r.tn, e.GetTenant()), append(r.ty, e.GetType()), append(r.st, e.GetStep()), append(r.cmd, e.GetCommandId())
	r.body, r.bytes = append(r.body, bb), r.bytes+len(bb)
	return nil
}

// queue queues the insert of the rows, committed at at: as rows of values when they are
// few (keyed.go), else as arrays.
func (r *eventRows) queue(b *pgx.Batch, at time.Time) {
	n := len(r.ex)
	if n == 0 {
		return
	}
	if n > valuesMax {
		b.Queue(sqlInsert, textArray(r.ex), int8Array(r.seq), textArray(r.ev), textArray(r.tn), textArray(r.ty), textArray(r.st), textArray(r.cmd), at, byteaArray(r.body)) // arrays.go
		return
	}
	args := make([]any, 0, 1+insertColumns*n)
	args = append(args, at)
	for k := range n {
		args = append(args, r.ex[k], r.seq[k], r.ev[k], r.tn[k], r.ty[k], r.st[k], r.cmd[k], byteaValue(r.body[k])) // arrays.go
	}
	b.Queue(sqlInsertValues[n], args...)
}

// stopsCommands reports whether ev, committed, stops the execution's running commands:
// its cancellation, or its failure at its deadline (Result.Cancelled).
func stopsCommands(ev *eventv1.Event) bool {
	return ev.GetType() == domain.EventPlaybookCancelled || ev.GetType() == domain.EventPlaybookFailed && ev.GetError().GetCode() == "deadline_exceeded"
}

// terminalStatus is the execution status a terminal event type ends an execution with.
func terminalStatus(eventType string) (int16, bool) {
	switch eventType {
	case domain.EventPlaybookCompleted:
		return int16(eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED), true
	case domain.EventPlaybookFailed:
		return int16(eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED), true
	case domain.EventPlaybookCancelled:
		return int16(eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED), true
	}
	return 0, false
}
