// Package hugepages backs the Go heap with transparent huge pages, for a process whose page
// faults are dear.
//
// The Go runtime maps its heap in chunks and lets the kernel back each page on first touch.
// Under the kernel's usual setting (/sys/kernel/mm/transparent_hugepage/enabled is
// "madvise") that is one fault per 4 KiB, since the runtime no longer asks for huge pages
// itself. On a virtual machine a fault costs far more than on bare metal: on the
// development machine touching fresh anonymous memory costs 11 us per 4 KiB page, and 3-4
// ms per 2 MiB page once the range is advised MADV_HUGEPAGE (about 6 us per 4 KiB; an
// earlier measurement there, 0.27 us, did not repeat on 2026-12-07). A mesh in one
// process (noetl dev) grows its heap while it runs its first executions, and a 1,000-wide
// fan-out paid 250-1,500 faults, 3-15 ms of its 50-80 ms, before its heap was advised.
//
// Heap maps reserve bytes of heap ahead, advises every anonymous private read-write mapping
// of the process MADV_HUGEPAGE (the heap, goroutine stacks, which the runtime carves from
// the heap, and the runtime's own metadata), writes the reserve once so the kernel backs it
// now, in huge pages, and lets a collection free it back to the heap. Heap the runtime maps
// later is advised after a garbage collection, at most once a second.
//
// Why the reserve is written ahead: a fresh page costs its fault however large the page.
// On the development machine a first write costs 3-4 ms per 2 MiB huge page and 6 ms per 2
// MiB of 4 KiB pages, where writing 2 MiB already resident costs 87 us (a C program, mmap,
// madvise and one write per page). A mesh in one process whose heap grew
// into untouched reserve paid one or two huge pages in a 1,000-wide fan-out of 45-60 ms of
// CPU; the runtime frees a heap's pages to itself at each collection and hands them out
// again, so a heap that stays inside memory already resident pays none.
//
// What holds: nothing but the advice changes the mappings (no memory is unmapped, moved or
// protected, and no mapping that is not anonymous, private and writable is touched); RSS
// rounds up to a huge page (2 MiB on x86-64) where the heap touches its range, and starts
// at least reserve bytes larger, of which the runtime's scavenger returns to the kernel
// what its heap goal does not need (about 10% over the goal, the highest addresses first,
// while the heap takes the lowest); where huge pages are off (the kernel's setting "never",
// GODEBUG=disablethp=1, or another system than Linux) Heap does nothing and says so with
// ErrUnavailable; where they are "always" the kernel already uses them and Heap writes the
// reserve only.
package hugepages

import "errors"

// ErrUnavailable is Heap's answer where transparent huge pages cannot be asked for: another
// system than Linux, the kernel's setting "never" (or no setting to read), or
// GODEBUG=disablethp=1.
var ErrUnavailable = errors.New("transparent huge pages unavailable")

// DefaultReserve is the heap Heap maps and writes ahead for a mesh in one process: the heap
// goal of a 1,000-wide fan-out's heap (live about 20 MiB) under the collector's target such
// a mesh runs with (GOGC 300: four times the live heap), and some over.
const DefaultReserve = 128 << 20
