package mesh_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/testkit"
	"github.com/noetl/noetl/services/worker"
)

const greeterBook = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: greet, path: tests/greet}
workload: {name: Ada}
workflow:
  - step: start
    tool: {kind: wasm, module: tests/greeter}
    input: {name: "{{ workload.name }}", counter: greets}
`

const systemWasmBook = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: info, path: system/wasm-info}
workflow:
  - step: start
    tool: {kind: wasm, module: system/info}
`

// gzipped compresses a module as the CLI sends it.
func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	_, err := w.Write(b)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return z.Bytes()
}

// runFor starts path and returns the completed execution's result fields.
func runFor(t *testing.T, c *client, path string) map[string]*structpb.Value {
	t.Helper()
	ctx := context.Background()
	started, err := c.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: path})
	require.NoError(t, err)
	done, err := c.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: started.GetExecutionId(), Timeout: durationpb.New(60 * time.Second)})
	require.NoError(t, err)
	x := done.GetExecution()
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
	return x.GetResult().GetStructValue().GetFields()
}

// A plug-in built from the repository's sample with the Go toolchain runs end to end: a
// playbook naming it is refused until it is registered; it runs on the shared pool with
// its input rendered and its kv counter kept in the tenant's bucket; a new version
// registered while the worker runs is what the next execution runs (hot reload); system/
// plug-ins run only in system/ playbooks, on the system pool, with the system capability.
func TestWasmPluginEndToEnd(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{Worker: func(c *worker.Config) { c.Wasm.Engine = "interpreter" }})
	ctx := context.Background()
	c := newClient(t, m, m.AdminKey)
	plugins := apiv1.NewPluginServiceClient(c.conn)

	_, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: greeterBook})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), `step "start": module "tests/greeter" is not registered`)

	v1 := testkit.BuildWasm(t, testkit.SamplePlugin, "")
	reg, err := plugins.RegisterPlugin(ctx, &apiv1.RegisterPluginRequest{Path: "tests/greeter", Module: gzipped(t, v1), Description: "sample"})
	require.NoError(t, err)
	require.EqualValues(t, 1, reg.GetPlugin().GetVersion())
	_, err = c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: greeterBook})
	require.NoError(t, err)

	out := runFor(t, c, "tests/greet")
	require.Equal(t, "Hello, Ada!", out["message"].GetStringValue())
	require.Equal(t, "v1", out["version"].GetStringValue())
	require.EqualValues(t, 1, out["count"].GetNumberValue())

	// A new version, while the worker runs: the next execution runs it.
	v2 := testkit.BuildWasm(t, testkit.SamplePlugin, "-X main.version=v2")
	reg, err = plugins.RegisterPlugin(ctx, &apiv1.RegisterPluginRequest{Path: "tests/greeter", Module: gzipped(t, v2)})
	require.NoError(t, err)
	require.EqualValues(t, 2, reg.GetPlugin().GetVersion())
	out = runFor(t, c, "tests/greet")
	require.Equal(t, "v2", out["version"].GetStringValue(), "the new version runs without a restart")
	require.EqualValues(t, 2, out["count"].GetNumberValue(), "the tenant's kv outlives the version")
	require.EqualValues(t, 1, out["calls"].GetNumberValue(), "every call has a fresh instance")

	// The catalog lists both versions, over REST too.
	listed := c.wantREST(http.StatusOK, http.MethodGet, "/v1/plugins?path=tests/greeter", nil)
	versions, _ := listed["plugins"].([]any)
	require.Len(t, versions, 2)

	// system/ plug-ins: only in system/ playbooks, which run them on the system pool.
	info := testkit.BuildWasm(t, testkit.SysinfoPlugin, "")
	_, err = plugins.RegisterPlugin(ctx, &apiv1.RegisterPluginRequest{Path: "system/info", Module: gzipped(t, info)})
	require.NoError(t, err)
	_, err = c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: sneaky, path: tests/sneaky}
workflow:
  - step: start
    tool: {kind: wasm, module: system/info}
`})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "only system/ playbooks run")
	_, err = c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: systemWasmBook})
	require.NoError(t, err)
	out = runFor(t, c, "system/wasm-info")
	require.Equal(t, "system", out["pool"].GetStringValue(), "ran on the system pool")
	require.Equal(t, "default", out["tenant"].GetStringValue())
}
