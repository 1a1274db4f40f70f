package decide

import (
	"encoding/json"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
)

// Entering and exiting steps, and the execution context writes they carry.

// exit emits step.exit for a step routed to fired; ref, when set, is the result of a loop
// whose list of results is held by reference.
func (d *decider) exit(name, cause string, fired []string, ref *eventv1.ResultRef) error {
	payload, err := json.Marshal(domain.ExitPayload{Fired: fired, CursorDrained: d.cursorDrained(name)})
	if err != nil {
		return err
	}
	d.emit(&eventv1.Event{
		EventId:      domain.EventID(cause, domain.EventStepExit),
		Type:         domain.EventStepExit,
		Step:         name,
		CauseEventId: cause,
		PayloadJson:  payload,
		ResultRef:    ref,
	})
	if fired == nil {
		fired = []string{}
	}
	d.fired[name] = fired
	return nil
}

func (d *decider) updateCtx(vals map[string]any, id, step string) {
	if len(vals) == 0 {
		return
	}
	payload, _ := json.Marshal(domain.CtxPayload{Values: vals})
	d.emit(&eventv1.Event{EventId: id, Type: domain.EventCtxUpdated, Step: step, PayloadJson: payload})
	if d.ctx == nil {
		d.ctx = map[string]any{}
	}
	for k, v := range vals {
		d.ctx[k] = v
	}
	d.commands = nil // their scopes hold the old ctx
}

// enter emits a step's entry, or step.skipped when its legacy when guard is false. A step
// of one command is entered by its command.issued, whose payload carries the entry
// (domain.IssuedPayload.Enter): one event where a loop's or a cursor's entry is a step.enter
// followed by the commands it issues.
func (d *decider) enter(name, cause string) error {
	ps := d.c.Playbook.Step(name)
	if ps == nil {
		return &Error{Step: name, Msg: "arc target does not exist"}
	}
	if ps.When != "" {
		ok, err := d.truthy(ps.When, d.vars(ps), name, "when")
		if err != nil {
			return err
		}
		if !ok {
			return d.skip(name, cause)
		}
	}
	exec := d.st.GetExecutionId()
	epoch := d.st.GetSteps()[name].GetEpoch() + 1
	if err := d.checkEntry(name, epoch); err != nil {
		return err
	}
	enterID := domain.EventID(domain.StepEnterCause(exec, name, epoch), domain.EventStepEnter)
	if ps.Loop != nil && ps.Loop.Cursor != nil {
		return d.enterCursor(ps, epoch, enterID, cause) // cursor.go
	}
	enter := domain.EnterPayload{Epoch: epoch}
	if ps.Loop == nil {
		return d.enterPlain(ps, epoch, enter, cause)
	}
	items, err := d.collection(ps)
	if err != nil {
		return err
	}
	enter.Loop = &domain.LoopPayload{Items: items, Iterator: ps.Loop.Iterator}
	payload, err := json.Marshal(enter)
	if err != nil {
		return err
	}
	d.emit(&eventv1.Event{EventId: enterID, Type: domain.EventStepEnter, Step: name, CauseEventId: cause, PayloadJson: payload, Iteration: &eventv1.Iteration{Epoch: epoch, Index: -1}})
	d.entered[name] = true
	d.status[name] = eventv1.StepStatus_STEP_STATUS_RUNNING
	delete(d.fired, name)
	if len(enter.Loop.Items) == 0 {
		// An empty collection completes the loop at once: route it in this pass.
		d.status[name] = eventv1.StepStatus_STEP_STATUS_COMPLETED
		return d.routeFinished(name, eventv1.StepStatus_STEP_STATUS_COMPLETED, enterID, domain.StepResult{Status: "completed", Result: []byte("[]")})
	}
	d.running++
	limit, err := d.maxInFlight(ps)
	if err != nil {
		return err
	}
	return d.issueIterations(ps, epoch, 0, min(len(items), limit), func(i int) json.RawMessage { return items[i] }, len(items), enterID)
}

// enterPlain enters a step of one command in epoch: its command.issued, carrying the entry.
// Its id derives from the command's, which derives from the execution, the step and the
// epoch, so an entry decided twice is one event in the log, as a step.enter was.
func (d *decider) enterPlain(ps *playbook.Step, epoch int32, enter domain.EnterPayload, cause string) error {
	name := ps.Name
	iter := &eventv1.Iteration{Epoch: epoch, Index: -1}
	cmdID := domain.CommandID(d.st.GetExecutionId(), name, epoch, -1, 1)
	cmd, err := d.command(ps, cmdID, iter, 1, nil)
	if err != nil {
		return err
	}
	payload, err := json.Marshal(domain.IssuedPayload{Enter: &enter})
	if err != nil {
		return err
	}
	issuedID := domain.EventID(cmdID, domain.EventCommandIssued)
	cmd.IssuedEventId = issuedID
	d.emit(&eventv1.Event{EventId: issuedID, Type: domain.EventCommandIssued, Step: name, CommandId: cmdID, Attempt: 1, CauseEventId: cause, PayloadJson: payload, Iteration: iter, Command: cmd})
	d.entered[name] = true
	d.status[name] = eventv1.StepStatus_STEP_STATUS_RUNNING
	delete(d.fired, name)
	d.running++
	return nil
}
