package mesh

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/testkit"
)

// TestEmbeddedNATSIsReachedWithoutASocket: with the embedded NATS server (noetl dev's), the
// services that use the bus hold in-process connections to it (no address: no loopback
// socket, no system call per message), and an execution runs through them to its end.
func TestEmbeddedNATSIsReachedWithoutASocket(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m, err := Start(ctx, Config{StateDir: t.TempDir(), PostgresURL: testkit.StartPostgres(t)})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	require.NotNil(t, m.nats, "no NATS URL given: the mesh embeds its server")

	conn, err := m.Dial()
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	reg, err := apiv1.NewCatalogServiceClient(conn).RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: two, path: tests/inprocess}
workflow:
  - step: start
    tool: {kind: noop, result: {n: 1}}
    next: [{step: end}]
  - step: end
    tool: {kind: noop, result: {n: "{{ start.n }}"}}
`})
	require.NoError(t, err)
	exe := apiv1.NewExecutionServiceClient(conn)
	started, err := exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath()})
	require.NoError(t, err)
	done, err := exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: started.GetExecutionId(), Timeout: durationpb.New(60 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, done.GetExecution().GetStatus())

	connz, err := m.nats.NATS().Connz(&server.ConnzOptions{Limit: 1024})
	require.NoError(t, err)
	byName := map[string]*server.ConnInfo{}
	for _, c := range connz.Conns {
		byName[c.Name] = c
	}
	for _, name := range []string{"materializer", "orchestrator", "worker-shared", "worker-system"} {
		c := byName[name]
		require.NotNil(t, c, "%s holds a connection to the embedded server (have %v)", name, connNames(connz))
		require.Empty(t, c.IP, "%s's connection is in-process, without an address", name)
		require.Positive(t, c.InMsgs+c.OutMsgs, "%s's connection carried the execution's messages", name)
	}
}

// connNames names the connections of connz, for a failure's message.
func connNames(connz *server.Connz) []string {
	var out []string
	for _, c := range connz.Conns {
		out = append(out, c.Name+"@"+c.IP)
	}
	return out
}
