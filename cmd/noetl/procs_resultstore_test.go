package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/testkit"
)

// gatedBigPlaybook's first step marks workload.marker, waits until the file workload.gate
// exists, then returns a result far over the inline budget: a 1 MB document, or with
// shape "table" 20,000 records (stored as Arrow over Flight). The next step reads all of it
// back through the reference.
const gatedBigPlaybook = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: gated-big, path: tests/gated-big}
workload: {marker: "", gate: "", shape: doc}
workflow:
  - step: start
    tool:
      kind: python
      input: {marker: "{{ workload.marker }}", gate: "{{ workload.gate }}", shape: "{{ workload.shape }}"}
      code: |
        import os, time
        open(marker, "a").close()
        deadline = time.time() + 120
        while not os.path.exists(gate):
            if time.time() > deadline:
                raise Exception("the gate never opened")
            time.sleep(0.02)
        if shape == "table":
            result = [{"id": i, "name": "row-%d" % i} for i in range(20000)]
        else:
            result = {"blob": "x" * 1000000}
    next: [{step: check}]
  - step: check
    tool:
      kind: python
      input: {v: "{{ start }}"}
      code: |
        result = {"n": len(v) if isinstance(v, list) else len(v["blob"])}
`

// TestResultStoreRestartDoesNotFailLargeResults is the chaos run's "store the result:
// Unavailable" failure (go run ./bench --workload chaos --executions 20 --faults 4 --seed 7):
// the resultstore is killed (kill -9) while two steps are about to store results by
// reference, one JSON document (PutResult) and one table (Flight DoPut), and started again
// on the same ports once the worker has found it unreachable. The worker retries, both
// steps complete, the next steps read the results back whole, and each reference resolves
// through the gateway.
func TestResultStoreRestartDoesNotFailLargeResults(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the six services as processes (skipped with -short)")
	}
	p := startProcesses(t)
	// A worker of the test's own, whose logs say when it found the resultstore gone.
	stopPid(t, p.pids["worker"], syscall.SIGTERM)
	w := p.startService(t, "worker", "NOETL_WORKER_ID=rs-restart")
	p.register(t, gatedBigPlaybook)
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	shapes := map[string]int{"doc": 1000000, "table": 20000}
	ids := map[string]string{}
	for shape := range shapes {
		marker := filepath.Join(dir, shape)
		ids[shape] = p.startExecution(t, "tests/gated-big", map[string]any{"marker": marker, "gate": gate, "shape": shape})
		testkit.WaitFor(t, 60*time.Second, func() error {
			_, err := os.Stat(marker)
			return err
		})
	}

	stopPid(t, p.pids["resultstore"], syscall.SIGKILL)
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	for shape, id := range ids {
		testkit.WaitFor(t, 60*time.Second, func() error {
			for _, line := range strings.Split(w.logs.String(), "\n") {
				if strings.Contains(line, `"msg":"resultstore unavailable: storing the result again"`) && strings.Contains(line, id) {
					return nil
				}
			}
			if _, err := p.endedExecution(id); err == nil {
				return nil // without a retry, as before the fix: the checks below say how
			}
			return fmt.Errorf("%s: the worker has not found the resultstore gone yet", shape)
		})
	}
	p.startService(t, "resultstore")

	for shape, id := range ids {
		x := p.waitExecution(t, id)
		require.Equal(t, "EXECUTION_STATUS_COMPLETED", x["status"], "%s: %v", shape, x)
		require.Equal(t, map[string]any{"n": float64(shapes[shape])}, x["result"], "%s: the next step read all of it", shape)
		steps, _ := x["steps"].(map[string]any)
		first, _ := steps["start"].(map[string]any)
		ref, _ := first["resultRef"].(map[string]any)
		uri, _ := ref["uri"].(string)
		require.NotEmpty(t, uri, "%s: the result is held by reference: %v", shape, first)
		testkit.WaitFor(t, 60*time.Second, func() error {
			resp, err := p.do(http.MethodGet, "/v1/results/"+url.PathEscape(uri[strings.LastIndex(uri, "/")+1:]), nil)
			if err != nil {
				return err
			}
			defer func() { _ = resp.Body.Close() }()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: GET %s: %d %s", shape, uri, resp.StatusCode, b)
			}
			return nil
		})
	}
}
