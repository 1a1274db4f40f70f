package domain

// MaxWorkloadBytes is the public limit on an execution's workload as JSON: the gateway
// holds a start request's workload to it, and the orchestrator the playbook's workload
// merged with the request's. It keeps playbook.started within what the engine publishes
// (natsx.MaxMessageBytes, 256 KiB), leaving room for the rest of the event.
const MaxWorkloadBytes = 192 << 10
