package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	"github.com/noetl/noetl/internal/testkit"
)

// TestPluginCommands drives `noetl plugin` against a real mesh: the sample plug-in, built
// from the repository, registers as version 1 (compressed on the way, so it fits the
// gateway's body limit); the same file again is unchanged; list and get show it; a file
// that is not WebAssembly is refused naming the field.
func TestPluginCommands(t *testing.T) {
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
	mod := testkit.BuildWasm(t, testkit.SamplePlugin, "")
	require.Greater(t, len(mod), 2<<20, "the sample is larger than the gateway's default body limit")
	file := filepath.Join(t.TempDir(), "greeter.wasm")
	require.NoError(t, os.WriteFile(file, mod, 0o600))

	out, err := noetl("plugin", "register", "tools/greeter", file, "--description", "sample", "-o", "json")
	require.NoError(t, err, out)
	var reg map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &reg))
	p, _ := reg["plugin"].(map[string]any)
	require.Equal(t, "tools/greeter", p["path"])
	require.EqualValues(t, "1", p["version"])
	out, err = noetl("plugin", "register", "tools/greeter", file, "-o", "table")
	require.NoError(t, err, out)
	require.Contains(t, out, "Unchanged")

	out, err = noetl("plugin", "list", "-o", "table")
	require.NoError(t, err, out)
	require.Contains(t, out, "tools/greeter")
	out, err = noetl("plugin", "get", "tools/greeter", "-o", "table")
	require.NoError(t, err, out)
	require.Contains(t, out, "sample")

	bad := filepath.Join(t.TempDir(), "bad.wasm")
	require.NoError(t, os.WriteFile(bad, []byte("#!/bin/sh\n"), 0o600))
	_, err = noetl("plugin", "register", "tools/bad", bad)
	require.ErrorContains(t, err, "module: not a WebAssembly binary")
}
