package execute

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/services/worker/internal/scrub"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// leakTool returns a text holding a credential's plain (not secret-named) field, as a
// later tool of a pipeline that learnt it some other way would.
type leakTool struct{}

func (leakTool) Run(context.Context, *tools.Call) (any, error) {
	return "connected to db-SENTINEL.internal as svc-SENTINEL", nil
}

// The secrets tool's step result names the fields with masks only, and every value it
// fetched, secret-named or not, is masked wherever else the command's events carry it.
func TestSecretsToolMasksEveryFetchedValue(t *testing.T) {
	ex := testExecutor()
	resolve := func(context.Context, string) (string, map[string]any, error) {
		return "postgres", map[string]any{"host": "db-SENTINEL.internal", "user": "svc-SENTINEL", "password": "pw-SENTINEL-1"}, nil
	}
	ex.Tools["secrets"] = &tools.Secrets{Resolve: resolve, Register: scrub.Register}
	ex.Tools["leak"] = leakTool{}
	cmd := &eventv1.Command{CommandId: "c1", ExecutionId: "x1", Tenant: "t", Step: "s", PlaybookPath: "p",
		Tools: []*eventv1.ToolCall{
			{Kind: "secrets", Label: "creds", ConfigJson: []byte(`{"auth": "pg_main"}`)},
			{Kind: "leak", Label: "use", ConfigJson: []byte(`{}`)},
		}}
	evs := ex.Execute(context.Background(), cmd)
	require.Len(t, evs, 1)
	done := evs[0]
	require.Nil(t, done.GetError())
	require.JSONEq(t, `{"creds": {"credential": "pg_main", "type": "postgres", "fields": {"host": "***", "user": "***", "password": "***"}},
		"use": "connected to *** as ***"}`, string(done.GetResultJson()))
	for _, ev := range evs {
		b, err := proto.Marshal(ev)
		require.NoError(t, err)
		require.NotContains(t, string(b), "SENTINEL")
	}
}
