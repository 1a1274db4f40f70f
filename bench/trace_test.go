package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// --trace writes a Go execution trace of what ran between start and stop, and stopping
// twice (the measured phase's end, then the deferred stop) is one stop.
func TestTraceWritesAnExecutionTraceOfThePhase(t *testing.T) {
	stop, err := startTrace("")
	require.NoError(t, err)
	stop() // no path: nothing traced, nothing to stop

	path := filepath.Join(t.TempDir(), "phase.trace")
	stop, err = startTrace(path)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			s := 0
			for i := range 10_000 {
				s += i
			}
			_ = s
		})
	}
	wg.Wait()
	stop()
	stop()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Greater(t, len(b), 16)
	header := string(b[:16])
	require.True(t, strings.HasPrefix(header, "go 1.") && strings.Contains(header, " trace"), "a runtime/trace file starts with its version header, got %q", header)

	_, err = startTrace(filepath.Join(t.TempDir(), "missing", "dir", "x.trace"))
	require.Error(t, err, "a path that cannot be created is an error, not a silent no-trace")
}
