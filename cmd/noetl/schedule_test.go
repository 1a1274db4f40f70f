package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	"github.com/noetl/noetl/internal/testkit"
)

// TestScheduleCommands drives `noetl schedule` against a real mesh in every output format.
func TestScheduleCommands(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("NOETL_API_KEY", "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := mesh.Start(ctx, mesh.Config{StateDir: t.TempDir(), PostgresURL: testkit.StartPostgres(t), NATSURL: testkit.StartNATS(t)})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	noetl := func(args ...string) (string, error) {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(io.Discard)
		root.SetArgs(append([]string{"--gateway", m.GRPCAddr, "--api-key", m.AdminKey}, args...))
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
	p := filepath.Join(t.TempDir(), "daily.yaml")
	require.NoError(t, os.WriteFile(p, []byte(dailyV1), 0o600))
	_, err = noetl("register", p)
	require.NoError(t, err)

	out, err := noetl("schedule", "create", "nightly", "--path", "tests/daily", "--cron", "0 2 * * *", "--tz", "Europe/Berlin", "--workload", `{"n": 3}`, "--catch-up", "all", "--max-catch-up", "3", "-o", "table")
	require.NoError(t, err, out)
	require.Contains(t, out, "tests/daily (latest)")
	require.Contains(t, out, "0 2 * * * Europe/Berlin")
	require.Contains(t, out, "all (at most 3)")
	_, err = noetl("schedule", "create", "often", "--path", "tests/daily", "--every", "1h", "--version", "1")
	require.NoError(t, err)

	_, err = noetl("schedule", "create", "bad", "--path", "tests/daily", "--cron", "* * *")
	require.ErrorContains(t, err, "cron:")
	_, err = noetl("schedule", "create", "bad", "--path", "tests/daily")
	require.ErrorContains(t, err, "--cron or --every")

	out, err = noetl("schedule", "list", "-o", "table")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Contains(t, lines[0], "NAME")
	require.Contains(t, lines[1], "nightly")
	require.Contains(t, lines[2], "every 1h0m0s")

	out, err = noetl("schedule", "list", "-o", "json")
	require.NoError(t, err)
	var first map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.Split(out, "\n")[0]), &first))
	require.Equal(t, "nightly", first["name"])
	require.Equal(t, "Europe/Berlin", first["timeZone"])

	out, err = noetl("schedule", "get", "nightly", "--count", "3", "-o", "yaml")
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(out), &got))
	require.Len(t, got["nextFireTimes"], 3)

	out, err = noetl("schedule", "preview", "--cron", "0 9 * * 1", "--tz", "UTC", "--count", "2", "-o", "table")
	require.NoError(t, err)
	times := strings.Fields(out)
	require.Len(t, times, 2)
	for _, s := range times {
		at, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		require.Equal(t, time.Monday, at.Weekday())
	}

	out, err = noetl("schedule", "pause", "nightly")
	require.NoError(t, err)
	require.Equal(t, "paused: nightly\n", out)
	out, err = noetl("schedule", "list", "-o", "table")
	require.NoError(t, err)
	require.Contains(t, out, "paused")
	out, err = noetl("schedule", "resume", "nightly")
	require.NoError(t, err)
	require.Contains(t, out, "resumed: nightly (next tick ")
	out, err = noetl("schedule", "delete", "often")
	require.NoError(t, err)
	require.Equal(t, "deleted: often\n", out)
	_, err = noetl("schedule", "delete", "often")
	require.ErrorContains(t, err, "not found")
}
