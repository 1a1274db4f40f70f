package pgembed

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// setParentDeathSignal makes the kernel send SIGINT (a fast shutdown) to the
// postmaster when the thread that forked it exits.
func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGINT }

// processName returns the command name of process pid from /proc; known is
// false when it cannot be read.
func processName(pid int) (name string, known bool) {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(comm)), true
}
