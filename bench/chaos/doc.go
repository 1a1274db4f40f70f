// Package chaos is NoETL's fault harness (issue 13): it runs the whole engine as real
// processes on 127.0.0.1, drives a load of executions through the public API while a
// nemesis kills, pauses and restarts those processes from a printed seed, drains, and
// then checks the histories, Jepsen style.
//
// The cluster: a private Postgres (pgembed, in the run directory), a three-node NATS
// JetStream cluster (bench/chaos/natsnode processes with routes between them; the
// services declare their streams with NOETL_STREAM_REPLICAS=3), and every service as its
// own OS process built once from the workspace: a gateway, two orchestrators (behind a
// TCP balancer, as a Kubernetes Service would put them), two materializers of one
// consumer group (replica ids stable per slot), a statebuilder, a resultstore, two
// shared-pool workers and one system-pool worker. Each process runs in its own process
// group and is killed by pid when the run ends or is interrupted; logs go to
// <run dir>/logs.
//
// The load: N executions from ten tenants (API keys made through the admin API), at most
// 50 in flight, of eight playbooks (playbooks.go): a 5-step chain, a 1 -> 20 -> 1 fan-out,
// a step failing its first two runs, a delayed retry on a durable timer, a 3 MiB result
// by reference read back by the next step, a sub-playbook, a system playbook and an http
// call that sends a sentinel token credential to an echo server. Every command runs one
// effect probe: a postgres tool inserting (command_id, attempt) into effects and
// command_id into effect_once ON CONFLICT DO NOTHING, connecting as its tenant's own
// Postgres role. Starts carry an idempotency key; every call is recorded as invoke, ok,
// fail (a definite refusal) or info (unknown outcome) in history.jsonl, and a start is
// retried with its key until acknowledged.
//
// The nemesis: F faults of ten kinds (kill -9 of the gateway, an orchestrator, a
// materializer, the statebuilder, the resultstore, a worker, a NATS node and Postgres, each
// restarted after 1-20 s; a SIGSTOP pause past the target's ack wait or lease, then
// SIGCONT; a graceful restart of a whole group), F/10 of each kind, drawn and ordered by
// math/rand/v2 from the seed, so a seed replays the same schedule and the same load. The
// faults that ran are written to faults.jsonl in the run directory, timed on the clock of
// history.jsonl and on the wall clock (the services' logs).
//
// What the checker proves, reading Postgres directly and the API after the drain (each
// criterion printed with counts and examples, then lost=L duplicated=D unexpected=U; the
// run passes when all three are zero and nothing else went wrong):
//
//   - every acknowledged start names exactly one execution, which is in the log, and no
//     execution exists that no start asked for (a retried key never made a second one);
//   - every execution, children included, has exactly one terminal event, and nothing
//     follows it;
//   - every execution's seq runs 1..max with no gap and no duplicate, and
//     noetl.execution agrees with the log;
//   - every command the log completed ran its probe at least once (effects) and exactly
//     once as a business effect (effect_once); no effect exists of a command never
//     issued; the duplication factor (effects rows per command) is reported with the
//     extra runs accounted for by in-command retries and by fault windows;
//   - at most one outcome is accepted per command, and one completed attempt per step
//     iteration;
//   - every ResultRef in the log resolves through GET /v1/results/{id}, its digest equals
//     the resultstore's and the SHA-256 of the stored chunks, and the 3 MiB blobs read back
//     are what the probe produced (and the next step read all of it);
//   - a state folded from scratch (domain.Apply) twice is byte-identical and equals the
//     statebuilder's GetState, for every execution;
//   - no event, command, result or effect crosses a tenant;
//   - the sentinel secret is nowhere in Postgres's data directory, the NATS stores or the
//     service logs (and did reach the echo server);
//   - RSS, threads, open files and goroutines per process after the drain are reported
//     against the baseline, and fail the run only when grossly off.
//
// Reported without failing the run: the duplication factor, the unknown outcomes of
// starts (and which call created the execution), how the executions ended by playbook
// (each playbook is built to complete, so a failure names an exhausted retry or an engine
// error), and per fault kind the longest stretch without a commit and the start calls not
// answered ok while it lasted.
//
// The checker does not prove liveness beyond the drain window, nor anything about
// executions the load did not start (their children aside).
package chaos
