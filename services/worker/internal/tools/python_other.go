//go:build !unix && !windows

package tools

import "os/exec"

// killTreeOnCancel keeps the default cancellation here (no process groups): the
// interpreter is killed, children the code started are not.
func killTreeOnCancel(*exec.Cmd) {}
