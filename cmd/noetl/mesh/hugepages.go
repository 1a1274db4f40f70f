package mesh

import (
	"errors"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/noetl/noetl/internal/platform/hugepages"
)

// GCPercent is the collector's target (GOGC) of a mesh in one process whose heap is on huge
// pages and written ahead (HugePageHeap): the heap may grow to four times what is live
// before a collection, instead of twice.
const GCPercent = 300

// Heap says what HugePageHeap did to this process's heap.
type Heap struct {
	// HugePages is whether the heap is on transparent huge pages; Reason says why not
	// where they are unavailable.
	HugePages bool
	Reason    string
	// Ahead is how many bytes of heap were written ahead (hugepages.DefaultReserve, or an
	// eighth of a smaller memory limit), 0 without huge pages.
	Ahead int
	// GCPercent is the collector's target HugePageHeap set, 0 where it left it (GOGC set,
	// or no huge pages).
	GCPercent int
	// MemoryLimit is the soft memory limit HugePageHeap set (bytes), 0 where it set none
	// (no memory limit on the process's cgroup, GOMEMLIMIT set, or no huge pages).
	MemoryLimit int64
}

// HugePageHeap backs this process's Go heap with transparent huge pages and writes
// hugepages.DefaultReserve of it ahead (hugepages.Heap), then sets the collector's target to
// GCPercent unless GOGC is set, for a mesh in one process: noetl dev, the bench's in-process
// mesh. Where huge pages are unavailable (another system than Linux, the kernel's setting
// "never", GODEBUG=disablethp=1) it does neither and says why in Heap.Reason.
//
// Why: such a mesh's heap is small (about 20 MiB live during a 1,000-wide fan-out) and
// turns over fast, and on a virtual machine both of a collection's costs are dear: the
// collection itself (about 6 ms of CPU with one processor, once or twice a fan-out of 50
// ms), and the fresh memory a growing heap faults in (3-4 ms a 2 MiB huge page, see package
// hugepages). A heap written ahead is resident before the first execution, and a target of
// 300 lets it use that memory between collections instead of the runtime's scavenger
// returning it to the kernel (which keeps about 10% over the heap goal). The two go
// together: GOGC 200 or 300 alone (a reserve mapped but not written) grew the heap into
// fresh memory during the measured fan-out and was as slow or slower than the default.
// Measured on the 2-core development machine (bench, a 1,000-wide fan-out after one
// warm-up, 12 interleaved runs each, docs/operations.md "Development mesh"): 19,066 ->
// 27,796 tasks/s, faster in 11 of 12 rounds, and the mesh's CPU per 1,000 tasks 43 -> 29 ms,
// lower in all 12. The bench's process peaks at about 195 MB instead of about 100 MB; an
// idle noetl dev holds about 13 MB more once the runtime's scavenger has returned what an
// idle heap's goal does not need.
//
// A process whose cgroup limits its memory (a container) writes at most an eighth of that
// limit ahead, and gets a soft memory limit (debug.SetMemoryLimit) of MemoryLimitShare of it
// unless GOMEMLIMIT is set, so a larger target makes the collector work harder near the
// limit rather than the heap run into it; the private Postgres shares the cgroup.
func HugePageHeap() (Heap, error) {
	limit, _ := memlimit.FromCgroup() // 0 and an error where the cgroup sets no limit
	ahead := aheadWithin(hugepages.DefaultReserve, limit)
	err := hugepages.Heap(ahead)
	if errors.Is(err, hugepages.ErrUnavailable) {
		return Heap{Reason: err.Error()}, nil
	}
	if err != nil {
		return Heap{}, err
	}
	h := Heap{HugePages: true, Ahead: ahead}
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(GCPercent)
		h.GCPercent = GCPercent
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set && limit > 0 {
		h.MemoryLimit = int64(float64(limit) * MemoryLimitShare)
		debug.SetMemoryLimit(h.MemoryLimit)
	}
	return h, nil
}

// MemoryLimitShare is the share of its cgroup's memory limit a mesh in one process sets as
// its soft memory limit (HugePageHeap).
const MemoryLimitShare = 0.6

// aheadWithin is how much heap to write ahead: want, or under a memory limit (bytes, 0 for
// none) at most an eighth of it, in whole 2 MiB huge pages.
func aheadWithin(want int, limit uint64) int {
	if limit == 0 || uint64(want) <= limit/8 {
		return want
	}
	return int(limit/8) &^ (2<<20 - 1)
}
