package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The worker binary, with a malformed or out-of-range setting, exits 2 at once printing one
// line that names the variable (or flag) and the value: no default, no usage dump, no
// panic. It fails before dialling anything (nothing listens on the NATS URL it is given).
func TestBadConfigurationStopsStartUp(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "worker")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	run := func(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
		t.Helper()
		// A configuration error stops start-up at once; a worker that went on to start
		// would wait for NATS and be killed at this deadline instead.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(cleanEnv(), env...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		require.NoError(t, ctx.Err(), "the worker did not stop on its own: %s", e.String())
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), o.String(), e.String()
		}
		require.NoError(t, err)
		return 0, o.String(), e.String()
	}

	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"malformed env", []string{"NOETL_WORKER_CONCURRENCY=8x"}, nil, `worker: NOETL_WORKER_CONCURRENCY="8x": invalid integer`},
		{"negative env", []string{"NOETL_WORKER_CONCURRENCY=-1"}, nil, `worker: NOETL_WORKER_CONCURRENCY="-1": must be positive`},
		{"malformed flag", nil, []string{"--partitions=lots"}, `worker: --partitions="lots": invalid integer`},
		{"drain timeout without a unit", []string{"NOETL_WORKER_DRAIN_TIMEOUT=30"}, nil,
			`worker: NOETL_WORKER_DRAIN_TIMEOUT="30": invalid duration (want a number with a unit, e.g. 30s, 5m, 1h)`},
		{"two problems", []string{"NOETL_PARTITIONS=0", "NOETL_HTTP_ALLOW_PRIVATE=yes"}, nil,
			`worker: NOETL_HTTP_ALLOW_PRIVATE="yes": invalid boolean (want true or false); NOETL_PARTITIONS="0": must be positive`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append([]string{"NOETL_NATS_URL=nats://127.0.0.1:1", "NOETL_INTERNAL_SECRET=process-test-internal-secret-0123456789"}, tc.env...)
			code, stdout, stderr := run(t, env, tc.args...)
			require.Equal(t, 2, code, "stderr: %s", stderr)
			require.Equal(t, tc.want+"\n", stderr)
			require.Empty(t, stdout)
		})
	}

	t.Run("print-config masks secrets", func(t *testing.T) {
		code, stdout, stderr := run(t, []string{"NOETL_INTERNAL_SECRET=process-test-internal-secret-0123456789", "NOETL_WORKER_CONCURRENCY=8"}, "--print-config")
		require.Equal(t, 0, code, "stderr: %s", stderr)
		require.NotContains(t, stdout, "process-test-internal-secret")
		require.Regexp(t, `(?m)^internal-secret\s+NOETL_INTERNAL_SECRET\s+\*\*\*\*$`, stdout)
		require.Regexp(t, `(?m)^concurrency\s+NOETL_WORKER_CONCURRENCY\s+8$`, stdout)
	})
}

// cleanEnv is the test's environment without NOETL_* variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOETL_") {
			env = append(env, kv)
		}
	}
	return env
}
