package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestServicesAsSeparateProcesses builds the six service binaries, starts each as its own
// OS process, and runs a playbook through the gateway's REST API.
func TestServicesAsSeparateProcesses(t *testing.T) {
	p := startProcesses(t)
	do := p.do
	doc, err := os.ReadFile(filepath.Join(p.root, "examples", "hello.yaml"))
	require.NoError(t, err)
	post := func(path string, body any) (int, map[string]any) {
		b, _ := json.Marshal(body)
		resp, err := do(http.MethodPost, path, bytes.NewReader(b))
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		return resp.StatusCode, m
	}
	code, reg := post("/v1/playbooks", map[string]any{"content": string(doc)})
	require.Equal(t, http.StatusOK, code, "%v", reg)
	code, bad := post("/v1/playbooks", map[string]any{"content": "kind: [unclosed"})
	require.Equal(t, http.StatusBadRequest, code, "%v", bad)
	resp404, err := do(http.MethodGet, "/v1/executions/01930000-0000-7000-8000-000000000000", nil)
	require.NoError(t, err)
	_ = resp404.Body.Close()
	require.Equal(t, http.StatusNotFound, resp404.StatusCode)
	code, started := post("/v1/executions", map[string]any{"path": "examples/hello", "workload": map[string]any{"name": "REST", "repeat": 2}})
	require.Equal(t, http.StatusOK, code, "%v", started)
	id, _ := started["executionId"].(string)
	require.NotEmpty(t, id)
	var final map[string]any
	testkit.WaitFor(t, 60*time.Second, func() error {
		resp, err := do(http.MethodGet, "/v1/executions/"+id, nil)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			return err
		}
		x, _ := m["execution"].(map[string]any)
		if st, _ := x["status"].(string); !strings.HasSuffix(st, "COMPLETED") && !strings.HasSuffix(st, "FAILED") {
			return fmt.Errorf("status %v", x["status"])
		}
		final = x
		return nil
	})
	require.Equal(t, "EXECUTION_STATUS_COMPLETED", final["status"], "%v", final)
	require.Equal(t, map[string]any{"greeting": "Hello, REST! Hello, REST!", "words": float64(4)}, final["result"])
}
