package mesh_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

const timeoutPlaybook = `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: %[1]s, path: tests/%[1]s}
workflow:
  - step: start
    next: slow
  - step: slow
    spec: {timeout: %[2]s}
    tool:
      kind: python
      code: |
        import time
        time.sleep(%[3]d)
        result = {"slept": %[3]d}
    next: end
  - step: end
`

// TestStepTimeoutStopsTheTool: a step's spec.timeout reaches the worker with its command;
// an attempt past it is stopped (long before the tool's own end) and fails with
// deadline_exceeded naming the step and the bound, and a step within it completes.
func TestStepTimeoutStopsTheTool(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	c := newClient(t, m, m.AdminKey)
	ctx := context.Background()
	for _, pb := range []string{fmt.Sprintf(timeoutPlaybook, "slow", "1s", 600), fmt.Sprintf(timeoutPlaybook, "quick", "60", 0)} {
		_, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: pb})
		require.NoError(t, err)
	}
	x := cycleRunGRPC(t, c, "tests/slow") // waits at most a minute: the tool would sleep ten
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, x.GetStatus())
	require.Equal(t, []string{"slow"}, x.GetFailedSteps())
	require.Equal(t, "deadline_exceeded", x.GetSteps()["slow"].GetError().GetCode(), "%v", x.GetSteps()["slow"])
	require.Equal(t, "step slow: the attempt ran past its timeout of 1s (spec.timeout) and was stopped", x.GetSteps()["slow"].GetError().GetMessage())
	require.True(t, strings.Contains(x.GetError().GetMessage(), "spec.timeout"), "%v", x.GetError())

	x = cycleRunGRPC(t, c, "tests/quick")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "%v", x.GetError())
}

const executionTimeout = `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: %[1]s, path: tests/%[1]s}
%[2]s
workflow:
  - step: start
    next: slow
  - step: slow
    tool:
      kind: python
      code: |
        import time
        time.sleep(600)
        result = {}
    next: end
  - step: end
`

// TestExecutionTimeoutEndsTheExecution: a playbook's spec.timeout, or a start's timeout,
// bounds the whole execution: its durable timer fires at the start's commit time plus the
// bound and the execution ends FAILED with deadline_exceeded; a bad start timeout is
// refused naming the field.
func TestExecutionTimeoutEndsTheExecution(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	c := newClient(t, m, m.AdminKey)
	ctx := context.Background()
	for _, pb := range []string{fmt.Sprintf(executionTimeout, "bounded", "spec: {timeout: 2s}"), fmt.Sprintf(executionTimeout, "unbounded", "")} {
		_, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: pb})
		require.NoError(t, err)
	}
	x := cycleRunGRPC(t, c, "tests/bounded")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, x.GetStatus())
	require.Equal(t, "deadline_exceeded", x.GetError().GetCode())
	require.Equal(t, "the execution ran past its timeout of 2s (spec.timeout or the start's timeout) and was stopped", x.GetError().GetMessage())

	started := c.wantREST(http.StatusOK, http.MethodPost, "/v1/executions", map[string]any{"path": "tests/unbounded", "timeout": "1.5s"})
	id, _ := started["executionId"].(string)
	done := c.wantREST(http.StatusOK, http.MethodGet, "/v1/executions/"+id+":wait?timeout=60s", nil)
	xr, _ := done["execution"].(map[string]any)
	require.Equal(t, "EXECUTION_STATUS_FAILED", xr["status"], "%v", xr)
	e, _ := xr["error"].(map[string]any)
	require.Equal(t, "deadline_exceeded", e["code"])

	code, out, _ := c.rest(http.MethodPost, "/v1/executions", map[string]any{"path": "tests/unbounded", "timeout": "-1s"})
	require.Equal(t, http.StatusBadRequest, code, "%v", out)
	require.Contains(t, fmt.Sprint(out["message"]), "timeout: must be positive")
}
