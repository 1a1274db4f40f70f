package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/testkit"
)

// TestAPIKeyCommands creates, lists and revokes keys with the CLI, and checks that the CLI
// falls back to the dev mesh's admin.key for a gateway on this machine.
func TestAPIKeyCommands(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("NOETL_API_KEY", "")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m, err := mesh.Start(ctx, mesh.Config{StateDir: t.TempDir(), PostgresURL: testkit.StartPostgres(t), NATSURL: testkit.StartNATS(t)})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	noetl := func(args ...string) (string, string, error) {
		root := newRoot()
		var out, errOut bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetArgs(append([]string{"--gateway", m.GRPCAddr}, args...))
		err := root.ExecuteContext(ctx)
		return out.String(), errOut.String(), err
	}

	secret, info, err := noetl("--api-key", m.AdminKey, "apikey", "create", "--role", "viewer", "--name", "ci")
	require.NoError(t, err, info)
	secret = strings.TrimSpace(secret)
	id, _, ok := auth.ParseAPIKey(secret)
	require.True(t, ok, "stdout holds the secret alone: %q", secret)
	require.Contains(t, info, "created API key "+id+" of tenant default with roles viewer")

	list, _, err := noetl("--api-key", m.AdminKey, "apikey", "list")
	require.NoError(t, err)
	require.Contains(t, list, `"id":"`+id+`"`)
	require.NotContains(t, list, secret[len(secret)-20:], "lists never hold secrets")

	_, _, err = noetl("--api-key", secret, "apikey", "create", "--role", "viewer")
	require.ErrorContains(t, err, "PermissionDenied")
	_, _, err = noetl("apikey", "list")
	require.ErrorContains(t, err, "Unauthenticated", "no key and no dev admin.key")

	// The admin.key of the default state directory is used for a local gateway.
	dev := filepath.Join(cache, "noetl", "dev")
	require.NoError(t, os.MkdirAll(dev, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dev, mesh.AdminKeyFile), []byte(m.AdminKey+"\n"), 0o600))
	require.Equal(t, m.AdminKey, devAdminKey(m.GRPCAddr))
	require.Empty(t, devAdminKey("gateway.example.test:50051"), "only for a gateway on this machine")
	out, _, err := noetl("apikey", "revoke", id)
	require.NoError(t, err)
	require.Equal(t, "revoked: "+id+"\n", out)
	list, _, err = noetl("apikey", "list")
	require.NoError(t, err)
	require.Contains(t, list, `"revokeTime"`)

	fresh, _, err := noetl("apikey", "new")
	require.NoError(t, err)
	_, _, ok = auth.ParseAPIKey(strings.TrimSpace(fresh))
	require.True(t, ok, "apikey new prints a key: %q", fresh)
}
