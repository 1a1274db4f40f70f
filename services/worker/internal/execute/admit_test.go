package execute

import (
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

func TestWorkersAdmitOnlyTheirPoolsCommands(t *testing.T) {
	cases := []struct {
		pool, path, kind string
		ok               bool
	}{
		{"shared", "user/p", "python", true},
		{"shared", "system/p", "python", false},    // a system playbook's command pinned to the shared pool
		{"shared", "user/p", "system_info", false}, // a system tool outside the system pool
		{"system", "system/p", "system_info", true},
		{"system", "user/p", "python", false}, // a user command pinned to the system pool
		{"system", "user/p", "system_info", false},
	}
	for _, c := range cases {
		t.Run(c.pool+" "+c.path+" "+c.kind, func(t *testing.T) {
			ex := &Executor{Pool: c.pool}
			err := ex.admit(&eventv1.Command{Step: "s", PlaybookPath: c.path, Tools: []*eventv1.ToolCall{{Kind: c.kind}}})
			if c.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}
