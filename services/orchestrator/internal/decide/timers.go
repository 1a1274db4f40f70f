package decide

import (
	"encoding/json"
	"fmt"
	"time"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
)

// The durable timers a decision schedules and reads: the execution deadline and retry waits.

// deadline keeps an execution's timeout: it schedules the durable timer of the deadline
// (due at the start's commit time plus the timeout, as the fold computed it: no clock is
// read), and once the timer fired it fails the execution, reporting that it ended.
func (d *decider) deadline() (ended bool) {
	dl := d.st.GetDeadline()
	if dl == nil {
		return false
	}
	id := d.st.GetExecutionId()
	if d.st.GetDeadlinePassed() {
		timeout := dl.AsTime().Sub(d.st.GetStartTime().AsTime())
		d.out = append(d.out, d.terminal(domain.EventPlaybookFailed, &eventv1.ErrorInfo{Code: "deadline_exceeded",
			Message: fmt.Sprintf("the execution ran past its timeout of %s (spec.timeout or the start's timeout) and was stopped", timeout)}, nil, nil, nil))
		return true
	}
	if !d.st.GetDeadlineScheduled() {
		payload, _ := json.Marshal(domain.TimerPayload{TimerID: domain.DeadlineTimerID(id), DueAt: dl.AsTime()})
		d.emit(&eventv1.Event{EventId: domain.EventID(domain.ExecutionCause(id), domain.EventTimerScheduled), Type: domain.EventTimerScheduled, CauseEventId: d.st.GetLastEventId(), PayloadJson: payload})
	}
	return false
}

// advanceRetries schedules the durable timer of each pending retry and, once the timer
// fired, issues the next attempt. The due time comes from the failure's commit time, not
// from a clock.
func (d *decider) advanceRetries() error {
	for _, name := range d.active.names {
		s := d.st.GetSteps()[name]
		if s.GetRetry() == nil || s.GetStatus() != eventv1.StepStatus_STEP_STATUS_RUNNING {
			continue
		}
		r := s.GetRetry()
		ps := d.c.Playbook.Step(name)
		if ps == nil {
			continue
		}
		if r.GetTimerId() == "" {
			due := r.GetFailedTime().AsTime().Add(time.Duration(r.GetDelaySeconds() * float64(time.Second)))
			timerID := "t" + domain.EventID(r.GetFailedEventId(), "timer")[1:]
			payload, _ := json.Marshal(domain.TimerPayload{TimerID: timerID, DueAt: due, Attempt: r.GetNextAttempt()})
			d.emit(&eventv1.Event{EventId: domain.EventID(r.GetFailedEventId(), domain.EventTimerScheduled), Type: domain.EventTimerScheduled, Step: name, Attempt: r.GetNextAttempt(), CauseEventId: r.GetFailedEventId(), PayloadJson: payload})
			continue
		}
		if !r.GetFired() {
			continue
		}
		if err := d.checkEvents(name, fmt.Sprintf("issuing attempt %d", r.GetNextAttempt())); err != nil {
			return err
		}
		iter := &eventv1.Iteration{Epoch: s.GetEpoch(), Index: -1}
		cmdID := domain.CommandID(d.st.GetExecutionId(), name, s.GetEpoch(), -1, r.GetNextAttempt())
		cmd, err := d.command(ps, cmdID, iter, r.GetNextAttempt(), nil)
		if err != nil {
			return err
		}
		issuedID := domain.EventID(cmdID, domain.EventCommandIssued)
		cmd.IssuedEventId = issuedID
		d.emit(&eventv1.Event{EventId: issuedID, Type: domain.EventCommandIssued, Step: name, CommandId: cmdID, Attempt: r.GetNextAttempt(), CauseEventId: r.GetFailedEventId(), Iteration: iter, Command: cmd})
	}
	return nil
}
