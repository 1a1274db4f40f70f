package results

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	"github.com/noetl/noetl/internal/domain"
)

// refusingStore is a resultstore that refuses every read and counts them.
type refusingStore struct {
	rsv1.ResultStoreServiceClient
	gets []string
}

func (r *refusingStore) GetResult(_ context.Context, req *rsv1.GetResultRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[rsv1.GetResultResponse], error) {
	r.gets = append(r.gets, req.GetUri())
	return nil, status.Error(codes.NotFound, "no such result")
}

func TestResolveRefsFetchesOnlyWhatATemplateReadsPastTheSummary(t *testing.T) {
	t.Parallel()
	big := domain.StepResult{Status: "completed", Ref: &domain.RefView{URI: "noetl://big", Extracted: []byte(`{"count":3}`)}}
	small := domain.StepResult{Status: "completed", Result: []byte(`{"ok":true}`)}
	cmd := func(tmpl string) *eventv1.Command {
		return &eventv1.Command{Step: "use", Tenant: "t", Tools: []*eventv1.ToolCall{{Kind: "noop", ConfigJson: []byte(`{"result":"` + tmpl + `"}`)}}}
	}
	for _, tc := range []struct {
		name  string
		steps map[string]domain.StepResult
		tmpl  string
		fetch bool
	}{
		{"no reference in the scope", map[string]domain.StepResult{"small": small}, "{{ small.rows }}", false},
		{"no steps at all", nil, "{{ big.rows }}", false},
		{"the summary answers", map[string]domain.StepResult{"big": big, "small": small}, "{{ big.count }}", false},
		{"the reference itself", map[string]domain.StepResult{"big": big}, "{{ big._ref }}", false},
		{"past the summary", map[string]domain.StepResult{"big": big, "small": small}, "{{ big.rows }}", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rs := &refusingStore{}
			s := &Store{Results: rs}
			scope := &domain.Scope{Steps: tc.steps}
			err := s.ResolveRefs(context.Background(), cmd(tc.tmpl), scope)
			if !tc.fetch {
				require.NoError(t, err)
				require.Empty(t, rs.gets)
				require.Equal(t, tc.steps, scope.Steps)
				return
			}
			require.ErrorContains(t, err, "step use: load result of big (noetl://big)")
			require.Equal(t, []string{"noetl://big"}, rs.gets)
		})
	}
}
