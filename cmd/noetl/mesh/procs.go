package mesh

import (
	"os"
	"runtime"

	"github.com/noetl/noetl/internal/platform/pgxext"
)

// LeaveCoreToPostgres sizes this process's Go scheduler for a mesh that shares its machine
// with its own Postgres (noetl dev with its private cluster, the bench's in-process mesh):
// one processor fewer than the Go runtime chose (the machine's cores, or its cgroup's CPU
// limit), at least one. GOMAXPROCS, when set, wins. It returns the scheduler's size and
// whether it changed it.
//
// Why: every step hands work between goroutines, and between this process and Postgres.
// With a processor for each core, a hand-off to a goroutine wakes a parked thread on the
// other core (a futex call, and on a virtual machine the wake-up of a halted vCPU), whose
// scheduler then spins for work while Postgres waits for that core. Measured on the 2-core
// development machine (bench, interleaved runs, medians), one processor instead of two: a
// chain of 200 steps 1.40 -> 0.75 ms per step (the mesh's CPU per 1,000 steps 1.20 ->
// 0.50 s); 50 executions of 10 steps 925 -> 1,207 steps/s; a 1,000-wide fan-out 8,044 ->
// 10,599 tasks/s; but 1,000 executions of 5 steps at once, which keep more than a core
// busy in the mesh, 2,860 -> 2,323 steps/s.
//
// Left with one processor, the mesh's Postgres connections poll their reads
// (pgxext.SetPollReads, pollReadTries times): with goroutines always runnable, the runtime
// looks at the network only every 10 ms, and each round trip to Postgres waited for it.
func LeaveCoreToPostgres() (procs int, changed bool) {
	n := runtime.GOMAXPROCS(0)
	if os.Getenv("GOMAXPROCS") != "" || n <= 1 {
		return n, false
	}
	runtime.GOMAXPROCS(n - 1)
	if n-1 == 1 {
		pgxext.SetPollReads(pollReadTries)
	}
	return n - 1, true
}

// pollReadTries is how many times a connection of a one-processor mesh tries a read before
// it waits for the network poller. Measured on the 2-core development machine (a 1,000-wide
// fan-out, interleaved runs, medians): without polling 14,137 tasks/s, 300 tries 17,823, and
// 2,000 tries with one connection polling at a time 15,182 (10 runs each); in another set,
// without 12,393 and 2,000 tries 14,835 (12 runs each). 50 executions of 10 steps, with
// many connections waiting at once, did no worse with 300 tries (8 runs).
const pollReadTries = 300
