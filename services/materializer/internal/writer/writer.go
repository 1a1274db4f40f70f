// Package writer is the materializer's commit path: it turns a batch of transported events
// into one Postgres transaction that dedupes them, assigns each execution a gap-free seq,
// inserts them with COPY and updates the execution projection.
package writer

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/failpoint"
)

// Outcome is what happened to one input event.
type Outcome int

// Outcomes.
const (
	Committed Outcome = iota // inserted with a new seq
	Duplicate                // already in the log
	Rejected                 // dropped: execution terminal, unknown, or tenant mismatch
)

// Result describes a committed batch.
type Result struct {
	// Outcomes, index-aligned with the input.
	Outcomes []Outcome
	// Notices has one entry per execution that gained events (or saw duplicates, so a lost
	// notice is re-sent).
	Notices []*eventv1.CommitNotice
	// Commands are the commands of command.issued events in the batch that are in the log
	// (newly or before), in order. Re-forwarding a duplicate's command is safe: the command
	// publish is deduplicated by its id, and commands are at-least-once anyway.
	Commands []*eventv1.Command
	// Committed counts events inserted.
	Committed int
	// Cancelled lists executions whose playbook.cancelled was committed (or redelivered)
	// in this batch.
	Cancelled []string
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Writer commits event batches.
type Writer struct {
	DB *pgxpool.Pool
	// Now returns the commit time; tests may fix it.
	Now func() time.Time
}

// Commit writes evs in one statement: noetl.append_events (set-based since migration 00008) dedupes, locks
// and sequences the whole batch server-side, so a commit costs one round trip.
func (w *Writer) Commit(ctx context.Context, evs []*eventv1.Event) (*Result, error) {
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	res := &Result{Outcomes: make([]Outcome, len(evs))}
	if len(evs) == 0 {
		return res, nil
	}
	commitTime := now().UTC()
	// Group by execution, keeping each execution's arrival order.
	order := make([]int, len(evs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return evs[order[a]].GetExecutionId() < evs[order[b]].GetExecutionId() })
	n := len(evs)
	execs, ids, tenants, types, steps, cmds := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	paths, parents, timers := make([]string, n), make([]string, n), make([]string, n)
	dues := make([]*time.Time, n)
	versions := make([]int64, n)
	bodies := make([][]byte, n)
	for k, i := range order {
		ev := evs[i]
		execs[k], ids[k], tenants[k], types[k], steps[k], cmds[k] = ev.GetExecutionId(), ev.GetEventId(), ev.GetTenant(), ev.GetType(), ev.GetStep(), ev.GetCommandId()
		parents[k] = ev.GetParentExecutionId()
		switch ev.GetType() {
		case domain.EventPlaybookStarted:
			if p, err := startedOf(ev); err == nil {
				paths[k], versions[k] = p.Path, p.Version
			}
		case domain.EventTimerScheduled, domain.EventTimerFired:
			var p domain.TimerPayload
			if err := json.Unmarshal(ev.GetPayloadJson(), &p); err == nil {
				due := p.DueAt
				timers[k], dues[k] = p.TimerID, &due
			}
		}
		// seq and commit time live in columns; the stored body is the event as published.
		ev.Seq, ev.CommitTime = 0, nil
		b, err := proto.Marshal(ev)
		if err != nil {
			return nil, err
		}
		bodies[k] = b
	}
	// One statement in autocommit is one round trip. Under tests with failpoints the same
	// statement runs in an explicit transaction so a crash between insert and commit can
	// be simulated.
	var q querier = w.DB
	var tx pgx.Tx
	if failpoint.Active() {
		t, err := w.DB.Begin(ctx)
		if err != nil {
			return nil, err
		}
		defer func() { _ = t.Rollback(context.WithoutCancel(ctx)) }()
		q, tx = t, t
	}
	rows, err := q.Query(ctx, `SELECT o_idx, o_seq, o_outcome, o_exec_seq, o_exec_status FROM noetl.append_events($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13)`,
		execs, ids, tenants, types, steps, cmds, bodies, paths, versions, parents, commitTime, timers, dues)
	if err != nil {
		return nil, fmt.Errorf("append events: %w", err)
	}
	type execAfter struct {
		seq     int64
		status  int16
		tenant  string
		decide  bool
		present bool
	}
	after := map[string]*execAfter{}
	var seen []string
	for rows.Next() {
		var idx int32
		var seq, execSeq int64
		var outcome, status int16
		if err := rows.Scan(&idx, &seq, &outcome, &execSeq, &status); err != nil {
			rows.Close()
			return nil, err
		}
		i := order[idx-1]
		ev := evs[i]
		res.Outcomes[i] = Outcome(outcome)
		if outcome != int16(Rejected) && ev.GetType() == domain.EventPlaybookCancelled {
			res.Cancelled = append(res.Cancelled, ev.GetExecutionId())
		}
		if outcome == int16(Committed) {
			ev.Seq = seq
			ev.CommitTime = timestamppb.New(commitTime)
			res.Committed++
		}
		a := after[ev.GetExecutionId()]
		if a == nil {
			a = &execAfter{}
			after[ev.GetExecutionId()] = a
			seen = append(seen, ev.GetExecutionId())
		}
		a.seq, a.status = execSeq, status
		if outcome != int16(Rejected) {
			a.present = true
			a.tenant = ev.GetTenant()
			a.decide = a.decide || !domain.IsDecisionOutput(ev.GetType())
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("append events: %w", err)
	}
	if tx != nil {
		if err := failpoint.Eval(failpoint.MaterializerAfterInsert); err != nil {
			return nil, err // the deferred rollback undoes the insert
		}
		if err := tx.Commit(ctx); err != nil {
			return nil, fmt.Errorf("commit: %w", err)
		}
	}
	for _, id := range seen {
		a := after[id]
		if !a.present || a.seq == 0 {
			continue
		}
		ended := domain.IsTerminalStatus(eventv1.ExecutionStatus(a.status))
		res.Notices = append(res.Notices, &eventv1.CommitNotice{ExecutionId: id, Tenant: a.tenant, Seq: a.seq, Terminal: ended, NeedsDecision: a.decide && !ended})
	}
	for i, ev := range evs {
		if ev.GetType() == domain.EventCommandIssued && ev.GetCommand() != nil && res.Outcomes[i] != Rejected {
			res.Commands = append(res.Commands, ev.GetCommand())
		}
	}
	return res, nil
}

func startedOf(ev *eventv1.Event) (*domain.StartedPayload, error) {
	var p domain.StartedPayload
	if err := json.Unmarshal(ev.GetPayloadJson(), &p); err != nil {
		return nil, err
	}
	return &p, nil
}
