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
// the renewal's timer), max_seconds for one body attempt, and max_bytes for a frame's rows.

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

// checkFrameBytes fails the execution when a frame's rows, as JSON, are over max_bytes: the
// claim is to keep its frame under it (it reads {{ cursor.max_bytes }}).
func checkFrameBytes(ps *playbook.Step, rows []json.RawMessage) error {
	limit := ps.Loop.Cursor.Frame.MaxBytes
	if limit <= 0 {
		return nil
	}
	n := 0
	for _, r := range rows {
		n += len(r)
	}
	if n > limit {
		return &Error{Step: ps.Name, Code: "cursor_frame_too_large", Msg: fmt.Sprintf("the cursor's claim returned a frame of %d rows and %d bytes, over loop.spec.frame.max_bytes (%d); limit the claim with {{ cursor.max_bytes }} or {{ cursor.max_rows }}", len(rows), n, limit)}
	}
	return nil
}
