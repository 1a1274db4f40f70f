package hugepages

import (
	"bufio"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

func TestSelectedIsTheBracketedChoice(t *testing.T) {
	for in, want := range map[string]string{
		"always [madvise] never\n": "madvise",
		"[always] madvise never":   "always",
		"always madvise [never]":   "never",
		"":                         "",
	} {
		if got := selected(in); got != want {
			t.Errorf("selected(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDisabledByGODEBUGTakesTheLastSetting(t *testing.T) {
	for in, want := range map[string]bool{
		"":                          false,
		"disablethp=1":              true,
		"gctrace=1,disablethp=1":    true,
		"disablethp=1,disablethp=0": false,
		"disablethp=0":              false,
		"madvdontneed=1":            false,
	} {
		if got := disabledByGODEBUG(in); got != want {
			t.Errorf("disabledByGODEBUG(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestAnonymousKeepsPrivateWritableAnonymousMappingsInWholeHugePages(t *testing.T) {
	maps := `00400000-004ab000 r-xp 00000000 fe:00 9986117                            /usr/bin/noetl
0058e000-00599000 rw-p 0018e000 fe:00 9986117                            /usr/bin/noetl
3f5bdc000000-3f5bdc800000 ---p 00000000 00:00 0
3f5bdc800000-3f5bdd400000 rw-p 00000000 00:00 0
3f5bdd400000-3f5bdd500000 rw-p 00000000 00:00 0
7f7a20520000-7f7a20900000 rw-p 00000000 00:00 0
7f7a20900000-7f7a20a00000 rw-s 00000000 00:01 1234                       /dev/shm/x
7ffc0b752000-7ffc0b773000 rw-p 00000000 00:00 0                          [stack]
`
	got := anonymous([]byte(maps))
	want := []span{
		{0x3f5bdc800000, 0x3f5bdd400000}, // already whole huge pages
		{0x7f7a20600000, 0x7f7a20800000}, // shrunk to the one huge page it holds
	}
	if len(got) != len(want) {
		t.Fatalf("anonymous = %x, want %x", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("span %d = %x, want %x", i, got[i], want[i])
		}
	}
}

// TestHeapAdvisesTheHeapNowAndAfterItGrows runs Heap in this test process, then checks the
// VMA flags of heap objects: the mapping of an object allocated now carries "hg" (the
// advice), and so, after garbage collections, does the mapping of heap the runtime maps
// only later, beyond the reserve.
func TestHeapAdvisesTheHeapNowAndAfterItGrows(t *testing.T) {
	m, modeErr := mode()
	err := Heap(8 << 20)
	if modeErr != nil {
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Heap = %v where huge pages are unavailable (%v), want ErrUnavailable", err, modeErr)
		}
		t.Skipf("huge pages unavailable here, and Heap says so: %v", err)
	}
	if err != nil {
		t.Fatalf("Heap: %v", err)
	}
	if m == "always" {
		t.Skip(`the kernel's setting is "always": Heap leaves the heap to it, nothing to check`)
	}
	small := make([]byte, 64<<10)
	if flags := vmFlags(t, unsafe.Pointer(&small[0])); !strings.Contains(flags, " hg") {
		t.Fatalf("the mapping of a heap object has VmFlags %q, want hg (MADV_HUGEPAGE)", flags)
	}
	// Grow the heap well past the reserve: the runtime maps new chunks without the advice.
	var live [][]byte
	for range 96 {
		live = append(live, make([]byte, 1<<20))
	}
	last := unsafe.Pointer(&live[len(live)-1][0])
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(vmFlags(t, last), " hg") {
		if time.Now().After(deadline) {
			t.Fatalf("heap mapped after Heap still has VmFlags %q after 10 s of garbage collections", vmFlags(t, last))
		}
		runtime.GC()
		runtime.Gosched() // let the cleanup goroutine the collection woke run
	}
	runtime.KeepAlive(live)
	runtime.KeepAlive(small)
}

// vmFlags is the VmFlags line of the mapping holding p (/proc/self/smaps).
func vmFlags(t *testing.T, p unsafe.Pointer) string {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	addr := uint64(uintptr(p))
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if r, _, ok := strings.Cut(line, " "); ok && strings.Contains(r, "-") && !strings.HasSuffix(r, ":") {
			lo, hi, _ := strings.Cut(r, "-")
			a, err1 := strconv.ParseUint(lo, 16, 64)
			z, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && a <= addr && addr < z
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.TrimPrefix(line, "VmFlags:")
		}
	}
	t.Fatalf("no mapping holds %p", p)
	return ""
}

// TestFaultInMakesTheWholeBufferResident maps fresh anonymous memory, which the kernel has
// not backed yet (mincore: no page resident), and checks that after faultIn every 4 KiB
// page of it is.
func TestFaultInMakesTheWholeBufferResident(t *testing.T) {
	const size = 8 << 20
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Munmap(b) }()
	if in := residentPages(t, b); in != 0 {
		t.Fatalf("%d of %d pages of a fresh mapping resident before faultIn, want 0", in, size/4096)
	}
	faultIn(b)
	if in := residentPages(t, b); in != size/4096 {
		t.Fatalf("%d of %d pages resident after faultIn, want all", in, size/4096)
	}
}

// residentPages counts the 4 KiB pages of b the kernel backs (mincore); b starts on a page.
func residentPages(t *testing.T, b []byte) int {
	t.Helper()
	vec := make([]byte, (len(b)+4095)/4096)
	if _, _, e := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore: %v", e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}
