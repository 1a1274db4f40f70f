// Package hugepages backs the Go heap with transparent huge pages, for a process whose page
// faults are dear.
//
// The Go runtime maps its heap in chunks and lets the kernel back each page on first touch.
// Under the kernel's usual setting (/sys/kernel/mm/transparent_hugepage/enabled is
// "madvise") that is one fault per 4 KiB, since the runtime no longer asks for huge pages
// itself. On a virtual machine a fault costs far more than on bare metal: on the
// development machine (a Firecracker guest) touching fresh anonymous memory costs 11 us
// per 4 KiB page, and 0.27 us per 4 KiB once the range is advised MADV_HUGEPAGE (2 MiB
// pages). A mesh in one process (noetl dev) grows its heap while it runs its first
// executions, and a 1,000-wide fan-out paid 250-1,500 faults, 3-15 ms of its 50-80 ms.
//
// Heap maps reserve bytes of heap ahead (allocated and dropped at once, never touched, so
// nothing of it is resident until the runtime hands it out), then advises every anonymous
// private read-write mapping of the process MADV_HUGEPAGE: the heap, goroutine stacks (which
// the runtime carves from the heap) and the runtime's own metadata. Heap the runtime maps
// later is advised after a garbage collection, at most once a second.
//
// What holds: nothing but the advice changes (no memory is unmapped, moved or protected,
// and no mapping that is not anonymous, private and writable is touched); RSS rounds up to
// a huge page (2 MiB on x86-64) where the heap touches its range; where huge pages are off
// (the kernel's setting "never", GODEBUG=disablethp=1, or another system than Linux) Heap
// does nothing and says so with ErrUnavailable; where they are "always" the kernel already
// uses them and Heap does nothing.
package hugepages

import "errors"

// ErrUnavailable is Heap's answer where transparent huge pages cannot be asked for: another
// system than Linux, the kernel's setting "never" (or no setting to read), or
// GODEBUG=disablethp=1.
var ErrUnavailable = errors.New("transparent huge pages unavailable")

// DefaultReserve is the heap Heap maps ahead for a mesh in one process: one of the
// runtime's 64 MiB heap arenas, more than a 1,000-wide fan-out's heap.
const DefaultReserve = 64 << 20
