package domain

import (
	"encoding/json"
	"time"
)

// Event types. Dotted names, as docs/architecture.md ("Envelopes") lists them.
const (
	EventPlaybookStarted   = "playbook.started"
	EventStepEnter         = "step.enter"
	EventStepSkipped       = "step.skipped"
	EventCtxUpdated        = "ctx.updated"
	EventCommandIssued     = "command.issued"
	EventCommandStarted    = "command.started"
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
	case EventStepEnter, EventCommandIssued, EventStepExit, EventStepSkipped, EventCtxUpdated, EventTimerScheduled:
		return true
	}
	return false
}

// StartedPayload is the payload of playbook.started.
type StartedPayload struct {
	Path     string         `json:"path"`
	Version  int64          `json:"version"`
	Workload map[string]any `json:"workload"`
}

// EnterPayload is the payload of step.enter.
type EnterPayload struct {
	Epoch int32 `json:"epoch"`
	// Loop is set when the step loops over a collection.
	Loop *LoopPayload `json:"loop,omitempty"`
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
