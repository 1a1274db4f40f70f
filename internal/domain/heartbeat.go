package domain

// A worker running a cursor loop's body command whose Command.heartbeat is set reports
// command.heartbeat every that often while the body runs: the fold (cursor.go) keeps the
// latest one's commit time per attempt, and a lease timer that fires while heartbeats
// came within lease_seconds is renewed instead of ending the attempt. No other command
// carries a heartbeat interval, so ordinary steps never send one.

// HeartbeatPayload is the payload of command.heartbeat.
type HeartbeatPayload struct {
	// Beat numbers the command's heartbeats from 1, per run of the command.
	Beat int32 `json:"beat"`
}

// HeartbeatEventID derives the id of heartbeat number beat of command commandID: a
// command run again (redelivered to another worker) sends the same ids, which the
// materializer keeps once.
func HeartbeatEventID(commandID string, beat int32) string {
	return EventID(commandID, EventCommandHeartbeat+":"+itoa(beat))
}

// NeedsDecision reports whether committing an event of eventType calls for a new
// decision: not a decision's own output (IsDecisionOutput), and not a heartbeat, which
// only moves a lease's end that the lease's timer reads when it fires.
func NeedsDecision(eventType string) bool {
	return !IsDecisionOutput(eventType) && eventType != EventCommandHeartbeat
}
