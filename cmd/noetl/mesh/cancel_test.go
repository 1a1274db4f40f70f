package mesh_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/testkit"
)

func TestCancelStopsTheRunningToolAndEndsCancelled(t *testing.T) {
	h := start(t, false)
	ctx := context.Background()
	pidFile := filepath.Join(t.TempDir(), "pid")
	reg, err := h.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: slow, path: tests/slow}
workflow:
  - step: start
    tool:
      kind: python
      input: {pid_file: "{{ workload.pid_file }}"}
      code: |
        import os, time
        with open(pid_file, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)
        result = {"slept": True}
`})
	require.NoError(t, err)
	w, err := structpb.NewStruct(map[string]any{"pid_file": pidFile})
	require.NoError(t, err)
	started, err := h.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath(), Workload: w})
	require.NoError(t, err)
	var pid int
	testkit.WaitFor(t, 30*time.Second, func() error {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return err
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	_, err = h.exe.CancelExecution(ctx, &apiv1.CancelExecutionRequest{ExecutionId: started.GetExecutionId(), Reason: "test"})
	require.NoError(t, err)
	done, err := h.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: started.GetExecutionId(), Timeout: durationpb.New(30 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, done.GetExecution().GetStatus(), "events: %v", h.events(t, started.GetExecutionId()))
	testkit.WaitFor(t, 30*time.Second, func() error {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return fmt.Errorf("python process %d still running", pid)
	})
	// Cancelling again is refused: the execution is already terminal.
	_, err = h.exe.CancelExecution(ctx, &apiv1.CancelExecutionRequest{ExecutionId: started.GetExecutionId()})
	require.Error(t, err)
}

func TestCancelCascadesToChildExecutions(t *testing.T) {
	h := start(t, false)
	ctx := context.Background()
	for _, doc := range []string{`
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: child, path: tests/child}
workflow:
  - step: start
    tool: {kind: python, code: "import time\ntime.sleep(120)\nresult = 1"}
`, `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: parent, path: tests/parent}
workflow:
  - step: start
    tool: {kind: playbook, path: tests/child}
    next: [{step: wait}]
  - step: wait
    tool: {kind: python, code: "import time\ntime.sleep(120)\nresult = 1"}
`} {
		_, err := h.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: doc})
		require.NoError(t, err)
	}
	started, err := h.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "tests/parent"})
	require.NoError(t, err)
	var child string
	testkit.WaitFor(t, 30*time.Second, func() error {
		x, err := h.exe.GetExecution(ctx, &apiv1.GetExecutionRequest{ExecutionId: started.GetExecutionId()})
		if err != nil {
			return err
		}
		res := x.GetExecution().GetSteps()["start"].GetResult().GetStructValue().GetFields()
		if res["execution_id"] == nil || x.GetExecution().GetSteps()["wait"] == nil {
			return fmt.Errorf("child not started yet")
		}
		child = res["execution_id"].GetStringValue()
		return nil
	})
	_, err = h.exe.CancelExecution(ctx, &apiv1.CancelExecutionRequest{ExecutionId: started.GetExecutionId()})
	require.NoError(t, err)
	done, err := h.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: child, Timeout: durationpb.New(30 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, done.GetExecution().GetStatus())
	require.Equal(t, started.GetExecutionId(), done.GetExecution().GetParentExecutionId())
	require.Contains(t, done.GetExecution().GetError().GetMessage(), "parent")
}
