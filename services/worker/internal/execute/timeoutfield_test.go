package execute

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// A cursor body bounded by its frame's max_seconds is stopped at it like a step at its
// spec.timeout, and the error names the field the bound came from.
func TestAnAttemptStoppedAtItsTimeoutNamesTheField(t *testing.T) {
	t.Parallel()
	ex := testExecutor()
	var runs atomic.Int32
	ex.Tools["block"] = blockTool{&runs}
	cmd := &eventv1.Command{CommandId: "c1", ExecutionId: "x1", Tenant: "t", Step: "drain", PlaybookPath: "p", Attempt: 1,
		Iteration: &eventv1.Iteration{Index: 1}, Timeout: durationpb.New(50 * time.Millisecond), TimeoutField: "loop.spec.frame.max_seconds",
		Tools: []*eventv1.ToolCall{{Kind: "block", ConfigJson: []byte(`{}`)}}}
	evs := ex.Execute(context.Background(), cmd)
	require.Len(t, evs, 1)
	require.Equal(t, "deadline_exceeded", evs[0].GetError().GetCode(), "%v", evs[0].GetError())
	require.True(t, evs[0].GetError().GetRetryable(), "the next attempt may finish in time")
	require.Equal(t, "step drain: the attempt ran past its timeout of 50ms (loop.spec.frame.max_seconds) and was stopped", evs[0].GetError().GetMessage())
	require.EqualValues(t, 1, runs.Load())
}
