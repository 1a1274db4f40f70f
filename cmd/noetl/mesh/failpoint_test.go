package mesh_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/failpoint"
)

// TestCrashAtEveryFailpointRecovers fails each component once between two of its side
// effects (as a crash and restart would) and checks that the execution still completes
// with a log identical in shape to a clean run: gap-free, no duplicate events, every
// command run.
func TestCrashAtEveryFailpointRecovers(t *testing.T) {
	h := start(t, false)
	t.Cleanup(failpoint.Reset)
	shape := func(x *harnessRun) []string {
		var out []string
		seen := map[string]bool{}
		for i, ev := range x.events {
			require.Equal(t, int64(i+1), ev.GetSeq(), "gap-free seq")
			require.False(t, seen[ev.GetEventId()], "duplicate event %s", ev.GetEventId())
			seen[ev.GetEventId()] = true
			if progressReport(ev) {
				continue
			}
			out = append(out, fmt.Sprintf("%s:%s:%d", ev.GetType(), ev.GetStep(), ev.GetAttempt()))
		}
		return out
	}
	clean := h.runFull(t, "clean")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, clean.exec.GetStatus())
	want := shape(clean)
	for _, point := range []string{
		failpoint.OrchestratorAfterDecide,
		failpoint.OrchestratorAfterPublish,
		failpoint.MaterializerAfterInsert,
		failpoint.MaterializerAfterCommit,
		failpoint.MaterializerAfterPublish,
		failpoint.WorkerAfterTool,
		failpoint.WorkerAfterPublish,
	} {
		t.Run(point, func(t *testing.T) {
			failpoint.Reset()
			failpoint.Enable(point, 2)
			x := h.runFull(t, point)
			require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.exec.GetStatus(), "error: %v", x.exec.GetError())
			require.Equal(t, 2, failpoint.Hits(point), "the point was crossed and failed")
			require.Equal(t, want, shape(x))
			require.Equal(t, clean.exec.GetResult().AsInterface(), x.exec.GetResult().AsInterface())
		})
	}
}
