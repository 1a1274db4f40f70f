package failpoint

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPointsFailOnlyWhenEnabledAndOnlyNTimes(t *testing.T) {
	t.Cleanup(Reset)
	require.NoError(t, Eval(WorkerAfterTool))
	Enable(WorkerAfterTool, 2)
	require.ErrorIs(t, Eval(WorkerAfterTool), ErrInjected)
	require.NoError(t, Eval(MaterializerAfterCommit), "other points stay quiet")
	err := Eval(WorkerAfterTool)
	require.True(t, errors.Is(err, ErrInjected))
	require.Contains(t, err.Error(), WorkerAfterTool)
	require.NoError(t, Eval(WorkerAfterTool))
	require.Equal(t, 2, Hits(WorkerAfterTool))
}
