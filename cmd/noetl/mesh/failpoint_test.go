package mesh_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/failpoint"
)

// TestCrashAtEveryFailpointRecovers fails each component once between two of its side
// effects (as a crash and restart would) and checks that the execution still completes
// with a log identical in shape to a clean run: gap-free, no duplicate events, every
// command run.
//
// Decisions are taken inside the materializer's commit, so the orchestrator's publish of a
// decision is crossed only on the path after a notice: a second mesh takes that path.
func TestCrashAtEveryFailpointRecovers(t *testing.T) {
	t.Cleanup(failpoint.Reset)
	crashEach(t, start(t, false), true, failpoint.OrchestratorAfterDecide, failpoint.MaterializerAfterDecide, failpoint.MaterializerAfterInsert,
		failpoint.MaterializerAfterCommit, failpoint.MaterializerAfterPublish, failpoint.WorkerAfterTool, failpoint.WorkerAfterPublish)
	crashEach(t, startWith(t, false, func(c *mesh.Config) { c.DecideAfterNotice = true }), false, failpoint.OrchestratorAfterDecide,
		failpoint.OrchestratorAfterPublish, failpoint.MaterializerAfterInsert, failpoint.MaterializerAfterCommit)
}

// crashEach fails each of points twice in its own execution on h and compares the log with
// a clean run's: in order when ordered, else as the same events in any order. After a
// notice a decision's events travel as separate messages, so under load a fast worker's
// outcome may be committed between two of them; inside the commit they are one
// transaction, and the order is the decision's.
func crashEach(t *testing.T, h *harness, ordered bool, points ...string) {
	t.Helper()
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
	for _, point := range points {
		t.Run(point, func(t *testing.T) {
			failpoint.Reset()
			failpoint.Enable(point, 2)
			x := h.runFull(t, point)
			require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.exec.GetStatus(), "error: %v", x.exec.GetError())
			require.Equal(t, 2, failpoint.Hits(point), "the point was crossed and failed")
			if ordered {
				require.Equal(t, want, shape(x))
			} else {
				require.ElementsMatch(t, want, shape(x))
			}
			require.Equal(t, clean.exec.GetResult().AsInterface(), x.exec.GetResult().AsInterface())
		})
	}
}
