package mesh

import (
	"errors"
	"os"
	"runtime/debug"

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
	// Ahead is how many bytes of heap were written ahead (hugepages.DefaultReserve), 0
	// without huge pages.
	Ahead int
	// GCPercent is the collector's target HugePageHeap set, 0 where it left it (GOGC set,
	// or no huge pages).
	GCPercent int
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
func HugePageHeap() (Heap, error) {
	err := hugepages.Heap(hugepages.DefaultReserve)
	if errors.Is(err, hugepages.ErrUnavailable) {
		return Heap{Reason: err.Error()}, nil
	}
	if err != nil {
		return Heap{}, err
	}
	h := Heap{HugePages: true, Ahead: hugepages.DefaultReserve}
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(GCPercent)
		h.GCPercent = GCPercent
	}
	return h, nil
}
