package mesh_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// TestFailedPythonStepReadsAsOneLine: the first failure a user sees names the step, the
// line of the step's own code and the exception, with none of the runner's frames.
func TestFailedPythonStepReadsAsOneLine(t *testing.T) {
	h := start(t, false)
	x := h.run(t, `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: keyerror, path: tests/keyerror}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        data = {}
        result = data["missing"]
`, nil, "")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, x.GetStatus())
	require.Equal(t, "step start: tool python: line 2: KeyError: 'missing'", x.GetError().GetMessage())
}
