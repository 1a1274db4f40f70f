package replica

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReplicaIncarnation(t *testing.T) {
	if !Supported() {
		t.Skip("this system does not expose process start times and pid namespaces (/proc)")
	}
	id := ID()
	inc, ok := parseIncarnation(id)
	require.True(t, ok, id)
	require.Equal(t, os.Getpid(), inc.pid)
	require.False(t, Gone(id), "this process is alive")

	// A child that has exited is gone; a live one is not, unless its pid was reused (another
	// start time); another host's or an explicit id can never be proven gone.
	live := exec.Command("cat")
	stdin, err := live.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, live.Start())
	start, alive := processStart(live.Process.Pid)
	require.True(t, alive)
	require.False(t, Gone(Of(live.Process.Pid, start)))
	require.True(t, Gone(Of(live.Process.Pid, start+1)), "a reused pid")
	require.NoError(t, stdin.Close())
	require.NoError(t, live.Wait())
	require.True(t, Gone(Of(live.Process.Pid, start)), "an exited process")

	require.False(t, Gone(strings.Replace(Of(live.Process.Pid, start), mustHost(t), "elsewhere", 1)))
	require.False(t, Gone("materializer-0"))
	_, ok = parseIncarnation("materializer-0")
	require.False(t, ok)
}

func mustHost(t *testing.T) string {
	h, err := os.Hostname()
	require.NoError(t, err)
	return h
}
