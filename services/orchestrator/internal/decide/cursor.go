package decide

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
)

// A cursor loop drains a work queue (loop.cursor). Entering the step issues one claim
// command per slot (max_in_flight): the cursor's postgres claim, with {{ cursor.* }} in
// scope. A claim's rows form the slot's frame; the decision issues a body command (the
// step's tools, the row or the frame's rows bound to the iterator) per row or per frame,
// each with a lease timer, and once the frame's bodies are done (or failed
// max_attempts times) claims again for the slot. A slot whose claim returns no rows is
// drained; once every slot is, the fold completes the step with the summary and the
// decision routes it with a drain step.exit. The fold (domain/cursor.go) keeps the
// bookkeeping; this file only turns it into commands.

// ErrClaimRowsMissing is returned when a decision needs the rows of a claim held by
// reference that the caller did not load (see NeededClaimRows).
var ErrClaimRowsMissing = errors.New("cursor claim rows not loaded")

// NeededClaimRows returns the references of the claims whose rows a decision on st may
// read (frames with bodies to issue), in step and slot order.
func NeededClaimRows(st *sbv1.ExecutionState) []*eventv1.ResultRef {
	return ActiveOf(st).NeededClaimRows()
}

// NeededClaimRows is the package's NeededClaimRows on a's state.
func (a *Active) NeededClaimRows() []*eventv1.ResultRef {
	var out []*eventv1.ResultRef
	for _, name := range a.names {
		s := a.st.GetSteps()[name]
		if s.GetCursor() == nil || s.GetStatus() != eventv1.StepStatus_STEP_STATUS_RUNNING {
			continue
		}
		for _, slot := range s.GetCursor().GetSlots() {
			if f := slot.GetFrame(); f.GetRowsRef() != nil && frameHasWork(f) {
				out = append(out, f.GetRowsRef())
			}
		}
	}
	return out
}

// frameHasWork reports whether a frame has bodies to issue.
func frameHasWork(f *sbv1.CursorFrame) bool {
	if len(f.GetUnits()) == 0 {
		return true
	}
	for _, u := range f.GetUnits() {
		if !u.GetDone() && !u.GetFailed() && (u.GetAttempt() == 0 || u.GetDue()) {
			return true
		}
	}
	return false
}

// cursorSlots is how many claim slots a cursor loop runs: max_in_flight (1 when unset).
func (d *decider) cursorSlots(ps *playbook.Step) (int32, error) {
	n := int64(ps.Loop.MaxInFlight)
	if ps.Loop.MaxInFlightExpr != "" {
		v, err := d.c.Renderer.Eval(ps.Loop.MaxInFlightExpr, d.vars(ps))
		if err != nil {
			return 0, &Error{Step: ps.Name, Msg: fmt.Sprintf("loop.spec.max_in_flight: %v", err)}
		}
		switch x := v.(type) {
		case int64:
			n = x
		case float64:
			n = int64(x)
		default:
			return 0, &Error{Step: ps.Name, Msg: fmt.Sprintf("loop.spec.max_in_flight must render to a number, got %T", v)}
		}
	}
	if n <= 0 {
		n = 1
	}
	if n > playbook.CursorMaxSlots {
		return 0, &Error{Step: ps.Name, Msg: fmt.Sprintf("loop.spec.max_in_flight: %d is over the most claim slots a cursor loop runs (%d)", n, playbook.CursorMaxSlots)}
	}
	return int32(n), nil
}

// enterCursor emits the step.enter of a cursor loop's epoch and the first claim of each
// slot.
func (d *decider) enterCursor(ps *playbook.Step, epoch int32, enterID, cause string) error {
	slots, err := d.cursorSlots(ps)
	if err != nil {
		return err
	}
	f := ps.Loop.Cursor.Frame
	payload, err := json.Marshal(domain.EnterPayload{Epoch: epoch, Cursor: &domain.CursorPayload{
		Iterator: ps.Loop.Iterator, Slots: slots, PerRow: f.Process != playbook.ProcessFrame,
		MaxAttempts: int32(f.MaxAttempts), LeaseSeconds: int32(f.LeaseSeconds),
	}})
	if err != nil {
		return err
	}
	d.emit(&eventv1.Event{EventId: enterID, Type: domain.EventStepEnter, Step: ps.Name, CauseEventId: cause, PayloadJson: payload, Iteration: &eventv1.Iteration{Epoch: epoch, Index: -1}})
	d.entered[ps.Name] = true
	d.status[ps.Name] = eventv1.StepStatus_STEP_STATUS_RUNNING
	delete(d.fired, ps.Name)
	d.running++
	for w := range slots {
		if err := d.issueClaim(ps, epoch, w, 1, enterID); err != nil {
			return err
		}
	}
	return nil
}

// advanceCursors issues the next commands of running cursor loops: a claim for each idle
// slot that is not drained, and the bodies of each frame that are due.
func (d *decider) advanceCursors() error {
	for _, name := range d.active.names {
		s := d.st.GetSteps()[name]
		if s.GetCursor() == nil || s.GetStatus() != eventv1.StepStatus_STEP_STATUS_RUNNING || d.stepStatus(name) != eventv1.StepStatus_STEP_STATUS_RUNNING || d.entered[name] {
			continue
		}
		ps := d.c.Playbook.Step(name)
		if ps == nil || ps.Loop == nil || ps.Loop.Cursor == nil {
			continue
		}
		for w, slot := range s.GetCursor().GetSlots() {
			if slot.GetDrained() || slot.GetClaimCommandId() != "" {
				continue
			}
			if f := slot.GetFrame(); f != nil {
				if err := d.renewLeases(ps, s, int32(w), f); err != nil { // cursorlease.go
					return err
				}
				over, err := d.issueBodies(ps, s, int32(w), f)
				if err != nil {
					return err
				}
				if !over {
					continue
				}
				// The frame ended in this decision (its last units refused): nothing would
				// decide again on the fold of a decision's own events, so claim now.
			}
			if err := d.checkEvents(name, "issuing a claim"); err != nil {
				return err
			}
			if err := d.issueClaim(ps, s.GetEpoch(), int32(w), slot.GetClaim()+1, d.st.GetLastEventId()); err != nil {
				return err
			}
		}
	}
	return nil
}

// issueClaim emits the command.issued of claim number claim of slot.
func (d *decider) issueClaim(ps *playbook.Step, epoch, slot, claim int32, cause string) error {
	id := domain.CursorClaimID(d.st.GetExecutionId(), ps.Name, epoch, slot, claim)
	iter := &eventv1.Iteration{Epoch: epoch, Index: domain.CursorIndex(slot, -1)}
	f := ps.Loop.Cursor.Frame
	cmd, err := d.command(ps, id, iter, 1, nil)
	if err != nil {
		return err
	}
	cfg, err := json.Marshal(ps.Loop.Cursor.Config)
	if err != nil {
		return &Error{Step: ps.Name, Msg: "loop.cursor is not JSON-encodable: " + err.Error()}
	}
	cmd.Tools = []*eventv1.ToolCall{{Kind: ps.Loop.Cursor.Kind, ConfigJson: cfg}}
	cmd.InputJson = []byte("{}")
	cmd.OutputSelect = nil
	sc := d.scope(ps)
	sc.Iterator = "cursor"
	sc.Iter = map[string]any{"cursor": map[string]any{
		"slot": slot, "claim": claim, "max_rows": f.MaxRows, "lease_seconds": f.LeaseSeconds,
		"max_attempts": f.MaxAttempts, "process": f.Process, "max_bytes": f.MaxBytes,
	}, "_index": slot}
	if cmd.ContextJson, err = json.Marshal(sc); err != nil {
		return err
	}
	return d.issueCursor(ps.Name, cmd, domain.CursorIssue{Phase: domain.CursorPhaseClaim, Slot: slot, Claim: claim}, cause)
}

// issueBodies emits the bodies of frame f (of slot) that are due: each unit's first
// attempt, and the next attempt of a unit whose attempt failed or ran out its lease. A unit
// whose rows are over loop.spec.frame.max_bytes is refused instead (frameParts first cuts a
// frame processed whole into sub-frames within it, so only a row over it alone is); over
// reports whether that ended the frame, every unit of it done or failed.
func (d *decider) issueBodies(ps *playbook.Step, s *sbv1.StepState, slot int32, f *sbv1.CursorFrame) (over bool, _ error) {
	if !frameHasWork(f) {
		return false, nil
	}
	c := s.GetCursor()
	rows := make([]json.RawMessage, len(f.GetRowsJson()))
	for i, r := range f.GetRowsJson() {
		rows[i] = r
	}
	if ref := f.GetRowsRef(); ref != nil {
		var ok bool
		if rows, ok = d.in.ClaimRows[ref.GetUri()]; !ok {
			return false, fmt.Errorf("step %s: %w: %s", ps.Name, ErrClaimRowsMissing, ref.GetUri())
		}
	}
	units := f.GetUnits()
	issue := domain.CursorIssue{Phase: domain.CursorPhaseBody, Slot: slot, Claim: f.GetClaim()}
	if len(units) == 0 {
		// A frame by reference that did not say its row count: the rows say it, and its
		// bodies tell the fold.
		n := 1
		if c.GetPerRow() {
			n = len(rows)
		}
		if len(rows) == 0 {
			return false, &Error{Step: ps.Name, Msg: "the cursor's claim answered a stored result without rows"}
		}
		if len(rows) > domain.CursorMaxFrameRows {
			return false, &Error{Step: ps.Name, Msg: fmt.Sprintf("the cursor's claim returned %d rows, over the most a frame holds (%d); limit it with {{ cursor.max_rows }}", len(rows), domain.CursorMaxFrameRows)}
		}
		issue.Units, issue.Rows = int32(n), int32(len(rows))
		units = make([]*sbv1.CursorUnit, n)
		for i := range units {
			units[i] = &sbv1.CursorUnit{LeaseFrom: f.GetClaimedTime()}
		}
	} else if c.GetPerRow() && len(rows) < len(units) {
		return false, &Error{Step: ps.Name, Msg: fmt.Sprintf("the cursor's claim holds %d rows, its frame %d", len(rows), len(units))}
	}
	limit := ps.Loop.Cursor.Frame.MaxBytes
	if !c.GetPerRow() {
		var err error
		if units, issue.Parts, err = frameParts(ps, units, rows); err != nil { // cursorlease.go
			return false, err
		}
	}
	// row_concurrency: at most that many of the frame's bodies in flight at once.
	budget := len(units)
	if rc := ps.Loop.Cursor.Frame.RowConcurrency; rc > 0 && c.GetPerRow() {
		budget = rc
		for _, u := range units {
			if u.GetAttempt() > 0 && !u.GetDone() && !u.GetFailed() && !u.GetDue() {
				budget--
			}
		}
	}
	refused := 0
	for i, u := range units {
		if u.GetDone() || u.GetFailed() || (u.GetAttempt() > 0 && !u.GetDue()) {
			continue
		}
		unit := int32(i)
		first, count := unitSpan(c, u, unit, len(rows))
		size := rowsBytes(rows[first : first+count])
		tooLarge := limit > 0 && size > limit
		if !tooLarge && budget <= 0 {
			break
		}
		if err := d.checkEvents(ps.Name, "issuing a cursor body"); err != nil {
			return false, err
		}
		attempt := u.GetAttempt() + 1
		id := domain.CursorBodyID(d.st.GetExecutionId(), ps.Name, s.GetEpoch(), slot, f.GetClaim(), unit, attempt)
		iter := &eventv1.Iteration{Epoch: s.GetEpoch(), Index: domain.CursorIndex(slot, unit)}
		cause := f.GetClaimEventId()
		if u.GetDueEventId() != "" {
			cause = u.GetDueEventId()
		}
		issue.Unit, issue.Attempt = unit, attempt
		if tooLarge {
			// No worker could take it: the unit fails now, counted as an attempt.
			what := fmt.Sprintf("row %d", first)
			if count > 1 {
				what = fmt.Sprintf("rows %d to %d", first, first+count-1)
			}
			issue.Refused = fmt.Sprintf("%s of the frame (slot %d, claim %d): %d bytes as JSON, over loop.spec.frame.max_bytes (%d); its body was not issued",
				what, slot, f.GetClaim(), size, limit)
			if err := d.refuseCursor(ps.Name, id, iter, issue, cause); err != nil {
				return false, err
			}
			issue.Refused, issue.Parts = "", nil
			refused++
			continue
		}
		budget--
		var bound any
		if c.GetPerRow() {
			if err := domain.DecodeJSON(rows[i], &bound); err != nil {
				return false, err
			}
		} else {
			list := make([]any, count)
			for j, r := range rows[first : first+count] {
				if err := domain.DecodeJSON(r, &list[j]); err != nil {
					return false, err
				}
			}
			bound = list
		}
		n := len(rows)
		if !c.GetPerRow() {
			n = int(count) // a sub-frame's rows, when max_bytes split the frame
		}
		cmd, err := d.command(ps, id, iter, attempt, map[string]any{
			ps.Loop.Iterator: bound, "_index": unit, "_slot": slot, "_claim": f.GetClaim(), "_attempt": attempt, "_rows": n,
		})
		if err != nil {
			return false, err
		}
		bodyBounds(cmd, ps.Loop.Cursor.Frame) // cursorlease.go
		if err := d.issueCursor(ps.Name, cmd, issue, cause); err != nil {
			return false, err
		}
		issue.Parts = nil // the fold split the frame at its first body
		if secs := c.GetLeaseSeconds(); secs > 0 {
			due := u.GetLeaseFrom().AsTime().Add(time.Duration(secs) * time.Second)
			timerID := domain.CursorLeaseTimerID(slot, unit, id)
			payload, _ := json.Marshal(domain.TimerPayload{TimerID: timerID, DueAt: due, Attempt: attempt})
			d.emit(&eventv1.Event{EventId: domain.EventID(id, domain.EventTimerScheduled), Type: domain.EventTimerScheduled, Step: ps.Name, Attempt: attempt, CauseEventId: cause, PayloadJson: payload})
		}
	}
	if refused == 0 {
		return false, nil
	}
	// The refused units failed; the frame is over when no other unit is left.
	left := 0
	for _, u := range units {
		if !u.GetDone() && !u.GetFailed() {
			left++
		}
	}
	return left == refused, nil
}

// refuseCursor emits the command.issued of a cursor body that is not sent (issue.Refused
// says why): it carries no command, so no worker runs it, the commands stream never holds
// it and the reconciler has nothing to publish again; the fold fails its unit.
func (d *decider) refuseCursor(step, id string, iter *eventv1.Iteration, issue domain.CursorIssue, cause string) error {
	payload, err := json.Marshal(domain.IssuedPayload{Cursor: &issue})
	if err != nil {
		return err
	}
	d.emit(&eventv1.Event{EventId: domain.EventID(id, domain.EventCommandIssued), Type: domain.EventCommandIssued, Step: step, CommandId: id, Attempt: issue.Attempt,
		CauseEventId: cause, Iteration: iter, PayloadJson: payload})
	return nil
}

// issueCursor emits the command.issued of a cursor command, with its place in the loop.
func (d *decider) issueCursor(step string, cmd *eventv1.Command, issue domain.CursorIssue, cause string) error {
	payload, err := json.Marshal(domain.IssuedPayload{Cursor: &issue})
	if err != nil {
		return err
	}
	issuedID := domain.EventID(cmd.GetCommandId(), domain.EventCommandIssued)
	cmd.IssuedEventId = issuedID
	d.emit(&eventv1.Event{EventId: issuedID, Type: domain.EventCommandIssued, Step: step, CommandId: cmd.GetCommandId(), Attempt: cmd.GetAttempt(),
		CauseEventId: cause, Iteration: cmd.GetIteration(), Command: cmd, PayloadJson: payload})
	return nil
}

// cursorDrained reports whether step name is a cursor loop that completed by draining
// (its step.exit says so).
func (d *decider) cursorDrained(name string) bool {
	s := d.st.GetSteps()[name]
	return s.GetCursor() != nil && s.GetStatus() == eventv1.StepStatus_STEP_STATUS_COMPLETED
}
