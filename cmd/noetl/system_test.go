package main

import (
	"bytes"
	"context"
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

// TestSystemList drives `noetl system list`: the shipped system playbooks, and a tenant
// overriding one.
func TestSystemList(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("NOETL_API_KEY", "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := mesh.Start(ctx, mesh.Config{StateDir: t.TempDir(), PostgresURL: testkit.StartPostgres(t), NATSURL: testkit.StartNATS(t), SystemPlaybooks: true})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	noetl := func(key string, args ...string) (string, error) {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(io.Discard)
		root.SetArgs(append([]string{"--gateway", m.GRPCAddr, "--api-key", key}, args...))
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
	out, err := noetl(m.AdminKey, "system", "list", "-o", "table")
	require.NoError(t, err, out)
	for _, name := range []string{"system/cleanup", "system/retention", "system/stalled_report"} {
		require.Contains(t, out, name)
	}

	out, err = noetl(m.AdminKey, "apikey", "create", "--tenant", "acme", "--role", "admin")
	require.NoError(t, err, out)
	acmeKey := strings.TrimSpace(out)
	p := filepath.Join(t.TempDir(), "retention.yaml")
	require.NoError(t, os.WriteFile(p, []byte(`apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: retention, path: acme/system/retention}
workflow:
  - step: start
    tool: {kind: system_purge, retention: 72h}
`), 0o600))
	out, err = noetl(acmeKey, "register", p)
	require.NoError(t, err, out)

	out, err = noetl(m.AdminKey, "system", "list", "--name", "retention", "-o", "table")
	require.NoError(t, err, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.Contains(t, lines[1], "acme (acme/system/retention v1)")
}
