package domain

import "strconv"

// A worker running a cursor loop's body command whose Command.heartbeat is set reports
// command.heartbeat every that often while the body runs: the fold (cursor.go) keeps the
// latest one's commit time per attempt, and a lease timer that fires while heartbeats
// came within lease_seconds is renewed instead of ending the attempt. No other command
// carries a heartbeat interval, so ordinary steps never send one.

// HeartbeatPayload is the payload of command.heartbeat.
type HeartbeatPayload struct {
	// Beat numbers the command's heartbeats from 1, per delivery of the command.
	Beat int32 `json:"beat"`
	// Delivery names the delivery of the command that sent the beat (HeartbeatDelivery);
	// empty in logs written before heartbeats named it.
	Delivery string `json:"delivery,omitempty"`
}

// HeartbeatDelivery names one delivery of a command to a worker: the commands stream's
// sequence of the message delivered (a command the reconciler published again is another
// message) and that message's delivery count (the stream hands a message whose worker died
// or gave it back to another worker, counting up). A worker that retries a heartbeat's
// publish sends it under the same delivery; a replacement worker's delivery differs.
func HeartbeatDelivery(streamSeq, delivered uint64) string {
	return strconv.FormatUint(streamSeq, 10) + "." + strconv.FormatUint(delivered, 10)
}

// HeartbeatEventID derives the id of heartbeat number beat of delivery (HeartbeatDelivery)
// of command commandID. Beats count from 1 in each delivery, so a replacement worker's
// beats get ids of their own instead of repeating the dead worker's, which the
// materializer would drop as duplicates while the replacement's lease ran out. An empty
// delivery gives the ids of logs written before deliveries were named (command and beat
// alone). Nothing reads a heartbeat's number from its id: the fold keeps the latest
// heartbeat's commit time (cursorlease.go).
func HeartbeatEventID(commandID, delivery string, beat int32) string {
	if delivery == "" {
		return EventID(commandID, EventCommandHeartbeat+":"+itoa(beat))
	}
	return EventID(commandID, EventCommandHeartbeat+":"+delivery+":"+itoa(beat))
}

// NeedsDecision reports whether committing an event of eventType calls for a new
// decision: not a decision's own output (IsDecisionOutput), and not a heartbeat, which
// only moves a lease's end that the lease's timer reads when it fires.
func NeedsDecision(eventType string) bool {
	return !IsDecisionOutput(eventType) && eventType != EventCommandHeartbeat
}
