//go:build unix

package tools

import (
	"os/exec"
	"syscall"
)

// killTreeOnCancel starts the interpreter in its own process group and makes cancellation
// kill the whole group, so children the code started go too.
func killTreeOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
