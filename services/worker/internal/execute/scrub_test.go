package execute

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/playbook/template"
	"github.com/noetl/noetl/services/worker/internal/results"
	"github.com/noetl/noetl/services/worker/internal/scrub"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// echoTool resolves a credential as the http tool does (through the worker's resolver,
// which teaches the command's scrubber) and returns, or fails with, what a server echoing
// it would.
type echoTool struct{ fail bool }

func (e echoTool) Run(ctx context.Context, _ *tools.Call) (any, error) {
	data := map[string]any{"username": "probe", "password": "pw-SENTINEL-1", "token": "tok-SENTINEL-2"}
	scrub.FromContext(ctx).AddCredential(data) // what the resolver in Run does
	if e.fail {
		return nil, &tools.Error{Msg: "server said: Bearer tok-SENTINEL-2", Retryable: true}
	}
	return map[string]any{
		"headers": map[string]any{"Authorization": []any{"Bearer tok-SENTINEL-2"}},
		"rows":    []any{map[string]any{"cell": "pw-SENTINEL-1"}},
	}, nil
}

func testExecutor() *Executor {
	return &Executor{
		Pool:     "shared",
		Renderer: template.NewRenderer(),
		Tools:    tools.Registry{"echo": echoTool{}, "echo_fail": echoTool{fail: true}},
		Results:  &results.Store{InlineMaxBytes: 64 << 10},
		Tracer:   noop.NewTracerProvider().Tracer("test"),
		Metrics:  NewMetrics("shared"),
	}
}

func TestExecuteMasksResolvedSecrets(t *testing.T) {
	ex := testExecutor()
	cmd := &eventv1.Command{CommandId: "c1", ExecutionId: "x1", Tenant: "t", Step: "s", PlaybookPath: "p",
		Tools: []*eventv1.ToolCall{{Kind: "echo", ConfigJson: []byte(`{}`)}}}
	evs := ex.Execute(context.Background(), cmd)
	require.Len(t, evs, 1)
	done := evs[0]
	require.Nil(t, done.GetError())
	require.JSONEq(t, `{"headers":{"Authorization":["Bearer ***"]},"rows":[{"cell":"***"}]}`, string(done.GetResultJson()))
	require.Equal(t, float64(2), testutil.ToFloat64(ex.Metrics.Scrubbed))

	cmd.Tools[0].Kind = "echo_fail"
	evs = ex.Execute(context.Background(), cmd)
	require.Len(t, evs, 1)
	require.Equal(t, "step s: tool echo_fail: server said: Bearer ***", evs[0].GetError().GetMessage())
	for _, ev := range evs {
		b, err := proto.Marshal(ev)
		require.NoError(t, err)
		require.NotContains(t, string(b), "SENTINEL")
	}
}

func TestScrubEventsCoversEveryTextField(t *testing.T) {
	ex := testExecutor()
	sc := ex.NewScrubber()
	sc.AddSecret("s3cr3t-value")
	payload, _ := json.Marshal(map[string]any{"set": map[string]any{"ctx": map[string]any{"k": "s3cr3t-value"}}})
	evs := ScrubEvents(sc, []*eventv1.Event{
		{PayloadJson: payload, ResultJson: []byte(`"s3cr3t-value"`)},
		{ResultRef: &eventv1.ResultRef{ExtractedJson: []byte(`{"a":"s3cr3t-value"}`), SchemaJson: `[{"name":"s3cr3t-value"}]`}},
		{Error: &eventv1.ErrorInfo{Message: "x s3cr3t-value y"}},
	})
	for _, ev := range evs {
		b, err := proto.Marshal(ev)
		require.NoError(t, err)
		require.False(t, strings.Contains(string(b), "s3cr3t"), "%v", ev)
	}
	require.JSONEq(t, `{"set":{"ctx":{"k":"***"}}}`, string(evs[0].GetPayloadJson()))
	require.Equal(t, "x *** y", evs[2].GetError().GetMessage())
}
