package domain

import eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"

// OutcomeRival returns the id of the event whose presence in an execution's log makes ev a
// second outcome of its command, which the log refuses; "" for an event the rule does not
// concern (not a worker's outcome, or of no command).
//
// The rule, the only one of its kind: a command's first terminal event, command.completed
// or command.failed, is its outcome. Once it is in the log, nothing of the other outcome
// is taken for that command: after command.completed no call.error and no command.failed,
// after command.failed no call.done and no command.completed. So each command has one
// terminal event in the log, and the call event that stays with it agrees with it.
//
// A command can report twice because commands run at least once: a redelivery after a
// lost or late acknowledgement, a worker presumed dead that finishes after all, a publish
// that stored part of an outcome and was retried. A second run that ends the same way
// repeats the first run's event ids and is a duplicate; one that ends the other way
// (the tool failed this time, or succeeded) is what this rule refuses, instead of a step
// that completed and then failed, or a loop iteration counted done that then fails its
// loop, or a step waiting on a retry timer that an old attempt completes.
//
// The rival is the other outcome's terminal event, found by its id: ids come from causes
// (EventID of the command id and the type), so the writer looks it up under the
// execution's lock like any duplicate. Call events that arrive before any terminal event
// are all kept (call.done and call.error of two runs that overlapped): refusing one of
// them could refuse the only run whose terminal event gets through, and leave the step
// running forever. The terminal event decides, and the fold takes the step's status from
// it.
func OutcomeRival(ev *eventv1.Event) string {
	cmd := ev.GetCommandId()
	if cmd == "" {
		return ""
	}
	switch ev.GetType() {
	case EventCallDone, EventCommandCompleted:
		return EventID(cmd, EventCommandFailed)
	case EventCallError, EventCommandFailed:
		return EventID(cmd, EventCommandCompleted)
	}
	return ""
}
