package tools

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The artifact tool loads the referenced result for the command's tenant; a missing
// reference, another action or an unreachable store fail the step, the last retryably.
func TestArtifactLoadsAStoredResult(t *testing.T) {
	t.Parallel()
	var asked []string
	a := Artifact{Fetch: func(_ context.Context, tenant, uri string) ([]byte, error) {
		asked = append(asked, tenant+" "+uri)
		if uri == "noetl://down" {
			return nil, status.Error(codes.Unavailable, "restarting")
		}
		return []byte(`{"rows": [1, 2]}`), nil
	}}
	ctx := WithTenant(context.Background(), "acme")
	v, err := a.Run(ctx, &Call{Input: map[string]any{"result_ref": "noetl://r/1"}})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"rows": []any{json.Number("1"), json.Number("2")}}, v, "numbers kept exact")
	require.Equal(t, []string{"acme noetl://r/1"}, asked)

	_, err = a.Run(ctx, &Call{Config: map[string]any{}})
	require.ErrorContains(t, err, "input.result_ref is required")
	_, err = a.Run(ctx, &Call{Config: map[string]any{"action": "put", "ref": "noetl://r/1"}})
	require.ErrorContains(t, err, `action "put" is not supported`)
	_, err = a.Run(ctx, &Call{Config: map[string]any{"uri": "noetl://down"}})
	var te *Error
	require.ErrorAs(t, err, &te)
	require.True(t, te.Retryable)
}

// system_info names the pool, the worker and the kinds of its tool table, sorted.
func TestSystemInfoListsTheTable(t *testing.T) {
	t.Parallel()
	r := Registry{"noop": Noop{}}
	r["system_info"] = SystemInfo{Pool: "system", Worker: "w1", Tools: &r}
	v, err := r.Run(context.Background(), &Call{Kind: "system_info"})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"pool": "system", "worker": "w1", "tools": []string{"noop", "system_info"}}, v)
}
