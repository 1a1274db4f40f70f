package domain

import (
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
)

// A body attempt's lease is a durable timer (CursorLeaseTimerID), due lease_seconds after
// the lease's origin. With frame.heartbeat_seconds the worker reports command.heartbeat
// while the body runs; the fold keeps the latest one's commit time. When the lease's
// timer fires and that heartbeat came less than lease_seconds before the timer's due
// time, the attempt is alive: the fold renews the lease (lease_renewals, lease_due) and
// the decision arms the renewal's timer (CursorLeaseRenewalID), due lease_seconds after
// that heartbeat. So a lease runs out lease_seconds after the last heartbeat, and costs
// two events per lease_seconds rather than per heartbeat. Without heartbeats nothing
// changes: the first timer ends the attempt, as in logs written before heartbeats.

// leasedUnit finds the unit a lease timer (timerID) leases and reports whether its attempt
// is the one the timer was armed for and is still running.
func leasedUnit(st *sbv1.ExecutionState, s *sbv1.StepState, timerID string) (c *sbv1.CursorState, slot *sbv1.CursorSlot, f *sbv1.CursorFrame, u *sbv1.CursorUnit, renewal int32, ok bool) {
	slotIdx, unit, renewal, bodyID, ok := parseLeaseTimer(timerID)
	c = s.GetCursor()
	if !ok || slotIdx < 0 || int(slotIdx) >= len(c.GetSlots()) {
		return nil, nil, nil, nil, 0, false
	}
	slot = c.GetSlots()[slotIdx]
	f = slot.GetFrame()
	if f == nil || unit < 0 || int(unit) >= len(f.GetUnits()) {
		return nil, nil, nil, nil, 0, false
	}
	u = f.GetUnits()[unit]
	if u.GetDone() || u.GetFailed() || u.GetDue() || u.GetAttempt() < 1 ||
		bodyID != CursorBodyID(st.GetExecutionId(), s.GetName(), s.GetEpoch(), slotIdx, f.GetClaim(), unit, u.GetAttempt()) {
		return nil, nil, nil, nil, 0, false
	}
	return c, slot, f, u, renewal, true
}

// leaseRenewed renews u's lease when its latest heartbeat came less than lease_seconds
// before due (the fired timer's due time), reporting whether it did.
func leaseRenewed(c *sbv1.CursorState, u *sbv1.CursorUnit, due time.Time) bool {
	hb := u.GetHeartbeatTime()
	if hb == nil || c.GetLeaseSeconds() <= 0 {
		return false
	}
	end := hb.AsTime().Add(time.Duration(c.GetLeaseSeconds()) * time.Second)
	if !end.After(due) {
		return false
	}
	u.LeaseRenewals++
	u.LeaseDue = timestamppb.New(end)
	u.LeaseRenewPending = true
	c.Renewals++
	return true
}

// leaseExpiredMessage says why u's attempt lost its lease.
func leaseExpiredMessage(c *sbv1.CursorState, u *sbv1.CursorUnit) string {
	if u.GetHeartbeatTime() != nil {
		return fmt.Sprintf("attempt %d sent no heartbeat for its lease of %d s (its worker stopped?)", u.GetAttempt(), c.GetLeaseSeconds())
	}
	return fmt.Sprintf("attempt %d held its frame past the lease of %d s with no outcome (its worker stopped?)", u.GetAttempt(), c.GetLeaseSeconds())
}

// leaseReset clears the heartbeat and renewal bookkeeping of u for a new attempt.
func leaseReset(u *sbv1.CursorUnit) {
	u.HeartbeatTime, u.LeaseRenewals, u.LeaseDue, u.LeaseRenewPending = nil, 0, nil, false
}

// cursorLeaseScheduled folds the timer.scheduled of a lease's renewal: the decision armed
// it, so it is no longer pending.
func cursorLeaseScheduled(st *sbv1.ExecutionState, s *sbv1.StepState, ev *eventv1.Event) error {
	var p TimerPayload
	if err := json.Unmarshal(ev.GetPayloadJson(), &p); err != nil {
		return fmt.Errorf("timer.scheduled payload: %w", err)
	}
	if _, _, _, u, renewal, ok := leasedUnit(st, s, p.TimerID); ok && renewal > 0 && renewal == u.GetLeaseRenewals() {
		u.LeaseRenewPending = false
	}
	return nil
}

// cursorHeartbeat folds a body attempt's command.heartbeat: only one of the attempt in
// flight counts (an older attempt's worker may still be running it).
func cursorHeartbeat(st *sbv1.ExecutionState, s *sbv1.StepState, ev *eventv1.Event) {
	c := s.GetCursor()
	if ev.GetIteration().GetEpoch() != s.GetEpoch() {
		return
	}
	slotIdx, unit := cursorUnpack(ev.GetIteration().GetIndex())
	if slotIdx < 0 || int(slotIdx) >= len(c.GetSlots()) || unit < 0 {
		return
	}
	f := c.GetSlots()[slotIdx].GetFrame()
	if f == nil || int(unit) >= len(f.GetUnits()) {
		return
	}
	u := f.GetUnits()[unit]
	if u.GetDone() || u.GetFailed() || u.GetDue() || u.GetAttempt() < 1 || ev.GetAttempt() != u.GetAttempt() ||
		ev.GetCommandId() != CursorBodyID(st.GetExecutionId(), s.GetName(), s.GetEpoch(), slotIdx, f.GetClaim(), unit, u.GetAttempt()) {
		return
	}
	c.Heartbeats++
	if at := ev.GetCommitTime(); at != nil && (u.GetHeartbeatTime() == nil || at.AsTime().After(u.GetHeartbeatTime().AsTime())) {
		u.HeartbeatTime = at
	}
}
