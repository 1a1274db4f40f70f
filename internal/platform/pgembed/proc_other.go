//go:build unix && !linux

package pgembed

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// setParentDeathSignal does nothing: only Linux can signal a child when its
// parent dies.
func setParentDeathSignal(*syscall.SysProcAttr) {}

// processName returns the command name of process pid as ps(1) reports it;
// known is false when ps cannot tell.
func processName(pid int) (name string, known bool) {
	out, err := exec.Command("ps", "-o", "comm=", "-p", strconv.Itoa(pid)).Output()
	if err != nil {
		return "", false
	}
	name = strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	return name, name != ""
}
