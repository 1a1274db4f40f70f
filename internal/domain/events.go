package domain

import (
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// Event types. Dotted names, as docs/architecture.md ("Envelopes") lists them.
const (
	EventPlaybookStarted   = "playbook.started"
	EventStepEnter         = "step.enter"
	EventStepSkipped       = "step.skipped"
	EventCtxUpdated        = "ctx.updated"
	EventCommandIssued     = "command.issued"
	EventCommandsIssued    = "commands.issued"
	EventCommandStarted    = "command.started"
	EventCommandHeartbeat  = "command.heartbeat"
	EventCallDone          = "call.done"
	EventCallError         = "call.error"
	EventCommandCompleted  = "command.completed"
	EventCommandFailed     = "command.failed"
	EventStepExit          = "step.exit"
	EventTimerScheduled    = "timer.scheduled"
	EventTimerFired        = "timer.fired"
	EventPlaybookCompleted = "playbook.completed"
	EventPlaybookFailed    = "playbook.failed"
	EventPlaybookCancelled = "playbook.cancelled"
	EventVarsUpdated       = "vars.updated"
)

// IsTerminal reports whether an event type ends an execution.
func IsTerminal(eventType string) bool {
	switch eventType {
	case EventPlaybookCompleted, EventPlaybookFailed, EventPlaybookCancelled:
		return true
	}
	return false
}

// IsDecisionOutput reports whether an event type is only ever produced by a decision. A
// state that changed only by such events needs no new decision: deciding is idempotent over
// its own output.
func IsDecisionOutput(eventType string) bool {
	switch eventType {
	case EventStepEnter, EventCommandIssued, EventCommandsIssued, EventStepExit, EventStepSkipped, EventCtxUpdated, EventTimerScheduled:
		return true
	}
	return false
}

// IsIssue reports whether an event type issues commands: command.issued (one command) or
// commands.issued (the iterations of a loop step issued together).
func IsIssue(eventType string) bool {
	return eventType == EventCommandIssued || eventType == EventCommandsIssued
}

// IssuedCommands returns the commands ev issues, in order: a command.issued's command, a
// commands.issued's commands; none for any other event (or a command.issued read without
// its command).
func IssuedCommands(ev *eventv1.Event) []*eventv1.Command {
	switch ev.GetType() {
	case EventCommandIssued:
		if c := ev.GetCommand(); c != nil {
			return []*eventv1.Command{c}
		}
	case EventCommandsIssued:
		return ev.GetCommands()
	}
	return nil
}

// StartedPayload is the payload of playbook.started.
type StartedPayload struct {
	Path     string         `json:"path"`
	Version  int64          `json:"version"`
	Workload map[string]any `json:"workload"`
	// Labels are the execution's labels (ValidateLabels).
	Labels map[string]string `json:"labels,omitempty"`
	// RerunOf is the execution this one reruns, when started by a rerun.
	RerunOf string `json:"rerun_of,omitempty"`
	// FromStep is the step a rerun runs from: the first decision enters it instead of
	// start.
	FromStep string `json:"from_step,omitempty"`
	// Reused are the steps a rerun takes over from RerunOf, completed and routed, with
	// their results as the original's log holds them; the fold applies them before any
	// decision.
	Reused []ReusedStep `json:"reused,omitempty"`
	// Ctx is the execution context a rerun starts with (the original's when it first
	// entered FromStep).
	Ctx map[string]any `json:"ctx,omitempty"`
	// TimeoutSeconds bounds the whole execution from this event's commit (the start's
	// timeout, else the playbook's spec.timeout); zero: no bound.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
}

// DeadlineTimerID is the id of the durable timer that ends an execution at its deadline.
func DeadlineTimerID(executionID string) string { return "deadline-" + executionID }

// ReusedStep is a step a rerun takes over from the execution it reruns: its result inline
// (Result) or by reference (ResultRef, the original's reference as protobuf JSON: the
// payload is never copied), and the targets of its arcs that fired in the original; or,
// with Skipped, a step the original skipped.
type ReusedStep struct {
	Name      string          `json:"name"`
	Skipped   bool            `json:"skipped,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	ResultRef json.RawMessage `json:"result_ref,omitempty"`
	Fired     []string        `json:"fired,omitempty"`
}

// SetRef sets r's ResultRef to ref (nil clears it).
func (r *ReusedStep) SetRef(ref *eventv1.ResultRef) error {
	if ref == nil {
		r.ResultRef = nil
		return nil
	}
	b, err := protojson.Marshal(ref)
	if err != nil {
		return fmt.Errorf("reused step %q: result_ref: %w", r.Name, err)
	}
	r.ResultRef = b
	return nil
}

// EnterPayload is the payload of step.enter.
type EnterPayload struct {
	Epoch int32 `json:"epoch"`
	// Loop is set when the step loops over a collection.
	Loop *LoopPayload `json:"loop,omitempty"`
	// Cursor is set when the step drains a cursor (cursor.go).
	Cursor *CursorPayload `json:"cursor,omitempty"`
}

// LoopPayload carries a loop step's rendered collection: inline (Items), or by reference
// (ItemsRef and Total) when it is too large to travel in the event.
type LoopPayload struct {
	Items    []json.RawMessage `json:"items"`
	Iterator string            `json:"iterator"`
	// Total is the number of items of a collection held by reference.
	Total int32 `json:"total,omitempty"`
	// ItemsRef is the stored collection (a JSON array), when it does not travel inline.
	ItemsRef *RefView `json:"items_ref,omitempty"`
}

// ExitPayload is the payload of step.exit: the arcs that fired.
type ExitPayload struct {
	Fired []string `json:"fired,omitempty"`
	// CursorDrained marks the exit of a cursor loop whose claims all returned no rows.
	CursorDrained bool `json:"__cursor_drained,omitempty"`
}

// CtxPayload is the payload of ctx.updated.
type CtxPayload struct {
	Values map[string]any `json:"values"`
}

// TerminalPayload is the payload of the terminal events.
type TerminalPayload struct {
	FailedSteps []string `json:"failed_steps,omitempty"`
	Reason      string   `json:"reason,omitempty"`
}

// CallPayload is the payload of call.done: updates made by the tool's policy rules, by scope
// ("ctx", "iter").
type CallPayload struct {
	Set map[string]map[string]any `json:"set,omitempty"`
}

// FailedPayload is the payload of command.failed.
type FailedPayload struct {
	// Retry, when set, asks for the command to run again after a durable timer.
	Retry *RetryRequest `json:"retry,omitempty"`
}

// RetryRequest is a policy's request to retry a command later.
type RetryRequest struct {
	// Attempts is the policy's maximum number of attempts.
	Attempts int32 `json:"attempts"`
	// DelaySeconds is the wait before the next attempt.
	DelaySeconds float64 `json:"delay_seconds"`
}

// TimerPayload is the payload of timer.scheduled and timer.fired.
type TimerPayload struct {
	TimerID string    `json:"timer_id"`
	DueAt   time.Time `json:"due_at"`
	Attempt int32     `json:"attempt,omitempty"`
}
