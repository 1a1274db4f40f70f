// Package domain holds NoETL's pure domain logic shared by the services: deterministic ids,
// event type names and the fold of events into execution state.
package domain

import (
	"crypto/sha256"
	"encoding/base32"
	"strconv"
	"strings"
)

var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// deriveID derives prefix and a 26-character id (128 bits) from the parts of a cause tuple.
// Parts are length-prefixed so that no two different tuples share an encoding. The tuple
// is hashed in one buffer (on the stack for usual lengths) and the id is built in place:
// one allocation, the string returned.
func deriveID(prefix byte, parts ...string) string {
	var buf [256]byte
	b := buf[:0]
	for _, p := range parts {
		b = strconv.AppendInt(b, int64(len(p)), 10)
		b = append(b, ':')
		b = append(b, p...)
	}
	sum := sha256.Sum256(b)
	var out [1 + 26]byte
	out[0] = prefix
	idEncoding.Encode(out[1:], sum[:16])
	return string(out[:])
}

// CommandID derives a command's id from its cause: execution, step, loop epoch, iteration
// index (-1 outside loops) and attempt.
func CommandID(executionID, step string, epoch, index, attempt int32) string {
	return deriveID('c', executionID, step, itoa(epoch), itoa(index), itoa(attempt))
}

// CursorClaimID derives the id of a cursor loop's claim command: execution, step, loop
// epoch, claim slot and the claim's sequence number within the slot.
func CursorClaimID(executionID, step string, epoch, slot, claim int32) string {
	return deriveID('c', executionID, step, itoa(epoch), "claim", itoa(slot), itoa(claim))
}

// CursorBodyID derives the id of a cursor loop's body command: execution, step, loop
// epoch, claim slot, the claim that returned the frame, the unit (row index, or 0 for a
// frame processed whole) and the attempt.
func CursorBodyID(executionID, step string, epoch, slot, claim, unit, attempt int32) string {
	return deriveID('c', executionID, step, itoa(epoch), "body", itoa(slot), itoa(claim), itoa(unit), itoa(attempt))
}

// CursorLeaseTimerID is the id of the durable timer that ends the lease of body command
// bodyID (of unit of slot): its slot and unit first, so the fold finds the unit.
func CursorLeaseTimerID(slot, unit int32, bodyID string) string {
	return cursorLeasePrefix + itoa(slot) + ":" + itoa(unit) + ":" + bodyID
}

// CursorLeaseRenewalID is the id of renewal number renewal (from 1) of the lease of body
// command bodyID: the timer armed when the lease's previous timer fired while heartbeats
// kept the attempt alive.
func CursorLeaseRenewalID(slot, unit, renewal int32, bodyID string) string {
	return "lease." + itoa(renewal) + ":" + itoa(slot) + ":" + itoa(unit) + ":" + bodyID
}

// EventID derives an event's id from its cause (a command id, or the id of the committed
// event whose decision produced it) and its type.
func EventID(cause, eventType string) string {
	return deriveID('e', cause, eventType)
}

// IssuedGroupID is the id of a commands.issued whose commands run from command id first
// to command id last: two decisions that group the same iterations alike make one event,
// and groups of different iterations are different events (their fold counts each
// iteration once whatever they share, see Apply).
func IssuedGroupID(first, last string) string {
	return EventID(first+"\x00"+last, EventCommandsIssued)
}

// StepEnterCause is the cause of a step.enter event: the execution, the step and the epoch
// being started.
func StepEnterCause(executionID, step string, epoch int32) string {
	return strings.Join([]string{executionID, step, itoa(epoch)}, "\x00")
}

// ExecutionCause is the cause of execution-level events (playbook.started and the terminal
// events): the execution itself.
func ExecutionCause(executionID string) string { return executionID }

func itoa(v int32) string { return strconv.FormatInt(int64(v), 10) }
