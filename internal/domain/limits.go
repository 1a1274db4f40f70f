package domain

// MaxWorkloadBytes is the public limit on an execution's workload as JSON: the gateway
// holds a start request's workload to it, and the orchestrator the playbook's workload
// merged with the request's. It keeps playbook.started within what the engine publishes
// (natsx.MaxMessageBytes, 256 KiB), leaving room for the rest of the event.
const MaxWorkloadBytes = 192 << 10

// MaxHeldEvents and MaxHeldBytes bound the events one step holds until the log shows their
// command issued (sbv1.StepState.Held; see Apply). Such events come only after the tail of
// the log was lost and the commands that tail issued ran anyway, and then only those of
// the commands in flight until the next decision publishes the lost issue again: a few per
// step, or one loop's iterations in flight. The bounds keep a parallel loop over a large
// collection from growing its state without end; an event past them is dropped and counted
// (HeldDropped), and a decision fails the execution rather than leave it waiting for a
// completion the state no longer holds.
const (
	MaxHeldEvents = 1024
	MaxHeldBytes  = 1 << 20
)
