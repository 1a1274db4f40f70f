package vars

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/domain"
)

// A write is checked before anything is read or published: each refusal names the field.
func TestVarsPayloadChecksTheRequest(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		req  *orchv1.UpdateExecutionVariablesRequest
		code codes.Code
		msg  string
	}{
		{"nothing", &orchv1.UpdateExecutionVariablesRequest{}, codes.InvalidArgument, "variables: nothing to set or unset"},
		{"bad type", &orchv1.UpdateExecutionVariablesRequest{Type: "secret", Unset: []string{"a"}}, codes.InvalidArgument, "type: must be one of"},
		{"long source step", &orchv1.UpdateExecutionVariablesRequest{SourceStep: strings.Repeat("s", 257), Unset: []string{"a"}}, codes.InvalidArgument, "source_step:"},
		{"bad name", &orchv1.UpdateExecutionVariablesRequest{SetJson: map[string][]byte{"1x": []byte(`1`)}}, codes.InvalidArgument, `variables: "1x"`},
		{"set and unset", &orchv1.UpdateExecutionVariablesRequest{SetJson: map[string][]byte{"a": []byte(`1`)}, Unset: []string{"a"}}, codes.InvalidArgument, "variables.a: both set and unset"},
		{"not json", &orchv1.UpdateExecutionVariablesRequest{SetJson: map[string][]byte{"a": []byte(`{`)}}, codes.InvalidArgument, "variables.a: not JSON"},
		{"too large", &orchv1.UpdateExecutionVariablesRequest{SetJson: map[string][]byte{"a": []byte(`"` + strings.Repeat("x", domain.MaxVarValueBytes) + `"`)}}, codes.ResourceExhausted, "variables.a:"},
	} {
		_, err := varsPayload(c.req)
		require.Equal(t, c.code, status.Code(err), c.name)
		require.Contains(t, status.Convert(err).Message(), c.msg, c.name)
	}

	p, err := varsPayload(&orchv1.UpdateExecutionVariablesRequest{SetJson: map[string][]byte{"a": []byte(`{"n": 1}`)}, Unset: []string{"b", "b"}, SourceStep: "load"})
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, p.Unset, "unset names deduplicated")
	require.Equal(t, domain.VarTypes[0], p.Set["a"].Type, "the default type")
	require.Equal(t, "load", p.Set["a"].SourceStep)
	require.JSONEq(t, `{"n": 1}`, string(p.Set["a"].Value))

	p, err = varsPayload(&orchv1.UpdateExecutionVariablesRequest{Clear: true, Unset: []string{"ignored"}})
	require.NoError(t, err)
	require.True(t, p.Clear)
	require.Empty(t, p.Unset, "clear unsets everything; the names are not kept")
}
