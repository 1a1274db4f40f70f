package mesh_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/internal/platform/pgembed"
	"github.com/noetl/noetl/internal/testkit"
)

// TestPostgresDownIsUnavailable: with Postgres gone, the API answers UNAVAILABLE (HTTP 503
// with Retry-After), which clients retry, not INTERNAL (500), and never the driver's text.
func TestPostgresDownIsUnavailable(t *testing.T) {
	base, err := os.MkdirTemp("", "pgdown-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	require.NoError(t, os.Chmod(base, 0o755))
	dir, err := pgembed.DirFor(filepath.Join(base, "state"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pg, err := pgembed.Start(ctx, pgembed.Options{Dir: dir, Fast: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Stop() })
	m, err := mesh.Start(ctx, mesh.Config{StateDir: t.TempDir(), PostgresURL: pg.URL(), NATSURL: testkit.StartNATS(t)})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	c := newClient(t, m, m.AdminKey)
	_, err = c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: up, path: tests/up}\nworkflow:\n  - step: start\n    tool: {kind: noop}\n"})
	require.NoError(t, err)

	require.NoError(t, pg.Stop())

	for name, call := range map[string]func() error{
		"GetPlaybook": func() error {
			_, err := c.cat.GetPlaybook(ctx, &apiv1.GetPlaybookRequest{Path: "tests/up"})
			return err
		},
		"StartExecution": func() error {
			_, err := c.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "tests/up"})
			return err
		},
		"ListPlaybooks": func() error {
			_, err := c.cat.ListPlaybooks(ctx, &apiv1.ListPlaybooksRequest{})
			return err
		},
	} {
		err := call()
		require.Equal(t, codes.Unavailable, status.Code(err), "%s: %v", name, err)
		require.NotContains(t, status.Convert(err).Message(), "127.0.0.1", name)
	}
	code, out, hdr := c.rest(http.MethodPost, "/v1/executions", map[string]any{"path": "tests/up"})
	require.Equal(t, http.StatusServiceUnavailable, code, "%v", out)
	require.NotEmpty(t, hdr.Get("Retry-After"), "%v", hdr)
}
