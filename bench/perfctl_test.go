package main

import (
	"bufio"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPerfControlEnablesAndDisablesAroundThePhase plays perf's side of two FIFOs: the bench
// writes enable and waits for the ack (perf's, NUL-terminated), then disable and waits again; stopping twice sends
// nothing more. Without a spec nothing is controlled; a missing FIFO is an error naming the
// flag.
func TestPerfControlEnablesAndDisablesAroundThePhase(t *testing.T) {
	dir := t.TempDir()
	ctl, ack := filepath.Join(dir, "ctl.fifo"), filepath.Join(dir, "ack.fifo")
	require.NoError(t, syscall.Mkfifo(ctl, 0o600))
	require.NoError(t, syscall.Mkfifo(ack, 0o600))
	got := make(chan string, 4)
	perfDone := make(chan error, 1)
	go func() { // perf: read a command, acknowledge it
		c, err := os.Open(ctl)
		if err != nil {
			perfDone <- err
			return
		}
		defer func() { _ = c.Close() }()
		a, err := os.OpenFile(ack, os.O_WRONLY, 0)
		if err != nil {
			perfDone <- err
			return
		}
		defer func() { _ = a.Close() }()
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				perfDone <- nil // the bench closed its end
				return
			}
			got <- line
			if _, err := a.WriteString("ack\n\x00"); err != nil { // as perf writes it
				perfDone <- err
				return
			}
		}
	}()
	stop, err := startPerfControl(ctl + "," + ack)
	require.NoError(t, err)
	require.Equal(t, "enable\n", <-got)
	require.NoError(t, stop())
	require.Equal(t, "disable\n", <-got)
	require.NoError(t, stop(), "a second stop sends nothing")
	require.NoError(t, <-perfDone)
	require.Empty(t, got)

	none, err := startPerfControl("")
	require.NoError(t, err)
	require.NoError(t, none())
	_, err = startPerfControl(filepath.Join(dir, "missing.fifo"))
	require.ErrorContains(t, err, "--perf-control")
}
