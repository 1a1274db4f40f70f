package replica

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// selfIncarnation returns this process's start time and pid namespace inode (zero when
// they cannot be read).
func selfIncarnation() (start, pidns uint64) {
	start, _ = processStart(os.Getpid())
	if link, err := os.Readlink("/proc/self/ns/pid"); err == nil { // "pid:[4026531836]"
		pidns, _ = strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(link, "pid:["), "]"), 10, 64)
	}
	return start, pidns
}

// processStart returns the start time of process pid (field 22 of /proc/<pid>/stat) and
// whether the process exists (a zombie has exited).
func processStart(pid int) (uint64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3 (state)
	if len(f) < 20 || f[0] == "Z" {
		return 0, false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	return start, err == nil
}
