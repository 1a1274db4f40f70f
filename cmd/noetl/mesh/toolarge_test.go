package mesh_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// TestADecisionTooLargeToPublishFailsTheRun builds a command whose context (five 60 KB
// results its templates reference) exceeds the 256 KiB message limit: the execution must
// fail with a clear error instead of retrying forever.
func TestADecisionTooLargeToPublishFailsTheRun(t *testing.T) {
	h := start(t, false)
	var b strings.Builder
	b.WriteString("apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: big, path: tests/big}\nworkflow:\n")
	names := []string{"start", "b", "c", "d", "e"}
	for i, n := range names {
		next := "all"
		if i < len(names)-1 {
			next = names[i+1]
		}
		fmt.Fprintf(&b, "  - step: %s\n    tool: {kind: python, code: \"result = 'x' * 60000\"}\n    next: [{step: %s}]\n", n, next)
	}
	b.WriteString("  - step: all\n    tool: {kind: noop, result: \"{{ start }}{{ b }}{{ c }}{{ d }}{{ e }}\"}\n")
	x := h.run(t, b.String(), nil, "")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, x.GetStatus())
	require.Contains(t, x.GetError().GetMessage(), "cannot be published")
}
