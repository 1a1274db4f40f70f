package playbook

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A kind no worker pool runs never passes registration: the error names the line, the
// step and the kind, says why, and lists the kinds this engine runs.
func TestToolKindNoPoolRunsIsRefused(t *testing.T) {
	t.Parallel()
	runs := "(this engine runs: " + strings.Join(ToolKinds(), ", ") + ")"
	for _, tc := range []struct {
		kind, msg string
	}{
		{"task_sequence", `tool kind "task_sequence" is internal to NoETL`},
		{"system_orchestrate", `unknown tool kind "system_orchestrate" ` + runs},
		{"rhai", `unknown tool kind "rhai" ` + runs},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(doc("workflow:\n  - step: start\n    tool:\n      kind: " + tc.kind + "\n"))
			require.Error(t, err)
			var pe *Error
			require.True(t, errors.As(err, &pe))
			require.Equal(t, 9, pe.Line)
			require.Equal(t, "start", pe.Step)
			require.Equal(t, "tool.kind", pe.Field)
			require.Contains(t, pe.Msg, tc.msg)
			require.Contains(t, err.Error(), `line 9`)
			require.Contains(t, err.Error(), `step "start"`)
		})
	}
	// In a pipeline, the item is named.
	_, err := Parse(doc("workflow:\n  - step: start\n    tool:\n      - {name: a, kind: noop}\n      - {name: b, kind: task_sequence}\n"))
	require.ErrorContains(t, err, `tool kind "task_sequence" is internal to NoETL`)
}

func TestToolKindsRunByAPoolAreAccepted(t *testing.T) {
	t.Parallel()
	for _, k := range WorkerToolKinds {
		require.True(t, KnownToolKind(k), k)
	}
	require.Contains(t, ToolKinds(), "shell")
	require.Contains(t, ToolKinds(), "secrets")
	require.Contains(t, ToolKinds(), "workbook")
	require.Contains(t, ToolKinds(), "duckdb")
	require.Contains(t, ToolKinds(), "nats")
}

// A nats tool names its operation; a literal one must be known.
func TestNATSOperationIsChecked(t *testing.T) {
	t.Parallel()
	_, err := Parse(doc("workflow:\n  - step: start\n    tool: {kind: nats, bucket: b}\n"))
	require.ErrorContains(t, err, "a nats tool needs an operation (one of kv_get")
	_, err = Parse(doc("workflow:\n  - step: start\n    tool: {kind: nats, operation: kv_fetch}\n"))
	require.ErrorContains(t, err, `unknown nats operation "kv_fetch"`)
	mustParse(t, doc("workflow:\n  - step: start\n    tool: {kind: nats, operation: \"{{ workload.op }}\"}\n"))
	mustParse(t, doc("workflow:\n  - step: start\n    tool: {kind: nats, operation: js_consume, stream: S}\n"))
}
