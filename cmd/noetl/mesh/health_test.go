package mesh_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/cmd/noetl/mesh"
)

// TestMeshHealthOnRESTAddress reads /livez and /readyz from the gateway's REST address:
// the mesh's readiness lists every service, each ready.
func TestMeshHealthOnRESTAddress(t *testing.T) {
	h := start(t, false)
	get := func(path string) (int, []byte) {
		resp, err := http.Get("http://" + h.m.HTTPAddr + path)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, b
	}
	code, body := get("/livez")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", string(body))

	code, body = get("/readyz")
	require.Equal(t, http.StatusOK, code, string(body))
	var rd mesh.Readiness
	require.NoError(t, json.Unmarshal(body, &rd))
	require.True(t, rd.Ready)
	for _, svc := range []string{"gateway", "orchestrator", "materializer", "statebuilder", "resultstore", "worker", "worker-system"} {
		require.Equal(t, "ok", rd.Services[svc], svc)
	}
	require.Len(t, rd.Services, 7)
}

// TestMeshNotReadyAfterStop: once the services have stopped, Ready says which are not.
func TestMeshNotReadyAfterStop(t *testing.T) {
	h := start(t, false)
	h.m.Stop()
	rd := h.m.Ready(t.Context())
	require.False(t, rd.Ready)
	require.NotEqual(t, "ok", rd.Services["orchestrator"])
}
