package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/testkit"
)

// TestStartNeedsOnlyWhatItWritesThrough kills the statebuilder (kill -9) and starts
// executions, with and without an idempotency key: a start needs NATS and the materializer,
// not the statebuilder, and a retried start with the same key finds the same execution.
func TestStartNeedsOnlyWhatItWritesThrough(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the six services as processes (skipped with -short)")
	}
	p := startProcesses(t)
	resp, err := p.do(http.MethodPost, "/v1/playbooks", strings.NewReader(`{"content": "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: quick, path: tests/quick}\nworkflow:\n  - step: start\n    tool: {kind: noop}\n"}`))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	require.NoError(t, syscall.Kill(p.pids["statebuilder"], syscall.SIGKILL))
	testkit.WaitFor(t, 30*time.Second, func() error {
		// Gone, or a zombie its parent (this test) has not reaped yet.
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pids["statebuilder"]))
		if err == nil && !strings.Contains(string(b[strings.LastIndexByte(string(b), ')')+1:]), " Z ") {
			return fmt.Errorf("statebuilder still running")
		}
		return nil
	})
	start := func(body string) (int, string) {
		resp, err := p.do(http.MethodPost, "/v1/executions", strings.NewReader(body))
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		var out struct {
			ExecutionID string `json:"executionId"`
		}
		_ = json.Unmarshal(b, &out)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		return resp.StatusCode, out.ExecutionID
	}
	_, plain := start(`{"path": "tests/quick"}`)
	require.NotEmpty(t, plain)
	_, first := start(`{"path": "tests/quick", "idempotencyKey": "k-1"}`)
	_, again := start(`{"path": "tests/quick", "idempotencyKey": "k-1"}`)
	require.NotEmpty(t, first)
	require.Equal(t, first, again, "a retried start with its key finds the first execution")
}
