package execute

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// TestPipelineItemSetFlowsToLaterItems: a pipeline item's set: is rendered against its
// result; the following items read each value by its bare name (in their config and
// input), and the step's command.completed carries it to ctx for later steps.
func TestPipelineItemSetFlowsToLaterItems(t *testing.T) {
	ex := testExecutor()
	ex.Tools["noop"] = tools.Noop{}
	cmd := &eventv1.Command{CommandId: "c1", ExecutionId: "x1", Tenant: "t", Step: "s", PlaybookPath: "p", Tools: []*eventv1.ToolCall{
		{Kind: "noop", Label: "a", ConfigJson: []byte(`{"result": {"n": 2}, "set": {"doubled": "{{ output.n * 2 }}", "ctx.label": "{{ result.n + 1 }}"}}`)},
		{Kind: "noop", Label: "b", ConfigJson: []byte(`{"result": {"seen": "{{ doubled }}", "label": "{{ label }}"}}`)},
	}}
	evs := ex.Execute(context.Background(), cmd)
	require.Len(t, evs, 1)
	done := evs[0]
	require.Nil(t, done.GetError(), "%v", done.GetError())
	require.JSONEq(t, `{"seen": 4, "label": 3, "a": {"n": 2}, "b": {"seen": 4, "label": 3}}`, string(done.GetResultJson()))
	require.JSONEq(t, `{"set": {"ctx": {"doubled": 4, "label": 3}}}`, string(done.GetPayloadJson()))
}

// TestAttemptCountsDurableRetries: _attempt is the command's attempt (a retry after a
// durable timer is a new command, attempt 2 and on), not 1 on every command.
func TestAttemptCountsDurableRetries(t *testing.T) {
	ex := testExecutor()
	ex.Tools["noop"] = tools.Noop{}
	cmd := &eventv1.Command{CommandId: "c3", ExecutionId: "x1", Tenant: "t", Step: "s", PlaybookPath: "p", Attempt: 3,
		Tools: []*eventv1.ToolCall{{Kind: "noop", ConfigJson: []byte(`{"result": {"attempt": "{{ _attempt }}"}}`)}}}
	evs := ex.Execute(context.Background(), cmd)
	require.Len(t, evs, 1)
	require.JSONEq(t, `{"attempt": 3}`, string(evs[0].GetResultJson()))
}

// failing is a tool that always fails.
type failing struct{}

func (failing) Run(context.Context, *tools.Call) (any, error) {
	return nil, &tools.Error{Msg: "boom"}
}

// TestRetriesOutCountEveryRun: a step whose retry policy runs out names how many runs it
// had, the commands of a durable retry (the last command is attempt 3 of 3) as well as the
// runs within one command (a pipeline's item retried without a delay).
func TestRetriesOutCountEveryRun(t *testing.T) {
	ex := testExecutor()
	ex.Tools["fails"] = failing{}
	ex.Tools["noop"] = tools.Noop{}
	retry := func(delay int) []byte {
		return fmt.Appendf(nil, `{"spec": {"policy": {"rules": [{"when": "{{ output.status == 'error' }}", "then": {"do": "retry", "attempts": 3, "delay": %d}}]}}}`, delay)
	}
	durable := &eventv1.Command{CommandId: "c3", ExecutionId: "x1", Tenant: "t", Step: "s", PlaybookPath: "p", Attempt: 3,
		Iteration: &eventv1.Iteration{Index: -1}, Tools: []*eventv1.ToolCall{{Kind: "fails", ConfigJson: retry(1)}}}
	evs := ex.Execute(context.Background(), durable)
	require.Len(t, evs, 1)
	require.Contains(t, evs[0].GetError().GetMessage(), "failed after 3 attempts: boom")

	inCommand := &eventv1.Command{CommandId: "c4", ExecutionId: "x1", Tenant: "t", Step: "s", PlaybookPath: "p", Attempt: 1,
		Iteration: &eventv1.Iteration{Index: -1}, Tools: []*eventv1.ToolCall{{Kind: "noop", ConfigJson: []byte(`{}`)}, {Kind: "fails", ConfigJson: retry(0)}}}
	evs = ex.Execute(context.Background(), inCommand)
	require.Len(t, evs, 1)
	require.Contains(t, evs[0].GetError().GetMessage(), "failed after 3 attempts: boom")
}
