package decide

import (
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
)

// The bounds of a cursor loop's frame beyond its rows: heartbeats that keep a body's lease
// alive (the fold renews a lease whose timer fired while heartbeats came; this file arms
// the renewal's timer), max_seconds for one body attempt, and max_bytes for the rows one
// body binds: a frame processed whole over it is cut into sub-frames within it, one body
// each (frameParts), and a row over it alone is refused, its unit failed, rather than sent.

// renewLeases schedules the timers of frame f's lease renewals the fold asked for: each
// due lease_seconds after the heartbeat that renewed it (as the fold computed it from
// commit times: no clock is read).
func (d *decider) renewLeases(ps *playbook.Step, s *sbv1.StepState, slot int32, f *sbv1.CursorFrame) error {
	for i, u := range f.GetUnits() {
		if !u.GetLeaseRenewPending() || u.GetDone() || u.GetFailed() || u.GetDue() {
			continue
		}
		if err := d.checkEvents(ps.Name, "renewing a cursor body's lease"); err != nil {
			return err
		}
		unit, attempt := int32(i), u.GetAttempt()
		bodyID := domain.CursorBodyID(d.st.GetExecutionId(), ps.Name, s.GetEpoch(), slot, f.GetClaim(), unit, attempt)
		timerID := domain.CursorLeaseRenewalID(slot, unit, u.GetLeaseRenewals(), bodyID)
		payload, err := json.Marshal(domain.TimerPayload{TimerID: timerID, DueAt: u.GetLeaseDue().AsTime(), Attempt: attempt})
		if err != nil {
			return err
		}
		d.emit(&eventv1.Event{EventId: domain.EventID(timerID, domain.EventTimerScheduled), Type: domain.EventTimerScheduled, Step: ps.Name, Attempt: attempt,
			CauseEventId: d.st.GetLastEventId(), PayloadJson: payload})
	}
	return nil
}

// bodyBounds sets what a frame's settings bound on a body command: the heartbeat interval
// its worker reports at, and max_seconds as the attempt's timeout (the tighter of it and
// the step's spec.timeout).
func bodyBounds(cmd *eventv1.Command, f playbook.Frame) {
	if f.HeartbeatSeconds > 0 {
		cmd.Heartbeat = durationpb.New(time.Duration(f.HeartbeatSeconds) * time.Second)
	}
	if f.MaxSeconds > 0 {
		limit := time.Duration(f.MaxSeconds) * time.Second
		if t := cmd.GetTimeout(); t == nil || t.AsDuration() <= 0 || t.AsDuration() > limit {
			cmd.Timeout = durationpb.New(limit)
			cmd.TimeoutField = "loop.spec.frame.max_seconds"
		}
	}
}

// frameParts is how loop.spec.frame.max_bytes cuts a frame processed whole (its units and
// rows): a frame within it, or split already (its units say their rows), is as it was; a
// frame over it that no body was issued for yet is cut into sub-frames of consecutive rows,
// each within max_bytes but for a row over it alone (splitRows), one unit each, and parts
// lists their first rows for the fold (domain.CursorIssue.Parts; nil: no cut).
func frameParts(ps *playbook.Step, units []*sbv1.CursorUnit, rows []json.RawMessage) ([]*sbv1.CursorUnit, []int32, error) {
	limit := ps.Loop.Cursor.Frame.MaxBytes
	if limit <= 0 || len(units) != 1 || units[0].GetRows() > 0 || units[0].GetAttempt() > 0 || rowsBytes(rows) <= limit {
		return units, nil, nil
	}
	parts := splitRows(rows, limit)
	if len(parts) < 2 {
		return units, nil, nil // one row over max_bytes alone: refused as it is
	}
	if len(parts) > domain.CursorMaxFrameRows {
		return nil, nil, &Error{Step: ps.Name, Msg: fmt.Sprintf("loop.spec.frame.max_bytes cuts a frame into %d sub-frames, over %d", len(parts), domain.CursorMaxFrameRows)}
	}
	split := make([]*sbv1.CursorUnit, len(parts))
	for i, first := range parts {
		end := int32(len(rows))
		if i+1 < len(parts) {
			end = parts[i+1]
		}
		split[i] = &sbv1.CursorUnit{LeaseFrom: units[0].GetLeaseFrom(), FirstRow: first, Rows: end - first}
	}
	return split, parts, nil
}

// splitRows cuts rows into runs of consecutive rows whose JSON sizes sum to at most limit,
// each as long as it fits, and returns the index of each run's first row; a row over limit
// alone is a run of its own.
func splitRows(rows []json.RawMessage, limit int) []int32 {
	var parts []int32
	size := 0
	for i, r := range rows {
		if i == 0 || size+len(r) > limit {
			parts = append(parts, int32(i))
			size = 0
		}
		size += len(r)
	}
	return parts
}

// unitSpan is the rows of n a unit (number unit) of a frame binds: its own row with
// process: row, its sub-frame's when max_bytes split the frame, else all of them.
func unitSpan(c *sbv1.CursorState, u *sbv1.CursorUnit, unit int32, n int) (first, count int32) {
	switch {
	case c.GetPerRow():
		return unit, 1
	case u.GetRows() > 0 && int(u.GetFirstRow()+u.GetRows()) <= n:
		return u.GetFirstRow(), u.GetRows()
	}
	return 0, int32(n)
}

// rowsBytes is the size max_bytes bounds: the sum of the rows' JSON sizes.
func rowsBytes(rows []json.RawMessage) int {
	n := 0
	for _, r := range rows {
		n += len(r)
	}
	return n
}
