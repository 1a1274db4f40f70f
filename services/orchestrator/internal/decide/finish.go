package decide

import (
	"encoding/json"
	"sort"
	"strings"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
)

// The end of an execution: its terminal event and final result.

// finish emits the terminal event when nothing runs and nothing is left to route.
func (d *decider) finish() error {
	if d.running > 0 {
		return nil
	}
	// A step outside the active ones is routed (Active).
	for _, name := range d.active.names {
		s := d.st.GetSteps()[name]
		if (s.GetStatus() == eventv1.StepStatus_STEP_STATUS_COMPLETED || s.GetStatus() == eventv1.StepStatus_STEP_STATUS_FAILED) && !d.routed(name) {
			return nil
		}
	}
	failed := d.st.GetFailedSteps()
	if len(failed) > 0 {
		msgs := make([]string, 0, len(failed))
		seen := map[string]bool{}
		for _, f := range failed {
			if seen[f] {
				continue
			}
			seen[f] = true
			// "step a failed: <why>", unless why already names the step ("step a: tool python: ...").
			m := "step " + f + " failed"
			if e := d.st.GetSteps()[f].GetError(); e != nil && e.GetMessage() != "" {
				if why := e.GetMessage(); strings.HasPrefix(why, "step "+f+": ") {
					m = why
				} else {
					m += ": " + why
				}
			}
			msgs = append(msgs, m)
		}
		d.out = append(d.out, d.terminal(domain.EventPlaybookFailed, &eventv1.ErrorInfo{Code: "step_failed", Message: strings.Join(msgs, "; ")}, failed, nil, nil))
		return nil
	}
	res, ref := d.finalResult()
	d.out = append(d.out, d.terminal(domain.EventPlaybookCompleted, nil, nil, res, ref))
	return nil
}

// finalResult is the result of the end step when it completed, else of the completed leaf
// step (no next) first in name order.
func (d *decider) finalResult() ([]byte, *eventv1.ResultRef) {
	steps := d.st.GetSteps()
	if s := steps["end"]; s != nil && s.GetStatus() == eventv1.StepStatus_STEP_STATUS_COMPLETED {
		return d.rawResult(s)
	}
	var names []string
	for name, s := range steps {
		if s.GetStatus() != eventv1.StepStatus_STEP_STATUS_COMPLETED {
			continue
		}
		if ps := d.c.Playbook.Step(name); ps != nil && (ps.Next == nil || len(ps.Next.Arcs) == 0) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, nil
	}
	return d.rawResult(steps[names[0]])
}

func (d *decider) terminal(typ string, e *eventv1.ErrorInfo, failed []string, res []byte, ref *eventv1.ResultRef) *eventv1.Event {
	payload, _ := json.Marshal(domain.TerminalPayload{FailedSteps: failed})
	return &eventv1.Event{
		EventId:           domain.EventID(domain.ExecutionCause(d.st.GetExecutionId()), typ),
		ExecutionId:       d.st.GetExecutionId(),
		Tenant:            d.st.GetTenant(),
		ParentExecutionId: d.st.GetParentExecutionId(),
		Type:              typ,
		CauseEventId:      d.st.GetLastEventId(),
		PayloadJson:       payload,
		Error:             e,
		ResultJson:        res,
		ResultRef:         ref,
		Producer:          "orchestrator",
	}
}

func (d *decider) terminalFailed(e *Error) *eventv1.Event {
	code := e.Code
	if code == "" {
		code = "decision_error"
	}
	return d.terminal(domain.EventPlaybookFailed, &eventv1.ErrorInfo{Code: code, Message: e.Error()}, []string{e.Step}, nil, nil)
}
