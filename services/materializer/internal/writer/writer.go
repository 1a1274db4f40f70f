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
}

// Writer commits event batches.
type Writer struct {
	DB *pgxpool.Pool
	// Now returns the commit time; tests may fix it.
	Now func() time.Time
}

type execRow struct {
	tenant  string
	lastSeq int64
	status  int16
	ended   bool
	touched bool
	newSeq  int64
	endedAt *time.Time
}

// Commit writes evs in one transaction.
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
	var ids []string
	seenExec := map[string]bool{}
	var eventIDs []string
	for _, ev := range evs {
		if !seenExec[ev.GetExecutionId()] {
			seenExec[ev.GetExecutionId()] = true
			ids = append(ids, ev.GetExecutionId())
		}
		eventIDs = append(eventIDs, ev.GetEventId())
	}
	sort.Strings(ids) // lock order: avoids deadlocks between concurrent writers

	err := pgx.BeginFunc(ctx, w.DB, func(tx pgx.Tx) error {
		// New executions.
		var sIDs, sTenants, sPaths, sParents []string
		var sVersions []int64
		for _, ev := range evs {
			if ev.GetType() != domain.EventPlaybookStarted {
				continue
			}
			p, err := startedOf(ev)
			if err != nil {
				continue
			}
			sIDs = append(sIDs, ev.GetExecutionId())
			sTenants = append(sTenants, ev.GetTenant())
			sPaths = append(sPaths, p.Path)
			sVersions = append(sVersions, p.Version)
			sParents = append(sParents, ev.GetParentExecutionId())
		}
		if len(sIDs) > 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO noetl.execution (execution_id, tenant, playbook_path, playbook_version, parent_execution_id, started_at)
				SELECT x.id, x.tenant, x.path, x.version, x.parent, $6 FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[]) AS x(id, tenant, path, version, parent)
				ON CONFLICT (execution_id) DO NOTHING`, sIDs, sTenants, sPaths, sVersions, sParents, commitTime); err != nil {
				return fmt.Errorf("insert executions: %w", err)
			}
		}
		// Lock the executions and find duplicates in one round trip.
		b := &pgx.Batch{}
		b.Queue(`SELECT execution_id, tenant, last_seq, status FROM noetl.execution WHERE execution_id = ANY($1) ORDER BY execution_id FOR UPDATE`, ids)
		b.Queue(`SELECT execution_id, event_id FROM noetl.event WHERE execution_id = ANY($1) AND event_id = ANY($2)`, ids, eventIDs)
		br := tx.SendBatch(ctx, b)
		execs := map[string]*execRow{}
		rows, err := br.Query()
		if err != nil {
			_ = br.Close()
			return fmt.Errorf("lock executions: %w", err)
		}
		for rows.Next() {
			var id string
			r := &execRow{}
			if err := rows.Scan(&id, &r.tenant, &r.lastSeq, &r.status); err != nil {
				rows.Close()
				_ = br.Close()
				return err
			}
			r.ended = isTerminalStatus(r.status)
			r.newSeq = r.lastSeq
			execs[id] = r
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			_ = br.Close()
			return err
		}
		existing := map[[2]string]bool{}
		rows, err = br.Query()
		if err != nil {
			_ = br.Close()
			return fmt.Errorf("find duplicates: %w", err)
		}
		for rows.Next() {
			var e, id string
			if err := rows.Scan(&e, &id); err != nil {
				rows.Close()
				_ = br.Close()
				return err
			}
			existing[[2]string{e, id}] = true
		}
		rows.Close()
		if err := br.Close(); err != nil {
			return err
		}

		// Assign seqs in arrival order.
		var out [][]any
		inBatch := map[[2]string]bool{}
		for i, ev := range evs {
			k := [2]string{ev.GetExecutionId(), ev.GetEventId()}
			r := execs[ev.GetExecutionId()]
			switch {
			case existing[k] || inBatch[k]:
				res.Outcomes[i] = Duplicate
				if r != nil {
					r.touched = true
				}
				continue
			case r == nil, r.tenant != ev.GetTenant(), r.ended:
				res.Outcomes[i] = Rejected
				continue
			}
			inBatch[k] = true
			r.newSeq++
			r.touched = true
			ev.Seq = r.newSeq
			ev.CommitTime = timestamppb.New(commitTime)
			body, err := proto.Marshal(ev)
			if err != nil {
				return err
			}
			out = append(out, []any{ev.GetExecutionId(), ev.GetSeq(), ev.GetEventId(), ev.GetTenant(), ev.GetType(), ev.GetStep(), ev.GetCommandId(), commitTime, body})
			res.Outcomes[i] = Committed
			if domain.IsTerminal(ev.GetType()) {
				r.ended = true
				r.status = statusOf(ev.GetType())
				t := commitTime
				r.endedAt = &t
			}
		}
		if len(out) > 0 {
			n, err := tx.CopyFrom(ctx, pgx.Identifier{"noetl", "event"},
				[]string{"execution_id", "seq", "event_id", "tenant", "type", "step", "command_id", "committed_at", "body"},
				pgx.CopyFromRows(out))
			if err != nil {
				return fmt.Errorf("copy events: %w", err)
			}
			res.Committed = int(n)
			var uIDs []string
			var uSeqs []int64
			var uStatus []int16
			var uEnded []*time.Time
			for _, id := range ids {
				r := execs[id]
				if r == nil || r.newSeq == r.lastSeq {
					continue
				}
				uIDs = append(uIDs, id)
				uSeqs = append(uSeqs, r.newSeq)
				uStatus = append(uStatus, r.status)
				uEnded = append(uEnded, r.endedAt)
			}
			if _, err := tx.Exec(ctx, `UPDATE noetl.execution e SET last_seq = x.seq, status = x.status, ended_at = COALESCE(x.ended, e.ended_at), updated_at = $5
				FROM unnest($1::text[], $2::bigint[], $3::smallint[], $4::timestamptz[]) AS x(id, seq, status, ended)
				WHERE e.execution_id = x.id`, uIDs, uSeqs, uStatus, uEnded, commitTime); err != nil {
				return fmt.Errorf("update executions: %w", err)
			}
		}
		for _, id := range ids {
			r := execs[id]
			if r == nil || !r.touched {
				continue
			}
			res.Notices = append(res.Notices, &eventv1.CommitNotice{ExecutionId: id, Tenant: r.tenant, Seq: r.newSeq, Terminal: r.ended})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, ev := range evs {
		if ev.GetType() == domain.EventCommandIssued && ev.GetCommand() != nil && res.Outcomes[i] != Rejected {
			if r := res.Outcomes[i]; r == Committed || r == Duplicate {
				res.Commands = append(res.Commands, ev.GetCommand())
			}
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

func statusOf(t string) int16 {
	switch t {
	case domain.EventPlaybookCompleted:
		return int16(eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED)
	case domain.EventPlaybookFailed:
		return int16(eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED)
	case domain.EventPlaybookCancelled:
		return int16(eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED)
	}
	return int16(eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING)
}

func isTerminalStatus(s int16) bool {
	return domain.IsTerminalStatus(eventv1.ExecutionStatus(s))
}
