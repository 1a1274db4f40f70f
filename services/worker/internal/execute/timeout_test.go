package execute

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// blockTool runs until its context ends, counting its runs.
type blockTool struct{ runs *atomic.Int32 }

func (b blockTool) Run(ctx context.Context, _ *tools.Call) (any, error) {
	b.runs.Add(1)
	<-ctx.Done()
	return nil, &tools.Error{Msg: "block: " + ctx.Err().Error()}
}

// retryOnRetryable is a tool config whose policy retries a retryable failure.
const retryOnRetryable = `{"spec": {"policy": {"rules": [{"when": "{{ output.error.retryable }}", "then": {"do": "retry", "attempts": 3}}, {"else": {"then": {"do": "fail"}}}]}}}`

// An attempt past its step's spec.timeout is retryable by policy: the policy sees a
// retryable deadline error, and its retry is a new attempt (a durable retry, with its own
// timeout), not a run in the attempt whose time is up; the last attempt fails with
// deadline_exceeded.
func TestStepTimeoutIsRetryableByPolicy(t *testing.T) {
	t.Parallel()
	ex := testExecutor()
	var runs atomic.Int32
	ex.Tools["block"] = blockTool{&runs}
	cmd := &eventv1.Command{CommandId: "c1", ExecutionId: "x1", Tenant: "t", Step: "slow", PlaybookPath: "p", Attempt: 1,
		Iteration: &eventv1.Iteration{Index: -1}, Timeout: durationpb.New(100 * time.Millisecond),
		Tools: []*eventv1.ToolCall{{Kind: "block", ConfigJson: []byte(retryOnRetryable)}}}
	evs := ex.Execute(context.Background(), cmd)
	require.Len(t, evs, 1)
	require.Equal(t, domain.EventCommandFailed, evs[0].GetType())
	require.Equal(t, "retry", evs[0].GetError().GetCode(), "%v", evs[0].GetError())
	require.Contains(t, evs[0].GetError().GetMessage(), "step slow: the attempt ran past its timeout of 100ms (spec.timeout)")
	var p domain.FailedPayload
	require.NoError(t, json.Unmarshal(evs[0].GetPayloadJson(), &p))
	require.Equal(t, &domain.RetryRequest{Attempts: 3, DelaySeconds: 0}, p.Retry)
	require.EqualValues(t, 1, runs.Load(), "no run within the expired attempt")

	cmd.Attempt = 3
	evs = ex.Execute(context.Background(), cmd)
	require.Equal(t, "deadline_exceeded", evs[0].GetError().GetCode(), "%v", evs[0].GetError())
	require.True(t, evs[0].GetError().GetRetryable())
	require.EqualValues(t, 2, runs.Load())
}

// A command carries its execution's deadline: DeadlineGrace past it (the execution's own
// timer has ended the execution by then) the command is not started, and a tool still
// running is stopped; both fail with deadline_exceeded.
func TestTheExecutionDeadlineStopsTheCommand(t *testing.T) {
	t.Parallel()
	ex := testExecutor()
	var runs atomic.Int32
	ex.Tools["block"] = blockTool{&runs}
	cmd := &eventv1.Command{CommandId: "c1", ExecutionId: "x1", Tenant: "t", Step: "slow", PlaybookPath: "p", Attempt: 1,
		Deadline: timestamppb.New(time.Now().Add(-DeadlineGrace - time.Second)), Tools: []*eventv1.ToolCall{{Kind: "block", ConfigJson: []byte(`{}`)}}}
	evs := ex.Execute(context.Background(), cmd)
	require.Equal(t, "deadline_exceeded", evs[0].GetError().GetCode())
	require.Contains(t, evs[0].GetError().GetMessage(), "step slow: the execution's deadline (")
	require.Contains(t, evs[0].GetError().GetMessage(), ") passed before the command started")
	require.Zero(t, runs.Load(), "not started")

	cmd.Deadline = timestamppb.New(time.Now().Add(-DeadlineGrace + 200*time.Millisecond))
	evs = ex.Execute(context.Background(), cmd)
	require.Equal(t, "deadline_exceeded", evs[0].GetError().GetCode(), "%v", evs[0].GetError())
	require.Contains(t, evs[0].GetError().GetMessage(), "passed and the tool was stopped")
	require.False(t, evs[0].GetError().GetRetryable(), "the execution is over")
	require.EqualValues(t, 1, runs.Load())
}
