package mesh_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
)

// commits groups an execution's log into its commits (consecutive events with one commit
// time) and names each by its event types.
func commits(x *harnessRun) [][]string {
	var out [][]string
	for i, ev := range x.events {
		if i == 0 || !ev.GetCommitTime().AsTime().Equal(x.events[i-1].GetCommitTime().AsTime()) {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], ev.GetType()+":"+ev.GetStep())
	}
	return out
}

// TestOneCommitPerStep runs the three-step playbook on a mesh that decides inside the
// materializer's commit: the start commits with the first step's command, and each outcome
// with the next step's command (or the end), so the log is one commit per step plus the
// start's. A mesh whose decisions follow their notices writes the same log in about twice
// as many commits.
func TestOneCommitPerStep(t *testing.T) {
	inline := start(t, false).runFull(t, "inline")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, inline.exec.GetStatus())
	got := commits(inline)
	require.Len(t, got, 4, "%v", got)
	require.Equal(t, []string{domain.EventPlaybookStarted + ":", domain.EventCommandIssued + ":start"}, got[0], "the first step entered by its command")
	steps := []string{"start", "double", "end"}
	for i, step := range steps {
		require.Equal(t, domain.EventCommandCompleted+":"+step, got[i+1][0], "commit %d opens with %s's outcome: %v", i+1, step, got[i+1])
		require.Contains(t, got[i+1], domain.EventStepExit+":"+step, "and holds its exit: %v", got[i+1])
		if i+1 < len(steps) {
			require.Contains(t, got[i+1], domain.EventCommandIssued+":"+steps[i+1], "and the next step's command: %v", got[i+1])
		}
	}
	require.Equal(t, domain.EventPlaybookCompleted+":", got[3][len(got[3])-1])

	notice := startWith(t, false, func(c *mesh.Config) { c.DecideAfterNotice = true }).runFull(t, "notice")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, notice.exec.GetStatus())
	// At least the start, then an outcome and a decision per step (a decision's events may
	// land in more than one batch).
	require.GreaterOrEqual(t, len(commits(notice)), 7, "%v", commits(notice))
	var a, b []string
	for _, ev := range inline.events {
		a = append(a, ev.GetType()+":"+ev.GetStep())
	}
	for _, ev := range notice.events {
		b = append(b, ev.GetType()+":"+ev.GetStep())
	}
	require.Equal(t, b, a, "the same log either way")
	require.Equal(t, notice.exec.GetResult().AsInterface(), inline.exec.GetResult().AsInterface())
}
