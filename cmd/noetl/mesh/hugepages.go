package mesh

import (
	"errors"

	"github.com/noetl/noetl/internal/platform/hugepages"
)

// HugePageHeap backs this process's Go heap with transparent huge pages
// (hugepages.Heap, with hugepages.DefaultReserve mapped ahead), for a mesh in one process:
// noetl dev, the bench's in-process mesh. It reports whether it did; where huge pages are
// unavailable (another system than Linux, the kernel's setting "never",
// GODEBUG=disablethp=1) it does nothing and says why in reason.
//
// Why: such a mesh grows its heap while it runs its first executions, one page fault per
// 4 KiB, and on a virtual machine a fault is dear. Measured on the 2-core development
// machine (a Firecracker guest; bench, a 1,000-wide fan-out after one warm-up, interleaved
// runs): minor faults per fan-out 250-1,500 -> 50-80, and the Go heap no longer grows
// during the measured fan-out; see docs/operations.md "Development mesh" for the
// throughput and the RSS.
func HugePageHeap() (on bool, reason string, err error) {
	err = hugepages.Heap(hugepages.DefaultReserve)
	if errors.Is(err, hugepages.ErrUnavailable) {
		return false, err.Error(), nil
	}
	return err == nil, "", err
}
