package hugepages

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// hugePage is the size of a transparent huge page, the kernel's (hpage_pmd_size) where it
// says, 2 MiB (x86-64, arm64 with 4 KiB pages) otherwise; a range is advised in whole huge
// pages.
var hugePage uint64 = 2 << 20

// readviseEvery bounds how often a garbage collection leads to advising again.
const readviseEvery = time.Second

var once struct {
	sync.Once
	err error
}

// Heap advises the process's heap MADV_HUGEPAGE, now and after later garbage collections,
// and maps and writes reserve bytes of heap ahead, freed back to the heap resident (see the
// package comment). It returns once a collection has freed the reserve. Only the first
// call acts; later calls return its answer.
func Heap(reserve int) error {
	once.Do(func() { once.err = start(reserve) })
	return once.err
}

func start(reserve int) error {
	m, err := mode()
	if err != nil {
		return err
	}
	if m == "madvise" {
		if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size"); err == nil {
			if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && n&(n-1) == 0 {
				hugePage = n
			}
		}
	}
	// The reserve is mapped, then advised, then written, so it faults in whole huge pages;
	// under "always" the kernel backs the heap with huge pages unasked and the reserve is
	// written all the same. A mapping the advice failed for does not stop the rest, nor the
	// advice after later collections; the failure is reported.
	err = writeAhead(reserve, func() error {
		if m != "madvise" {
			return nil
		}
		defer arm(time.Now())
		return advise()
	})
	if reserve > 0 {
		// The collection frees the reserve, now resident, back to the heap, which hands its
		// pages out before it maps any more.
		runtime.GC()
	}
	return err
}

// writeAhead maps n bytes of heap (none for n <= 0), calls advise, and writes them so the
// kernel backs them now; they are garbage once it returns. A large object is mapped whole
// and, fresh from the kernel, not zeroed by the runtime, so the write is the first touch.
func writeAhead(n int, advise func() error) error {
	var b []byte
	if n > 0 {
		b = make([]byte, n)
	}
	err := advise()
	faultIn(b)
	return err
}

// faultIn writes one byte in every 4 KiB of b, so the kernel backs all of it now: a huge
// page's first write faults in the whole page.
func faultIn(b []byte) {
	for i := 0; i < len(b); i += 4 << 10 {
		b[i] = 0
	}
}

// mode is the kernel's transparent huge page setting ("always" or "madvise"), or
// ErrUnavailable.
func mode() (string, error) {
	if disabledByGODEBUG(os.Getenv("GODEBUG")) {
		return "", fmt.Errorf("%w: GODEBUG=disablethp=1", ErrUnavailable)
	}
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	m := selected(string(b))
	if m != "always" && m != "madvise" {
		return "", fmt.Errorf("%w: the kernel's setting is %q", ErrUnavailable, m)
	}
	return m, nil
}

// selected is the bracketed choice of a sysfs setting ("always [madvise] never").
func selected(setting string) string {
	for f := range strings.FieldsSeq(setting) {
		if len(f) > 2 && f[0] == '[' && f[len(f)-1] == ']' {
			return f[1 : len(f)-1]
		}
	}
	return ""
}

// disabledByGODEBUG reports whether godebug (GODEBUG's value) sets disablethp=1, the
// runtime's own switch against huge pages, which Heap respects. The last setting wins, as
// in the runtime.
func disabledByGODEBUG(godebug string) bool {
	off := false
	for kv := range strings.SplitSeq(godebug, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k == "disablethp" {
			off = v == "1"
		}
	}
	return off
}

// sentinel is what a garbage collection frees to tell Heap it ran (runtime.AddCleanup).
type sentinel struct{ _ [16]byte }

// arm advises again after the next garbage collection, if readviseEvery has passed since
// last, and arms itself for the one after.
func arm(last time.Time) {
	runtime.AddCleanup(&sentinel{}, func(last time.Time) {
		if time.Since(last) >= readviseEvery {
			_ = advise()
			last = time.Now()
		}
		arm(last)
	}, last)
}

// advise advises every anonymous private read-write mapping of the process MADV_HUGEPAGE,
// in whole huge pages. A mapping the advice fails for (one the runtime changed since
// /proc/self/maps was read) does not stop the others; the first failure is returned.
func advise() error {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return err
	}
	var first error
	for _, r := range anonymous(b) {
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, r.start, r.end-r.start, syscall.MADV_HUGEPAGE); e != 0 && first == nil {
			first = fmt.Errorf("madvise %#x-%#x MADV_HUGEPAGE: %w", r.start, r.end, e)
		}
	}
	return first
}

// span is an address range [start, end).
type span struct{ start, end uintptr }

// anonymous lists the anonymous private read-write mappings of maps (/proc/self/maps),
// each shrunk to the whole huge pages it holds; mappings holding none are left out.
func anonymous(maps []byte) []span {
	var out []span
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		// address perms offset dev inode [path]
		f := strings.Fields(sc.Text())
		if len(f) != 5 || f[1] != "rw-p" || f[4] != "0" {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		a, err1 := strconv.ParseUint(lo, 16, 64)
		z, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		start, end := (a+hugePage-1)&^(hugePage-1), z&^(hugePage-1)
		if start < end {
			out = append(out, span{uintptr(start), uintptr(end)})
		}
	}
	return out
}
