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

	"github.com/noetl/noetl/cmd/noetl/mesh"
	"github.com/noetl/noetl/internal/testkit"
)

// TestTriggerCommands drives `noetl trigger` against a real mesh: a webhook trigger's
// secret is printed once, at creation; list and get show the triggers; bad flags and bad
// sources are refused naming them; delete removes one.
func TestTriggerCommands(t *testing.T) {
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

	out, err := noetl("trigger", "create", "hook", "--path", "tests/daily", "--webhook", "--workload", `{"n": 3}`, "-o", "table")
	require.NoError(t, err, out)
	require.Contains(t, out, "tests/daily (latest)")
	require.Contains(t, out, "webhook POST /v1/triggers/hook")
	require.Contains(t, out, "Secret")
	require.Contains(t, out, "shown once")
	out, err = noetl("trigger", "create", "hook2", "--path", "tests/daily", "--webhook", "-o", "json")
	require.NoError(t, err, out)
	var created map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &created))
	secret, _ := created["secret"].(string)
	require.NotEmpty(t, secret)

	_, err = noetl("trigger", "create", "bad", "--path", "tests/daily")
	require.ErrorContains(t, err, "--webhook or --subject")
	_, err = noetl("trigger", "create", "bad", "--path", "tests/daily", "--webhook", "--stream", "X")
	require.ErrorContains(t, err, "--stream")
	_, err = noetl("trigger", "create", "bad", "--path", "tests/daily", "--subject", "noetl.x")
	require.ErrorContains(t, err, "nats.subject: a platform subject")
	_, err = noetl("trigger", "create", "bad", "--path", "tests/daily", "--subject", "nobody.listens")
	require.ErrorContains(t, err, "no JetStream stream captures")

	out, err = noetl("trigger", "list", "-o", "table")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Contains(t, lines[0], "NAME")
	require.Contains(t, lines[1], "hook")
	out, err = noetl("trigger", "get", "hook2", "-o", "json")
	require.NoError(t, err)
	require.NotContains(t, out, secret, "the secret is shown once")
	require.Contains(t, out, `"webhook"`)

	out, err = noetl("trigger", "delete", "hook2")
	require.NoError(t, err)
	require.Equal(t, "deleted: hook2\n", out)
	_, err = noetl("trigger", "delete", "hook2")
	require.ErrorContains(t, err, "not found")
}
