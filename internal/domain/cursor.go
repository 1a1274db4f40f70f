package domain

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
)

// A cursor loop (loop.cursor) drains a work queue. Its state (sbv1.CursorState) is folded
// here: claim slots, the frame of rows each slot holds, each row's (or frame's) body
// attempts and their leases, and the counts the step's result summarises. The fold
// identifies a worker's event by its iteration index (CursorIndex: the slot and the unit)
// and checks its command id against the id the decision derived (CursorClaimID,
// CursorBodyID), so events of an older frame, attempt or epoch change nothing.

// CursorPayload is the cursor part of a cursor loop's step.enter.
type CursorPayload struct {
	Iterator     string `json:"iterator"`
	Slots        int32  `json:"slots"`
	PerRow       bool   `json:"per_row,omitempty"`
	MaxAttempts  int32  `json:"max_attempts"`
	LeaseSeconds int32  `json:"lease_seconds,omitempty"`
}

// Cursor command phases (CursorIssue.Phase).
const (
	CursorPhaseClaim = "claim"
	CursorPhaseBody  = "body"
)

// CursorIssue is the payload of a cursor loop's command.issued: which slot, claim, unit
// and attempt the command is.
type CursorIssue struct {
	Phase   string `json:"phase"`
	Slot    int32  `json:"slot"`
	Claim   int32  `json:"claim"`
	Unit    int32  `json:"unit,omitempty"`
	Attempt int32  `json:"attempt,omitempty"`
	// Units and Rows are the frame's body units and rows, on the bodies of a frame
	// claimed by reference whose row count the claim's reference did not say.
	Units int32 `json:"units,omitempty"`
	Rows  int32 `json:"rows,omitempty"`
	// Parts splits a frame processed whole whose rows are over loop.spec.frame.max_bytes
	// into sub-frames of consecutive rows, one unit each: the index of each sub-frame's
	// first row, from 0. It rides on the first body the decision issues for the frame
	// (unit 0's), before which the frame is one unit.
	Parts []int32 `json:"parts,omitempty"`
	// Refused says why the decision sent no body for this unit: its row alone is over
	// loop.spec.frame.max_bytes. The command.issued carries no command; the attempt counts
	// and the unit fails at once (no attempt could fit it).
	Refused string `json:"refused,omitempty"`
}

// CursorRowTooLarge is the error code of a unit whose row alone is over
// loop.spec.frame.max_bytes (CursorIssue.Refused).
const CursorRowTooLarge = "cursor_row_too_large"

// IssuedPayload is the payload of command.issued: a cursor command's place in its cursor,
// or the entry of a plain step that its first command of an epoch makes.
type IssuedPayload struct {
	Cursor *CursorIssue `json:"cursor,omitempty"`
	// Enter is set on the command.issued that enters a step of one command (no loop, no
	// cursor) in a new epoch: the step's entry and its command are one event. Logs written
	// before it carry a step.enter before the command.issued, and fold alike.
	Enter *EnterPayload `json:"enter,omitempty"`
}

// CursorMaxFrameRows is the most rows one claim may return (playbook.CursorMaxRows): a
// claim that returns more fails the step.
const CursorMaxFrameRows = 10_000

// cursorStride spaces the slots in a cursor command's iteration index: index =
// slot*cursorStride + unit + 1, with unit -1 for a claim. It exceeds the largest frame
// (playbook.CursorMaxRows).
const cursorStride = 1 << 14

// CursorIndex is the iteration index of a cursor command: of slot's claim (unit -1) or of
// the body of unit.
func CursorIndex(slot, unit int32) int32 { return slot*cursorStride + unit + 1 }

// cursorUnpack is CursorIndex's inverse.
func cursorUnpack(index int32) (slot, unit int32) {
	return index / cursorStride, index%cursorStride - 1
}

const cursorLeasePrefix = "lease:"

// parseLeaseTimer splits a lease timer id (CursorLeaseTimerID, or CursorLeaseRenewalID
// with its renewal number).
func parseLeaseTimer(id string) (slot, unit, renewal int32, bodyID string, ok bool) {
	rest, ok := strings.CutPrefix(id, "lease")
	if !ok {
		return 0, 0, 0, "", false
	}
	if r, found := strings.CutPrefix(rest, "."); found {
		num, tail, good := strings.Cut(r, ":")
		k, err := strconv.ParseInt(num, 10, 32)
		if !good || err != nil || k < 1 {
			return 0, 0, 0, "", false
		}
		renewal, rest = int32(k), ":"+tail
	}
	rest, ok = strings.CutPrefix(rest, ":")
	if !ok {
		return 0, 0, 0, "", false
	}
	parts := strings.SplitN(rest, ":", 3)
	if len(parts) != 3 {
		return 0, 0, 0, "", false
	}
	s, err1 := strconv.ParseInt(parts[0], 10, 32)
	u, err2 := strconv.ParseInt(parts[1], 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, 0, "", false
	}
	return int32(s), int32(u), renewal, parts[2], true
}

// newCursorState starts a cursor loop's state from its step.enter payload.
func newCursorState(p *CursorPayload) *sbv1.CursorState {
	c := &sbv1.CursorState{Iterator: p.Iterator, PerRow: p.PerRow, MaxAttempts: max(p.MaxAttempts, 1), LeaseSeconds: p.LeaseSeconds}
	c.Slots = make([]*sbv1.CursorSlot, max(p.Slots, 1))
	for i := range c.Slots {
		c.Slots[i] = &sbv1.CursorSlot{}
	}
	return c
}

// cursorEvent reports whether typ is an event the cursor fold handles for a cursor step.
func cursorEvent(typ string) bool {
	switch typ {
	case EventCommandIssued, EventCommandStarted, EventCallDone, EventCallError, EventCommandCompleted, EventCommandFailed, EventTimerScheduled, EventTimerFired,
		EventCommandHeartbeat:
		return true
	}
	return false
}

// applyCursor folds ev, an event of cursor step s.
func applyCursor(st *sbv1.ExecutionState, s *sbv1.StepState, ev *eventv1.Event) error {
	c := s.GetCursor()
	if s.GetStatus() != eventv1.StepStatus_STEP_STATUS_RUNNING {
		return nil // late events after the drain (or a failure) change nothing
	}
	switch ev.GetType() {
	case EventTimerFired:
		return cursorLeaseOver(st, s, ev)
	case EventTimerScheduled:
		return cursorLeaseScheduled(st, s, ev) // cursorlease.go
	case EventCommandHeartbeat:
		cursorHeartbeat(st, s, ev) // cursorlease.go
		return nil
	}
	if ev.GetType() != EventCommandIssued && ev.GetType() != EventCommandCompleted && ev.GetType() != EventCommandFailed {
		return nil
	}
	if ev.GetIteration().GetEpoch() != s.GetEpoch() {
		return nil
	}
	slotIdx, unit := cursorUnpack(ev.GetIteration().GetIndex())
	if slotIdx < 0 || int(slotIdx) >= len(c.GetSlots()) {
		return nil
	}
	slot := c.GetSlots()[slotIdx]
	exec, step := st.GetExecutionId(), s.GetName()
	if ev.GetType() == EventCommandIssued {
		var p IssuedPayload
		if len(ev.GetPayloadJson()) > 0 {
			if err := json.Unmarshal(ev.GetPayloadJson(), &p); err != nil {
				return fmt.Errorf("command.issued payload: %w", err)
			}
		}
		ci := p.Cursor
		if ci == nil {
			return nil
		}
		if ci.Phase == CursorPhaseClaim {
			if ci.Claim == slot.GetClaim()+1 && slot.GetFrame() == nil && !slot.GetDrained() {
				slot.Claim = ci.Claim
				slot.ClaimCommandId = ev.GetCommandId()
			}
			return nil
		}
		f := slot.GetFrame()
		if f == nil || f.GetClaim() != ci.Claim {
			return nil
		}
		if len(f.Units) == 0 && ci.Units > 0 {
			// A frame claimed by reference without a row count: its bodies say it.
			f.Rows = ci.Rows
			c.Claimed += int64(ci.Rows)
			f.Units = make([]*sbv1.CursorUnit, ci.Units)
			for i := range f.Units {
				f.Units[i] = &sbv1.CursorUnit{LeaseFrom: f.GetClaimedTime()}
			}
		}
		if len(ci.Parts) > 0 {
			cursorSplit(c, f, ci.Parts)
		}
		if ci.Unit < 0 || int(ci.Unit) >= len(f.Units) {
			return nil
		}
		u := f.Units[ci.Unit]
		if ci.Attempt > u.GetAttempt() && !u.GetDone() && !u.GetFailed() {
			u.Attempt = ci.Attempt
			u.Due = false
			leaseReset(u)
			c.Attempts++
			if ci.Attempt > 1 {
				c.Reissued++
			}
			if ci.Refused != "" {
				u.Failed = true
				c.Failed += unitRows(c, f, u)
				c.LastError = &eventv1.ErrorInfo{Code: CursorRowTooLarge, Message: ci.Refused}
				cursorFrameDone(slot)
			}
		}
		return nil
	}
	if unit < 0 {
		// A claim's outcome.
		if slot.GetClaimCommandId() == "" || ev.GetCommandId() != slot.GetClaimCommandId() {
			return nil
		}
		slot.ClaimCommandId = ""
		c.Claims++
		if ev.GetType() == EventCommandFailed {
			e := ev.GetError()
			msg := "the cursor's claim failed"
			if e.GetMessage() != "" {
				msg += ": " + e.GetMessage()
			}
			cursorFail(st, s, ev, &eventv1.ErrorInfo{Code: e.GetCode(), Message: msg, Retryable: e.GetRetryable()})
			return nil
		}
		n, rows, ref, err := ClaimRows(ev.GetResultJson(), ev.GetResultRef())
		if err != nil {
			cursorFail(st, s, ev, &eventv1.ErrorInfo{Code: "cursor_claim", Message: err.Error()})
			return nil
		}
		if n > CursorMaxFrameRows {
			cursorFail(st, s, ev, &eventv1.ErrorInfo{Code: "cursor_claim", Message: fmt.Sprintf("the cursor's claim returned %d rows, over the most a frame holds (%d); limit it with {{ cursor.max_rows }}", n, CursorMaxFrameRows)})
			return nil
		}
		if n == 0 {
			slot.Drained = true
			cursorMaybeDrained(s, ev)
			if s.GetStatus() != eventv1.StepStatus_STEP_STATUS_RUNNING {
				st.Running--
			}
			return nil
		}
		c.Frames++
		f := &sbv1.CursorFrame{Claim: slot.GetClaim(), RowsJson: rows, RowsRef: ref, Rows: int32(n), ClaimEventId: ev.GetEventId(), ClaimedTime: ev.GetCommitTime()}
		if n > 0 {
			c.Claimed += int64(n)
			units := 1
			if c.GetPerRow() {
				units = n
			}
			f.Units = make([]*sbv1.CursorUnit, units)
			for i := range f.Units {
				f.Units[i] = &sbv1.CursorUnit{LeaseFrom: ev.GetCommitTime()}
			}
		}
		slot.Frame = f
		return nil
	}
	// A body's outcome: only that of an attempt the frame issued counts.
	f := slot.GetFrame()
	if f == nil || int(unit) >= len(f.GetUnits()) {
		return nil
	}
	u := f.GetUnits()[unit]
	a := ev.GetAttempt()
	if u.GetDone() || u.GetFailed() || a < 1 || a > u.GetAttempt() || ev.GetCommandId() != CursorBodyID(exec, step, s.GetEpoch(), slotIdx, f.GetClaim(), unit, a) {
		return nil
	}
	if ev.GetType() == EventCommandCompleted {
		// Any attempt's completion (a late one whose lease ran out included) did the work.
		u.Done = true
		c.Processed += unitRows(c, f, u)
		cursorReleased(f, ev)
		cursorFrameDone(slot)
		return nil
	}
	if a != u.GetAttempt() || u.GetDue() {
		return nil // an older attempt's failure: a newer one is running or due
	}
	cursorAttemptOver(c, slot, f, u, ev, ev.GetError())
	return nil
}

// cursorReleased moves the lease origin of the frame's rows not issued yet (held back by
// row_concurrency) to ev, whose end of an attempt lets the next one go: their leases
// count from when they may be issued, not from the claim.
func cursorReleased(f *sbv1.CursorFrame, ev *eventv1.Event) {
	for _, u := range f.GetUnits() {
		if u.GetAttempt() == 0 {
			u.LeaseFrom = ev.GetCommitTime()
		}
	}
}

// cursorLeaseOver folds a lease timer's timer.fired: the attempt it leased, when it has no
// outcome yet, is over, unless a heartbeat came within lease_seconds of the timer's due
// time: then the lease is renewed (cursorlease.go).
func cursorLeaseOver(st *sbv1.ExecutionState, s *sbv1.StepState, ev *eventv1.Event) error {
	var p TimerPayload
	if err := json.Unmarshal(ev.GetPayloadJson(), &p); err != nil {
		return fmt.Errorf("timer.fired payload: %w", err)
	}
	c, slot, f, u, renewal, ok := leasedUnit(st, s, p.TimerID)
	if !ok || renewal != u.GetLeaseRenewals() {
		return nil
	}
	if leaseRenewed(c, u, p.DueAt) {
		return nil
	}
	cursorAttemptOver(c, slot, f, u, ev, &eventv1.ErrorInfo{Code: "lease_expired", Retryable: true,
		Message: leaseExpiredMessage(c, u)})
	return nil
}

// cursorAttemptOver ends u's attempt without success (a failure or a lease that ran
// out): the next attempt is due, or, after max_attempts, the unit failed.
func cursorAttemptOver(c *sbv1.CursorState, slot *sbv1.CursorSlot, f *sbv1.CursorFrame, u *sbv1.CursorUnit, ev *eventv1.Event, why *eventv1.ErrorInfo) {
	cursorReleased(f, ev)
	if u.GetAttempt() >= c.GetMaxAttempts() {
		u.Failed = true
		c.Failed += unitRows(c, f, u)
		c.LastError = why
		cursorFrameDone(slot)
		return
	}
	u.Due = true
	u.LeaseFrom = ev.GetCommitTime()
	u.DueEventId = ev.GetEventId()
}

// unitRows is the number of rows unit u of frame f stands for.
func unitRows(c *sbv1.CursorState, f *sbv1.CursorFrame, u *sbv1.CursorUnit) int64 {
	switch {
	case u.GetRows() > 0:
		return int64(u.GetRows())
	case c.GetPerRow():
		return 1
	}
	return int64(f.GetRows())
}

// cursorSplit splits frame f, processed whole and not issued yet, into the sub-frames
// whose first rows parts lists (CursorIssue.Parts): one unit each, leased from when the
// frame's was. Parts that do not cut the frame's rows from 0 in increasing order, or a
// frame split or issued already, change nothing.
func cursorSplit(c *sbv1.CursorState, f *sbv1.CursorFrame, parts []int32) {
	if c.GetPerRow() || len(f.GetUnits()) == 0 || parts[0] != 0 || parts[len(parts)-1] >= f.GetRows() {
		return
	}
	for i := 1; i < len(parts); i++ {
		if parts[i] <= parts[i-1] {
			return
		}
	}
	for _, u := range f.GetUnits() {
		if u.GetAttempt() > 0 || u.GetDone() || u.GetFailed() || u.GetRows() > 0 {
			return
		}
	}
	from := f.GetUnits()[0].GetLeaseFrom()
	units := make([]*sbv1.CursorUnit, len(parts))
	for i, first := range parts {
		end := f.GetRows()
		if i+1 < len(parts) {
			end = parts[i+1]
		}
		units[i] = &sbv1.CursorUnit{LeaseFrom: from, FirstRow: first, Rows: end - first}
	}
	f.Units = units
}

// cursorFrameDone releases the slot's frame once each of its units is done or failed:
// the slot then claims again.
func cursorFrameDone(slot *sbv1.CursorSlot) {
	for _, u := range slot.GetFrame().GetUnits() {
		if !u.GetDone() && !u.GetFailed() {
			return
		}
	}
	slot.Frame = nil
}

// cursorMaybeDrained completes the step once every slot is drained, with the summary as
// its result; ev is the claim that drained the last slot.
func cursorMaybeDrained(s *sbv1.StepState, ev *eventv1.Event) {
	for _, slot := range s.GetCursor().GetSlots() {
		if !slot.GetDrained() {
			return
		}
	}
	s.Status = eventv1.StepStatus_STEP_STATUS_COMPLETED
	s.ResultJson = CursorSummary(s.GetCursor())
	s.ResultRef = nil
	s.DoneEventId = ev.GetEventId()
	s.Routed = false
}

// cursorFail fails the cursor step (its claim failed or answered what is not rows).
func cursorFail(st *sbv1.ExecutionState, s *sbv1.StepState, ev *eventv1.Event, e *eventv1.ErrorInfo) {
	st.Running--
	s.Status = eventv1.StepStatus_STEP_STATUS_FAILED
	s.Error = e
	s.DoneEventId = ev.GetEventId()
	s.Routed = false
	st.FailedSteps = append(st.FailedSteps, s.GetName())
}

// CursorSummary is a drained cursor loop's result: how many claims answered, frames and
// rows were claimed, rows processed and failed, and body attempts issued (reissued: after
// a lease ran out or a failure).
func CursorSummary(c *sbv1.CursorState) []byte {
	m := map[string]any{
		"drained": true, "claims": c.GetClaims(), "frames": c.GetFrames(), "claimed": c.GetClaimed(),
		"processed": c.GetProcessed(), "failed": c.GetFailed(), "attempts": c.GetAttempts(), "reissued": c.GetReissued(),
	}
	if e := c.GetLastError(); e != nil {
		m["last_error"] = e.GetMessage()
	}
	if c.GetHeartbeats() > 0 {
		m["heartbeats"], m["renewals"] = c.GetHeartbeats(), c.GetRenewals()
	}
	b, _ := json.Marshal(m)
	return b
}

// ClaimRows reads a claim's answer: the rows of a postgres result ({"rows": [...]}) or a
// list, inline, or the row count of a result held by reference. n is the number of rows,
// -1 for a reference that does not say (its rows are loaded to learn it); a reference
// counts as rows whatever its summary shows, so a claim whose rows went by reference is
// never read as empty.
func ClaimRows(result []byte, ref *eventv1.ResultRef) (n int, rows [][]byte, _ *eventv1.ResultRef, err error) {
	if ref != nil {
		if rc := ref.GetRowCount(); rc > 0 {
			return int(rc), nil, ref, nil
		}
		var ex struct {
			RowCount *int64 `json:"row_count"`
		}
		if json.Unmarshal(ref.GetExtractedJson(), &ex) == nil && ex.RowCount != nil && *ex.RowCount > 0 {
			return int(*ex.RowCount), nil, ref, nil
		}
		return -1, nil, ref, nil
	}
	list, err := ClaimRowsOf(result)
	if err != nil {
		return 0, nil, nil, err
	}
	rows = make([][]byte, len(list))
	for i, r := range list {
		rows[i] = r
	}
	return len(rows), rows, nil, nil
}

// ClaimRowsOf parses a claim's result (inline, or a reference's payload): the "rows" of
// an object (the postgres tool's result), a list's items, nothing for null.
func ClaimRowsOf(result []byte) ([]json.RawMessage, error) {
	var v any
	if len(result) == 0 {
		return nil, nil
	}
	if err := DecodeJSON(result, &v); err != nil {
		return nil, fmt.Errorf("the cursor's claim answered what is not JSON: %w", err)
	}
	var list []json.RawMessage
	switch x := v.(type) {
	case nil:
		return nil, nil
	case []any:
		if err := json.Unmarshal(result, &list); err != nil {
			return nil, err
		}
	case map[string]any:
		if r, ok := x["rows"]; !ok || (r != nil && !isList(r)) {
			return nil, fmt.Errorf("the cursor's claim answered an object without a rows list (keys: %s)", keysOf(x))
		}
		var obj struct {
			Rows []json.RawMessage `json:"rows"`
		}
		if err := json.Unmarshal(result, &obj); err != nil {
			return nil, err
		}
		list = obj.Rows
	default:
		return nil, fmt.Errorf("the cursor's claim answered a %T, not rows", v)
	}
	return list, nil
}

func keysOf(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}

func isList(v any) bool {
	_, ok := v.([]any)
	return ok
}
