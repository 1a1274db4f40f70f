//go:build unix

package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/cmd/noetl/mesh"
)

func TestDevEnvIsStrict(t *testing.T) {
	t.Setenv("NOETL_WORKER_CONCURRENCY", "8x")
	t.Setenv("NOETL_STALE_AFTER", "soon")
	_, err := devEnv(mesh.Config{})
	require.ErrorContains(t, err, `NOETL_WORKER_CONCURRENCY="8x": invalid integer`)
	require.ErrorContains(t, err, `NOETL_STALE_AFTER="soon": invalid duration`)

	t.Setenv("NOETL_WORKER_CONCURRENCY", "-1")
	t.Setenv("NOETL_STALE_AFTER", "")
	_, err = devEnv(mesh.Config{})
	require.ErrorContains(t, err, `NOETL_WORKER_CONCURRENCY="-1"`)

	t.Setenv("NOETL_WORKER_CONCURRENCY", "8")
	t.Setenv("NOETL_STALE_AFTER", "45s")
	cfg, err := devEnv(mesh.Config{})
	require.NoError(t, err)
	require.Equal(t, 8, cfg.WorkerConcurrency)
	require.Equal(t, 45*time.Second, cfg.StaleAfter)
	require.Zero(t, cfg.Partitions, "unset keeps the mesh's default")
	require.Empty(t, cfg.NATSSync, "unset keeps the NATS server's default")

	for _, v := range []string{"always", "1s", "2m"} {
		t.Setenv("NOETL_NATS_SYNC_INTERVAL", v)
		cfg, err = devEnv(mesh.Config{})
		require.NoError(t, err)
		require.Equal(t, v, cfg.NATSSync)
	}
	t.Setenv("NOETL_NATS_SYNC_INTERVAL", "sometimes")
	_, err = devEnv(mesh.Config{})
	require.ErrorContains(t, err, `NOETL_NATS_SYNC_INTERVAL="sometimes": want "always" or a positive duration`)
}

// TestDevFailsOnBadEnvBeforeStarting: noetl dev stops at once, naming the variable and its
// value, for a malformed value of each kind of variable it reads.
func TestDevFailsOnBadEnvBeforeStarting(t *testing.T) {
	for name, value := range map[string]string{
		"NOETL_STALE_AFTER":        "soon",  // a duration
		"NOETL_NATS_SYNC_INTERVAL": "0s",    // its own check
		"NOETL_DEV_HUGE_PAGES":     "maybe", // a boolean, read apart from devEnv
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, value)
			root := newRoot()
			root.SetArgs([]string{"dev", "--state-dir", t.TempDir(), "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"})
			require.ErrorContains(t, root.Execute(), name+`="`+value+`"`)
		})
	}
}

// TestDevHugePagesIsOnUnlessTurnedOff: NOETL_DEV_HUGE_PAGES defaults to on and reads as a
// boolean.
func TestDevHugePagesIsOnUnlessTurnedOff(t *testing.T) {
	for v, want := range map[string]bool{"": true, "true": true, "1": true, "false": false, "0": false} {
		t.Setenv("NOETL_DEV_HUGE_PAGES", v)
		on, err := devHugePages()
		require.NoError(t, err, v)
		require.Equal(t, want, on, "NOETL_DEV_HUGE_PAGES=%q", v)
	}
}
