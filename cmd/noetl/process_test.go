package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestServicesAsSeparateProcesses builds the six service binaries, starts each as its own
// OS process, and runs a playbook through the gateway's REST API.
func TestServicesAsSeparateProcesses(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	bin := t.TempDir()
	services := []string{"statebuilder", "resultstore", "materializer", "orchestrator", "worker", "gateway"}
	for _, s := range services {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, s), "./services/"+s+"/cmd/"+s)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "build %s: %s", s, out)
	}
	pg := testkit.StartPostgres(t)
	natsURL := testkit.StartNATS(t)
	port := func() string { return fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t)) }
	sb, rs, or, gwHTTP, gwGRPC, fl := port(), port(), port(), port(), port(), port()
	adminKey, _, _, err := auth.NewAPIKey()
	require.NoError(t, err)
	env := []string{
		"NOETL_INTERNAL_SECRET=process-test-internal-secret-0123456789", "NOETL_BOOTSTRAP_API_KEY=" + adminKey,
		"NOETL_PG_URL=" + pg, "NOETL_NATS_URL=" + natsURL,
		"NOETL_STATEBUILDER_GRPC=" + sb, "NOETL_STATEBUILDER_ADDR=" + sb,
		"NOETL_RESULTSTORE_GRPC=" + rs, "NOETL_RESULTSTORE_ADDR=" + rs,
		"NOETL_ORCHESTRATOR_GRPC=" + or, "NOETL_ORCHESTRATOR_ADDR=" + or,
		"NOETL_GATEWAY_HTTP=" + gwHTTP, "NOETL_GATEWAY_GRPC=" + gwGRPC,
		"NOETL_RESULTSTORE_FLIGHT=" + fl, "NOETL_RESULTSTORE_FLIGHT_ADDR=" + fl, "NOETL_RESULTSTORE_FLIGHT_LOCATION=grpc://" + fl,
	}
	for _, s := range services {
		cmd := exec.Command(filepath.Join(bin, s), "--admin", port())
		cmd.Env = append(os.Environ(), env...)
		var logs bytes.Buffer
		cmd.Stderr = &logs
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			if t.Failed() {
				t.Logf("%s logs:\n%s", s, logs.String())
			}
		})
	}
	base := "http://" + gwHTTP
	do := func(method, path string, body io.Reader) (*http.Response, error) {
		req, err := http.NewRequest(method, base+path, body)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+adminKey)
		return http.DefaultClient.Do(req)
	}
	testkit.WaitFor(t, 60*time.Second, func() error {
		// Listing the catalog needs the gateway and the orchestrator (after its migrations).
		resp, err := do(http.MethodGet, "/v1/playbooks", nil)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("gateway not ready: %d", resp.StatusCode)
		}
		return nil
	})
	doc, err := os.ReadFile(filepath.Join(root, "examples", "hello.yaml"))
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
