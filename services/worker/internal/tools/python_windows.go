package tools

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// killTreeOnCancel makes cancellation kill the interpreter's process tree (Windows has no
// process groups to signal): taskkill /T ends the interpreter and the children the code
// started; the interpreter itself is killed directly should taskkill fail.
func killTreeOnCancel(cmd *exec.Cmd) {
	cmd.Cancel = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		treeErr := exec.CommandContext(ctx, "taskkill", "/T", "/F", "/PID", strconv.Itoa(cmd.Process.Pid)).Run()
		if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) && treeErr != nil {
			return err
		}
		return nil
	}
}
