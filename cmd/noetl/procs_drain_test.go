package main

import (
	"bytes"
	"encoding/json"
	"errors"
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

	"github.com/noetl/noetl/internal/testkit"
)

// gatedPlaybook's step appends "start <worker id>" to <workload.out>/<execution id>, waits
// until the file workload.gate exists, appends "end <worker id>" and returns the worker's
// id: every run of the tool, and which worker ran it, is in that file.
const gatedPlaybook = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: gated, path: tests/gated}
workload: {out: "", gate: ""}
workflow:
  - step: start
    tool:
      kind: python
      input: {out: "{{ workload.out }}", gate: "{{ workload.gate }}", execution: "{{ execution_id }}"}
      code: |
        import os, time
        me = os.environ.get("NOETL_WORKER_ID", "?")
        runs = os.path.join(out, execution)
        with open(runs, "a") as f:
            f.write("start " + me + "\n")
        deadline = time.time() + 120
        while not os.path.exists(gate):
            if time.time() > deadline:
                raise Exception("the gate never opened")
            time.sleep(0.02)
        with open(runs, "a") as f:
            f.write("end " + me + "\n")
        result = {"worker": me}
`

// TestWorkerDrainsOnSIGTERM runs workers as OS processes beside the process mesh (whose
// own worker is stopped first) and sends SIGTERM to one while its tool runs:
//
//   - with a drain timeout longer than the tool, the worker claims nothing more (the
//     executions started while it drains all run on the other worker), its tool finishes,
//     the step completes with that run's result, the tool ran exactly once, and the
//     worker exits 0 only after the tool finished;
//   - with a tiny drain timeout, the worker cancels the tool, exits 0 and hands the command
//     back, and another worker runs it (a second run of the tool) to completion.
func TestWorkerDrainsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the six services as processes (skipped with -short)")
	}
	p := startProcesses(t)
	stopPid(t, p.pids["worker"], syscall.SIGTERM)
	p.register(t, gatedPlaybook)
	out := t.TempDir()
	runs := func(id string) string {
		b, err := os.ReadFile(filepath.Join(out, id))
		if errors.Is(err, os.ErrNotExist) {
			return ""
		}
		require.NoError(t, err)
		return string(b)
	}
	waitRuns := func(id, want string) {
		t.Helper()
		testkit.WaitFor(t, 60*time.Second, func() error {
			if got := runs(id); got != want {
				return fmt.Errorf("execution %s ran %q, want %q", id, got, want)
			}
			return nil
		})
	}
	gate := func(name string) (path string, open func()) {
		path = filepath.Join(out, name+".gate")
		return path, func() { require.NoError(t, os.WriteFile(path, nil, 0o600)) }
	}

	t.Run("finishes its running tool", func(t *testing.T) {
		a := p.startService(t, "worker", "NOETL_WORKER_ID=drain-a", "NOETL_WORKER_DRAIN_TIMEOUT=2m")
		g1, open1 := gate("first")
		first := p.startExecution(t, "tests/gated", map[string]any{"out": out, "gate": g1})
		waitRuns(first, "start drain-a\n")
		b := p.startService(t, "worker", "NOETL_WORKER_ID=drain-b", "NOETL_WORKER_DRAIN_TIMEOUT=2m")

		require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
		a.waitLog(t, `"msg":"worker draining"`)
		// Started while a drains: b runs them all, a claims none.
		g2, open2 := gate("second")
		var later []string
		for range 3 {
			later = append(later, p.startExecution(t, "tests/gated", map[string]any{"out": out, "gate": g2}))
		}
		for _, id := range later {
			waitRuns(id, "start drain-b\n")
		}
		require.False(t, a.exited(), "the worker exited while its tool ran: %s", a.logs.String())
		require.Equal(t, "start drain-a\n", runs(first), "the draining worker's tool goes on")

		open1()
		require.Equal(t, 0, a.wait(t, 60*time.Second), "a drained worker exits 0: %s", a.logs.String())
		require.Equal(t, "start drain-a\nend drain-a\n", runs(first), "the worker exited after its tool finished, which ran once")
		x := p.waitExecution(t, first)
		require.Equal(t, "EXECUTION_STATUS_COMPLETED", x["status"], "%v", x)
		require.Equal(t, map[string]any{"worker": "drain-a"}, x["result"], "the drained run's result")
		require.NotContains(t, a.logs.String(), "left for redelivery")

		open2()
		for _, id := range later {
			x := p.waitExecution(t, id)
			require.Equal(t, "EXECUTION_STATUS_COMPLETED", x["status"], "%v", x)
			require.Equal(t, "start drain-b\nend drain-b\n", runs(id))
		}
		require.Equal(t, "start drain-a\nend drain-a\n", runs(first), "no second run of the drained command")
		require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 0, b.wait(t, 60*time.Second), "an idle worker exits 0: %s", b.logs.String())
	})

	t.Run("hands back what outlasts the drain timeout", func(t *testing.T) {
		c := p.startService(t, "worker", "NOETL_WORKER_ID=drain-c", "NOETL_WORKER_DRAIN_TIMEOUT=100ms")
		g3, open3 := gate("third")
		id := p.startExecution(t, "tests/gated", map[string]any{"out": out, "gate": g3})
		waitRuns(id, "start drain-c\n")
		d := p.startService(t, "worker", "NOETL_WORKER_ID=drain-d", "NOETL_WORKER_DRAIN_TIMEOUT=2m")

		require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 0, c.wait(t, 60*time.Second), "a worker whose drain timed out exits 0: %s", c.logs.String())
		require.Contains(t, c.logs.String(), "left for redelivery")
		// The command comes back at once (a Nak, not the ack wait) and d runs it again.
		waitRuns(id, "start drain-c\nstart drain-d\n")
		open3()
		x := p.waitExecution(t, id)
		require.Equal(t, "EXECUTION_STATUS_COMPLETED", x["status"], "%v", x)
		require.Equal(t, map[string]any{"worker": "drain-d"}, x["result"])
		require.Equal(t, "start drain-c\nstart drain-d\nend drain-d\n", runs(id), "the cancelled run never finished")
		require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 0, d.wait(t, 60*time.Second), "%s", d.logs.String())
	})
}

// service is one more service process started beside a procMesh.
type service struct {
	cmd  *exec.Cmd
	logs *syncBuffer
	// done is closed once the process has exited and been reaped.
	done chan struct{}
	err  error
}

// startService starts the binary of service name with the mesh's environment (and the
// service's own Postgres URL) plus env and returns once its /readyz answers 200. It is
// stopped (SIGTERM, then SIGKILL after 30 s) when the test ends, and its logs are shown if
// the test failed.
func (p *procMesh) startService(t *testing.T, name string, env ...string) *service {
	t.Helper()
	admin := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	s := &service{cmd: exec.Command(filepath.Join(p.bin, name), "--admin", admin), logs: &syncBuffer{}, done: make(chan struct{})}
	s.cmd.Env = append(append(append(os.Environ(), p.env...), p.serviceEnv(name)...), env...)
	s.cmd.Stderr = s.logs
	require.NoError(t, s.cmd.Start())
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		if !s.exited() {
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.done:
			case <-time.After(30 * time.Second):
				_ = s.cmd.Process.Kill()
				<-s.done
			}
		}
		if t.Failed() {
			t.Logf("%s (%s) logs:\n%s", name, strings.Join(env, " "), s.logs.String())
		}
	})
	testkit.WaitFor(t, 60*time.Second, func() error {
		if s.exited() {
			return fmt.Errorf("%s exited: %v: %s", name, s.err, s.logs.String())
		}
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s not ready: %d", name, resp.StatusCode)
		}
		return nil
	})
	return s
}

// exited reports whether the process has exited.
func (s *service) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// wait waits up to timeout for the process to exit and returns its exit code.
func (s *service) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(timeout):
		require.FailNow(t, "the process did not exit", "after %s; logs:\n%s", timeout, s.logs.String())
	}
	var exit *exec.ExitError
	if errors.As(s.err, &exit) {
		return exit.ExitCode()
	}
	require.NoError(t, s.err)
	return 0
}

// waitLog waits until the process's logs contain text.
func (s *service) waitLog(t *testing.T, text string) {
	t.Helper()
	testkit.WaitFor(t, 60*time.Second, func() error {
		if !strings.Contains(s.logs.String(), text) {
			return fmt.Errorf("no %s in the logs yet", text)
		}
		return nil
	})
}

// stopPid sends sig to a process of the mesh and waits until it is gone (or a zombie its
// parent, this test, has not reaped yet).
func stopPid(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, syscall.Kill(pid, sig))
	testkit.WaitFor(t, 60*time.Second, func() error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err == nil && !strings.Contains(string(b[strings.LastIndexByte(string(b), ')')+1:]), " Z ") {
			return fmt.Errorf("process %d still running", pid)
		}
		return nil
	})
}

// register adds a playbook to the catalog through the gateway.
func (p *procMesh) register(t *testing.T, doc string) {
	t.Helper()
	code, body := p.post(t, "/v1/playbooks", map[string]any{"content": doc})
	require.Equal(t, http.StatusOK, code, "%s", body)
}

// startExecution starts an execution of path and returns its id.
func (p *procMesh) startExecution(t *testing.T, path string, workload map[string]any) string {
	t.Helper()
	code, body := p.post(t, "/v1/executions", map[string]any{"path": path, "workload": workload})
	require.Equal(t, http.StatusOK, code, "%s", body)
	var out struct {
		ExecutionID string `json:"executionId"`
	}
	require.NoError(t, json.Unmarshal(body, &out))
	require.NotEmpty(t, out.ExecutionID, "%s", body)
	return out.ExecutionID
}

// waitExecution waits until execution id has ended and returns it as the REST API shows it.
func (p *procMesh) waitExecution(t *testing.T, id string) map[string]any {
	t.Helper()
	var final map[string]any
	testkit.WaitFor(t, 2*time.Minute, func() error {
		x, err := p.endedExecution(id)
		final = x
		return err
	})
	return final
}

// endedExecution returns execution id as the REST API shows it, or an error while it has
// not ended.
func (p *procMesh) endedExecution(id string) (map[string]any, error) {
	resp, err := p.do(http.MethodGet, "/v1/executions/"+id, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return nil, err
	}
	x, _ := m["execution"].(map[string]any)
	if st, _ := x["status"].(string); !strings.HasSuffix(st, "COMPLETED") && !strings.HasSuffix(st, "FAILED") && !strings.HasSuffix(st, "CANCELLED") {
		return nil, fmt.Errorf("execution %s: status %v", id, x["status"])
	}
	return x, nil
}

// post sends a JSON body to the gateway and returns the status code and the body.
func (p *procMesh) post(t *testing.T, path string, body any) (int, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	resp, err := p.do(http.MethodPost, path, bytes.NewReader(b))
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, raw
}
