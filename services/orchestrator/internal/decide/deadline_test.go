package decide

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// A command carries its execution's deadline (from the state, not a clock), so the worker
// stops a tool still running when the execution's timeout passes; an execution without a
// timeout issues commands without one.
func TestCommandsCarryTheExecutionDeadline(t *testing.T) {
	const src = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: d, path: t/d}
workflow:
  - step: start
    tool: {kind: noop}
`
	s := newSim(t, src, `{}`)
	dl := timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s.st.Deadline = dl
	cmds := s.decide()
	require.Len(t, cmds, 1)
	require.True(t, proto.Equal(dl, cmds[0].GetCommand().GetDeadline()), "%v", cmds[0].GetCommand().GetDeadline())

	cmds = newSim(t, src, `{}`).decide()
	require.Len(t, cmds, 1)
	require.Nil(t, cmds[0].GetCommand().GetDeadline())
}
