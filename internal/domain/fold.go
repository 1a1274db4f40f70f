package domain

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
)

// ErrGap is returned when an event does not follow the state's sequence number: the reader
// must retry rather than guess.
var ErrGap = errors.New("gap in event sequence")

// NewState returns the empty state of an execution.
func NewState(executionID string) *sbv1.ExecutionState {
	return &sbv1.ExecutionState{ExecutionId: executionID, Steps: map[string]*sbv1.StepState{}}
}

// FoldCopy returns a copy of ev without the command a command.issued carries (its tools,
// input and render scope, for workers), which no fold reads and which is most of such an
// event's size: what a reader that only folds needs of it. Of a commands.issued's commands
// it keeps what the fold reads (each one's id, attempt and iteration). It sets ev's
// commands aside while it copies, so ev must not be read elsewhere meanwhile.
func FoldCopy(ev *eventv1.Event) *eventv1.Event {
	cmd, cmds := ev.Command, ev.Commands
	ev.Command, ev.Commands = nil, nil
	c := proto.Clone(ev).(*eventv1.Event)
	ev.Command, ev.Commands = cmd, cmds
	if len(cmds) > 0 {
		c.Commands = make([]*eventv1.Command, len(cmds))
		for i, x := range cmds {
			c.Commands[i] = &eventv1.Command{CommandId: x.GetCommandId(), Attempt: x.GetAttempt(), Iteration: x.GetIteration()}
		}
	}
	return c
}

// Apply folds one committed event into st. The event's seq must be st.Seq+1. Apply costs
// O(size of the event), independent of the length of the log.
func Apply(st *sbv1.ExecutionState, ev *eventv1.Event) error {
	if ev.GetSeq() != st.GetSeq()+1 {
		return fmt.Errorf("%w: execution %s at seq %d got seq %d", ErrGap, st.GetExecutionId(), st.GetSeq(), ev.GetSeq())
	}
	st.Seq = ev.GetSeq()
	st.LastEventId = ev.GetEventId()
	if err := apply(st, ev); err != nil {
		return err
	}
	// A step.enter or the issue of a command may be what held events of its step waited for.
	if t := ev.GetType(); t == EventStepEnter || IsIssue(t) {
		return releaseHeld(st, st.GetSteps()[ev.GetStep()])
	}
	return nil
}

// commandEvent reports whether typ is an event a worker reports for a command.
func commandEvent(typ string) bool {
	switch typ {
	case EventCommandStarted, EventCallDone, EventCallError, EventCommandCompleted, EventCommandFailed:
		return true
	}
	return false
}

// early reports whether ev, a worker's event for a command, belongs to an epoch or attempt
// of its step that the log has not issued yet: its step.enter or command.issued was lost
// with the tail of the log and published again after the command ran.
func early(s *sbv1.StepState, ev *eventv1.Event) bool {
	if s.GetStatus() == eventv1.StepStatus_STEP_STATUS_UNSPECIFIED {
		return true // the step was never entered
	}
	epoch := ev.GetIteration().GetEpoch()
	switch {
	case epoch > s.GetEpoch():
		return true
	case epoch < s.GetEpoch() || s.GetLoop() != nil || s.GetCursor() != nil:
		return false // a late event of an older epoch, or a loop's (issued with its enter)
	}
	return ev.GetCommandId() != s.GetCommandId() && ev.GetAttempt() > s.GetAttempt()
}

// hold keeps ev in s.Held until the log shows its command issued, within MaxHeldEvents
// events and MaxHeldBytes encoded bytes per step. An event whose id is held already is the
// duplicate it looks like and is dropped; one past a bound is dropped and counted in
// s.HeldDropped, which makes the next decision fail the execution. The held size is kept in
// s.HeldBytes, so holding costs the size of ev and a scan of at most MaxHeldEvents ids.
func hold(s *sbv1.StepState, ev *eventv1.Event) {
	if id := ev.GetEventId(); id != "" {
		for _, h := range s.Held {
			if h.GetEventId() == id {
				return
			}
		}
	}
	n := int64(proto.Size(ev))
	if len(s.Held) >= MaxHeldEvents || s.HeldBytes+n > MaxHeldBytes {
		s.HeldDropped++
		return
	}
	s.Held = append(s.Held, ev)
	s.HeldBytes += n
}

// releaseHeld applies the held events of step s that are no longer early, in log order
// (those still early are held again).
func releaseHeld(st *sbv1.ExecutionState, s *sbv1.StepState) error {
	if s == nil || len(s.Held) == 0 {
		return nil
	}
	held := s.Held
	s.Held, s.HeldBytes = nil, 0
	for _, ev := range held {
		if err := apply(st, ev); err != nil {
			return err
		}
	}
	return nil
}

// apply folds ev into st (Apply without the seq bookkeeping).
func apply(st *sbv1.ExecutionState, ev *eventv1.Event) error {
	if st.Steps == nil {
		st.Steps = map[string]*sbv1.StepState{}
	}
	step := func() *sbv1.StepState {
		s := st.Steps[ev.GetStep()]
		if s == nil {
			s = &sbv1.StepState{Name: ev.GetStep()}
			st.Steps[ev.GetStep()] = s
		}
		return s
	}
	if commandEvent(ev.GetType()) && ev.GetStep() != "" && early(step(), ev) {
		hold(step(), ev)
		return nil
	}
	if s := st.Steps[ev.GetStep()]; s.GetCursor() != nil && cursorEvent(ev.GetType()) {
		return applyCursor(st, s, ev) // cursor.go
	}
	switch ev.GetType() {
	case EventPlaybookStarted:
		var p StartedPayload
		if err := json.Unmarshal(ev.GetPayloadJson(), &p); err != nil {
			return fmt.Errorf("playbook.started payload: %w", err)
		}
		st.Tenant = ev.GetTenant()
		st.PlaybookPath = p.Path
		st.PlaybookVersion = p.Version
		st.ParentExecutionId = ev.GetParentExecutionId()
		st.Status = eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING
		st.StartTime = ev.GetCommitTime()
		if p.TimeoutSeconds > 0 && ev.GetCommitTime() != nil {
			// From the commit time, which every fold of the log reads alike.
			st.Deadline = timestamppb.New(ev.GetCommitTime().AsTime().Add(time.Duration(p.TimeoutSeconds * float64(time.Second))))
		}
		w, err := json.Marshal(p.Workload)
		if err != nil {
			return err
		}
		st.WorkloadJson = w
		st.Labels = p.Labels
		st.RerunOf = p.RerunOf
		st.FromStep = p.FromStep
		if err := applyReused(st, ev.GetEventId(), p); err != nil {
			return err
		}
	case EventStepEnter:
		p, err := EntryOf(ev)
		if err != nil {
			return err
		}
		enter(st, step(), ev, *p)
	case EventStepSkipped:
		s := step()
		if s.Status == eventv1.StepStatus_STEP_STATUS_RUNNING {
			st.Running--
		}
		s.Status = eventv1.StepStatus_STEP_STATUS_SKIPPED
		s.DoneEventId = ev.GetEventId()
		s.Routed = true
	case EventTimerScheduled, EventTimerFired:
		var p TimerPayload
		if err := json.Unmarshal(ev.GetPayloadJson(), &p); err != nil {
			return fmt.Errorf("%s payload: %w", ev.GetType(), err)
		}
		if ev.GetStep() == "" {
			// The execution's own timer: its deadline.
			if p.TimerID == DeadlineTimerID(st.GetExecutionId()) && st.GetDeadline() != nil {
				st.DeadlineScheduled = true
				st.DeadlinePassed = st.DeadlinePassed || ev.GetType() == EventTimerFired
			}
			return nil
		}
		s := step()
		if s.Retry == nil {
			return nil
		}
		s.Retry.TimerId = p.TimerID
		if ev.GetType() == EventTimerFired {
			s.Retry.Fired = true
		}
	case EventCommandIssued:
		s := step()
		// A plain step's entry travels in its first command.issued (logs written before
		// carry a step.enter before it).
		p, err := EntryOf(ev)
		if err != nil {
			return err
		}
		if p != nil {
			enter(st, s, ev, *p)
		}
		s.Retry = nil
		if s.Loop != nil {
			// Iterations are issued in index order, so the issued count is one past the
			// highest index issued (as a commands.issued counts, below): an iteration that a
			// group of another decision issued too counts once, whichever was logged first.
			if ev.GetIteration().GetEpoch() == s.Epoch {
				s.Loop.Issued = max(s.Loop.Issued, ev.GetIteration().GetIndex()+1)
			}
			return nil
		}
		s.CommandId = ev.GetCommandId()
		s.Attempt = ev.GetAttempt()
		s.Started = false
	case EventCommandsIssued:
		// The iterations of a loop step that one decision issued together (only loop steps
		// issue them). A loop issues its iterations in index order, so the issued count is
		// one past the highest index issued: two groups of different decisions that share
		// iterations (decided on different states, each committed) count them once, in
		// either order.
		s := step()
		s.Retry = nil
		if s.Loop != nil {
			for _, c := range ev.GetCommands() {
				if c.GetIteration().GetEpoch() == s.Epoch {
					s.Loop.Issued = max(s.Loop.Issued, c.GetIteration().GetIndex()+1)
				}
			}
		}
	case EventCommandStarted:
		s := step()
		if s.Loop == nil && ev.GetCommandId() == s.CommandId {
			s.Started = true
		}
	case EventCallDone:
		if err := applyCall(st, step(), ev); err != nil {
			return err
		}
	case EventCallError:
		s := step()
		if s.Loop != nil {
			if ev.GetIteration().GetEpoch() == s.Epoch {
				s.Error = ev.GetError()
			}
			return nil
		}
		if ev.GetCommandId() != s.CommandId {
			return nil
		}
		s.Error = ev.GetError()
	case EventCommandCompleted, EventCommandFailed:
		s := step()
		if CarriesCall(ev) {
			// A worker's single outcome event: the call's result first, as call.done.
			if err := applyCall(st, s, ev); err != nil {
				return err
			}
		}
		if s.Loop != nil {
			// Late events of an older epoch, or after the step finished, change nothing.
			if ev.GetIteration().GetEpoch() != s.Epoch || s.Status != eventv1.StepStatus_STEP_STATUS_RUNNING {
				return nil
			}
			if ev.GetType() == EventCommandCompleted {
				s.Loop.Done++
				if int(s.Loop.Done) < LoopTotal(s.Loop) {
					return nil
				}
				// A list too large for the state has no result yet: the orchestrator
				// assembles it by reference and the step.exit that routes the loop
				// carries it (LoopResultsPending).
				s.ResultJson = nil
				s.ResultRef = nil
				if !s.Loop.GetResultsOmitted() {
					s.ResultJson = joinResults(s.Loop.GetResultsJson())
				}
			}
		} else if ev.GetCommandId() != s.CommandId || s.Status != eventv1.StepStatus_STEP_STATUS_RUNNING {
			return nil
		} else if ev.GetType() == EventCommandFailed && len(ev.GetPayloadJson()) > 0 {
			var p FailedPayload
			if err := json.Unmarshal(ev.GetPayloadJson(), &p); err != nil {
				return fmt.Errorf("command.failed payload: %w", err)
			}
			if p.Retry != nil && ev.GetAttempt() < p.Retry.Attempts {
				// The step stays running: a durable timer will run the next attempt.
				s.Retry = &sbv1.RetryState{NextAttempt: ev.GetAttempt() + 1, DelaySeconds: p.Retry.DelaySeconds, FailedTime: ev.GetCommitTime(), FailedEventId: ev.GetEventId()}
				s.Error = ev.GetError()
				return nil
			}
		}
		st.Running--
		s.DoneEventId = ev.GetEventId()
		s.Routed = false
		if ev.GetType() == EventCommandCompleted {
			s.Status = eventv1.StepStatus_STEP_STATUS_COMPLETED
		} else {
			s.Status = eventv1.StepStatus_STEP_STATUS_FAILED
			if ev.GetError() != nil {
				s.Error = ev.GetError()
			}
			st.FailedSteps = append(st.FailedSteps, ev.GetStep())
		}
	case EventStepExit:
		s := step()
		if LoopResultsPending(s) && ev.GetResultRef() != nil {
			s.ResultRef = ev.GetResultRef()
			s.ResultJson = nil
		}
		s.Routed = true
		s.Fired = nil
		if len(ev.GetPayloadJson()) > 0 {
			var p ExitPayload
			if err := json.Unmarshal(ev.GetPayloadJson(), &p); err != nil {
				return fmt.Errorf("step.exit payload: %w", err)
			}
			s.Fired = p.Fired
		}
	case EventCtxUpdated:
		var p CtxPayload
		if err := json.Unmarshal(ev.GetPayloadJson(), &p); err != nil {
			return fmt.Errorf("ctx.updated payload: %w", err)
		}
		if err := mergeCtx(st, p.Values); err != nil {
			return err
		}
	case EventVarsUpdated:
		return applyVars(st, ev)
	case EventPlaybookCompleted:
		st.Status = eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED
		st.ResultJson = ev.GetResultJson()
		st.EndTime = ev.GetCommitTime()
	case EventPlaybookFailed:
		st.Status = eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED
		st.Error = ev.GetError()
		st.EndTime = ev.GetCommitTime()
	case EventPlaybookCancelled:
		st.Status = eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED
		st.Error = ev.GetError()
		st.EndTime = ev.GetCommitTime()
	}
	return nil
}

// applyReused folds a rerun's seed (StartedPayload.Reused and Ctx) into the new state:
// each reused step completed and routed, with the original's result and fired arcs, so no
// decision runs or routes it again; startID is the playbook.started event, which stands
// for the event that finished them.
func applyReused(st *sbv1.ExecutionState, startID string, p StartedPayload) error {
	for _, r := range p.Reused {
		s := &sbv1.StepState{Name: r.Name, Status: eventv1.StepStatus_STEP_STATUS_COMPLETED, Routed: true, Fired: r.Fired, DoneEventId: startID, Reused: true}
		if r.Skipped {
			s.Status = eventv1.StepStatus_STEP_STATUS_SKIPPED
		}
		if len(r.Result) > 0 {
			s.ResultJson = []byte(r.Result)
		}
		if len(r.ResultRef) > 0 {
			s.ResultRef = &eventv1.ResultRef{}
			if err := protojson.Unmarshal(r.ResultRef, s.ResultRef); err != nil {
				return fmt.Errorf("playbook.started payload: reused step %q: result_ref: %w", r.Name, err)
			}
		}
		st.Steps[r.Name] = s
	}
	return mergeCtx(st, p.Ctx)
}

// IsTerminalStatus reports whether an execution status is final.
func IsTerminalStatus(s eventv1.ExecutionStatus) bool {
	switch s {
	case eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED,
		eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED,
		eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED:
		return true
	}
	return false
}

// mergeCtx merges values into the execution context (latest write wins per key).
func mergeCtx(st *sbv1.ExecutionState, values map[string]any) error {
	if len(values) == 0 {
		return nil
	}
	ctx := map[string]any{}
	if len(st.CtxJson) > 0 {
		if err := json.Unmarshal(st.CtxJson, &ctx); err != nil {
			return err
		}
	}
	for k, v := range values {
		ctx[k] = v
	}
	b, err := json.Marshal(ctx)
	if err != nil {
		return err
	}
	st.CtxJson = b
	return nil
}

// LoopResultsInlineMax is the inline budget of a loop's list of iteration results (the
// JSON array it joins into). A loop whose list would exceed it does not keep the list in
// its state: each iteration's result stays in its call.done event, and when the loop
// completes the orchestrator assembles the list into the resultstore (LoopResultsPending).
// This keeps a state's size independent of the number of iterations.
const LoopResultsInlineMax = 64 << 10

// nullCost is the size of an iteration result that is not there yet in the joined list
// ("null" and its comma).
const nullCost = 5

// LoopTotal is the number of items of a loop's collection.
func LoopTotal(l *sbv1.LoopState) int {
	if l.GetTotal() > 0 || l.GetItemsRef() != nil {
		return int(l.GetTotal())
	}
	return len(l.GetItemsJson()) // a state written before Total existed
}

// LoopResultsPending reports whether s is a loop step that completed with its list of
// iteration results too large for the state, and whose result (that list, by reference)
// is not folded yet: the decision that routes it needs the list's reference as an input,
// and its step.exit carries that reference.
func LoopResultsPending(s *sbv1.StepState) bool {
	return s.GetLoop().GetResultsOmitted() && s.GetStatus() == eventv1.StepStatus_STEP_STATUS_COMPLETED && !s.GetRouted()
}

// LoopResultsID is the resultstore id of the assembled list of iteration results of the
// loop epoch started by step.enter event enterEventID: deciding again rewrites the same
// entry.
func LoopResultsID(enterEventID string) string { return enterEventID + "-results" }

// LoopResultsExtracted is the extracted summary of an assembled list of n iteration
// results.
func LoopResultsExtracted(n int) []byte {
	return []byte(fmt.Sprintf(`{"_summary":"array","length":%d}`, n))
}

// applyCall folds a call's result into its step: an iteration's into its loop's list, a
// single command's into the step (only the step's current command), with the ctx writes
// of its policy rules. It serves call.done and a command.completed that carries the call
// (CarriesCall).
func applyCall(st *sbv1.ExecutionState, s *sbv1.StepState, ev *eventv1.Event) error {
	if s.Loop != nil {
		i := ev.GetIteration().GetIndex()
		if ev.GetIteration().GetEpoch() == s.Epoch && i >= 0 && int(i) < LoopTotal(s.Loop) {
			if err := keepResult(s.Loop, int(i), ev); err != nil {
				return err
			}
			if len(ev.GetPayloadJson()) > 0 {
				var p CallPayload
				if err := json.Unmarshal(ev.GetPayloadJson(), &p); err != nil {
					return fmt.Errorf("call.done payload: %w", err)
				}
				if err := mergeCtx(st, p.Set["ctx"]); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if ev.GetCommandId() != s.CommandId {
		return nil // a late event of an older command
	}
	s.ResultJson = ev.GetResultJson()
	s.ResultRef = ev.GetResultRef()
	if len(ev.GetPayloadJson()) > 0 {
		var p CallPayload
		if err := json.Unmarshal(ev.GetPayloadJson(), &p); err != nil {
			return fmt.Errorf("call.done payload: %w", err)
		}
		if err := mergeCtx(st, p.Set["ctx"]); err != nil {
			return err
		}
	}
	return nil
}

// CarriesCall reports whether ev, a command.completed, carries its call's result (the
// worker's single outcome event) rather than following a call.done, as logs written
// before that did. A carried result is never empty: a null result is the JSON null.
func CarriesCall(ev *eventv1.Event) bool {
	return ev.GetType() == EventCommandCompleted && (len(ev.GetResultJson()) > 0 || ev.GetResultRef() != nil || len(ev.GetPayloadJson()) > 0)
}

// IterationResult returns the element an iteration's call.done contributes to its loop's
// list of results: the inline result, or for a result held by reference the value a
// step's reference shows in a scope (its extracted summary with _ref), never the payload.
func IterationResult(ev *eventv1.Event) ([]byte, error) {
	if r := ev.GetResultRef(); r != nil {
		return json.Marshal(StepResult{Ref: RefViewOf(r)}.Value())
	}
	return ev.GetResultJson(), nil
}

// IsIterationResult reports whether ev is the call.done (or the command.completed that
// carries the call) of an iteration of the loop epoch
// (step, epoch) of total items, and if so its index.
func IsIterationResult(ev *eventv1.Event, step string, epoch int32, total int) (int, bool) {
	if (ev.GetType() != EventCallDone && !CarriesCall(ev)) || ev.GetStep() != step || ev.GetIteration().GetEpoch() != epoch {
		return 0, false
	}
	i := ev.GetIteration().GetIndex()
	if i < 0 || int(i) >= total {
		return 0, false
	}
	return int(i), true
}

// newLoopState starts a loop's state from its step.enter payload. Results are kept only
// when the list of all iterations could fit in the inline budget.
func newLoopState(p *LoopPayload) *sbv1.LoopState {
	l := &sbv1.LoopState{Iterator: p.Iterator}
	if p.ItemsRef != nil {
		l.ItemsRef = p.ItemsRef.ResultRef()
		l.Total = p.Total
	} else {
		l.ItemsJson = make([][]byte, len(p.Items))
		for i, it := range p.Items {
			l.ItemsJson[i] = it
		}
		l.Total = int32(len(p.Items))
	}
	l.ResultsBytes = 2 + nullCost*int64(l.Total)
	if l.ResultsBytes > LoopResultsInlineMax {
		l.ResultsOmitted = true
	} else {
		l.ResultsJson = make([][]byte, l.Total)
	}
	return l
}

// keepResult records iteration i's result in the loop's list, or drops the list once it
// would exceed the inline budget.
func keepResult(l *sbv1.LoopState, i int, ev *eventv1.Event) error {
	if l.ResultsOmitted || i >= len(l.ResultsJson) {
		return nil
	}
	// A large iteration result stays by reference: the step's list holds the reference's
	// view, never the payload.
	b, err := IterationResult(ev)
	if err != nil {
		return err
	}
	l.ResultsBytes += resultCost(b) - resultCost(l.ResultsJson[i])
	if l.ResultsBytes > LoopResultsInlineMax {
		l.ResultsOmitted = true
		l.ResultsJson = nil
		return nil
	}
	l.ResultsJson[i] = b
	return nil
}

func resultCost(b []byte) int64 { return max(int64(len(b)), 4) + 1 }

// joinResults builds the JSON array of a loop's iteration results (null for an empty one).
func joinResults(parts [][]byte) []byte {
	b := make([]byte, 0, 2+len(parts)*8)
	b = append(b, '[')
	for i, p := range parts {
		if i > 0 {
			b = append(b, ',')
		}
		if len(p) == 0 {
			p = []byte("null")
		}
		b = append(b, p...)
	}
	return append(b, ']')
}

// enter applies the entry of step s in a new epoch, described by p: by a step.enter or by
// the command.issued that enters a plain step (IssuedPayload.Enter), ev either.
func enter(st *sbv1.ExecutionState, s *sbv1.StepState, ev *eventv1.Event, p EnterPayload) {
	if s.Status != eventv1.StepStatus_STEP_STATUS_RUNNING {
		st.Running++
	}
	s.Status = eventv1.StepStatus_STEP_STATUS_RUNNING
	s.Epoch = p.Epoch
	// The new epoch has issued no command yet (command.issued sets them).
	s.CommandId, s.Attempt, s.Started = "", 0, false
	s.EnterEventId = ev.GetEventId()
	s.Routed = false
	s.Error = nil
	s.Loop = nil
	s.Retry = nil
	s.Cursor = nil
	if p.Cursor != nil {
		s.Cursor = newCursorState(p.Cursor)
	}
	if p.Loop != nil {
		s.Loop = newLoopState(p.Loop)
		s.Loop.EnterSeq = ev.GetSeq()
		if s.Loop.Total == 0 {
			// An empty collection completes the step at once.
			st.Running--
			s.Status = eventv1.StepStatus_STEP_STATUS_COMPLETED
			s.ResultJson = []byte("[]")
			s.ResultRef = nil
			s.DoneEventId = ev.GetEventId()
		}
	}
}

// EntryOf returns the entry ev makes of its step in a new epoch, or nil when it makes none:
// a step.enter's payload, or the entry a command.issued carries for a step of one command
// (IssuedPayload.Enter). Readers that mark where a step starts use it, so that logs with
// either form read alike.
func EntryOf(ev *eventv1.Event) (*EnterPayload, error) {
	switch ev.GetType() {
	case EventStepEnter:
		var p EnterPayload
		if len(ev.GetPayloadJson()) > 0 {
			if err := json.Unmarshal(ev.GetPayloadJson(), &p); err != nil {
				return nil, fmt.Errorf("step.enter payload: %w", err)
			}
		}
		return &p, nil
	case EventCommandIssued:
		if len(ev.GetPayloadJson()) == 0 {
			return nil, nil
		}
		var p IssuedPayload
		if err := json.Unmarshal(ev.GetPayloadJson(), &p); err != nil {
			return nil, fmt.Errorf("command.issued payload: %w", err)
		}
		return p.Enter, nil
	}
	return nil, nil
}

// Enters reports whether ev enters its step in a new epoch (EntryOf, its payload unread
// when malformed).
func Enters(ev *eventv1.Event) bool {
	p, err := EntryOf(ev)
	return err == nil && p != nil
}
