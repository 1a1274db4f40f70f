package decisionlink

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
)

// keeper decides every execution with one event and keeps what it was asked and what it
// answered, as the engine keeps what it speculated.
type keeper struct {
	asked    []*orchv1.DecideCommittingRequest
	answered []*orchv1.DecideCommittingResponse
}

func (k *keeper) AskCommitting(_ context.Context, req *orchv1.DecideCommittingRequest) func() *orchv1.DecideCommittingResponse {
	resp := &orchv1.DecideCommittingResponse{}
	for _, x := range req.GetExecutions() {
		resp.Decisions = append(resp.Decisions, &orchv1.Decision{ExecutionId: x.GetExecutionId(), Decided: true,
			Events: []*eventv1.Event{{ExecutionId: x.GetExecutionId(), EventId: "next"}}})
	}
	k.asked, k.answered = append(k.asked, req), append(k.answered, resp)
	return func() *orchv1.DecideCommittingResponse { return resp }
}

func request() *orchv1.DecideCommittingRequest {
	return &orchv1.DecideCommittingRequest{Executions: []*orchv1.CommittingExecution{{ExecutionId: "x",
		Events: []*eventv1.Event{{ExecutionId: "x", EventId: "done"}}}}}
}

// A link answers only while served, and by the served decider's latest Serve.
func TestALinkAnswersOnlyWhileServed(t *testing.T) {
	ctx := context.Background()
	var nilLink *Link
	_, err := nilLink.Ask(ctx, request())()
	require.ErrorIs(t, err, ErrNotServed)
	require.False(t, nilLink.Served())

	l := &Link{}
	_, err = l.Ask(ctx, request())()
	require.ErrorIs(t, err, ErrNotServed)

	first, second := &keeper{}, &keeper{}
	stopFirst := l.Serve(first)
	require.True(t, l.Served())
	resp, err := l.Ask(ctx, request())()
	require.NoError(t, err)
	require.True(t, resp.GetDecisions()[0].GetDecided())
	require.Len(t, first.asked, 1)

	stopSecond := l.Serve(second)
	stopFirst() // an earlier server's stop leaves the later one serving
	_, err = l.Ask(ctx, request())()
	require.NoError(t, err)
	require.Len(t, second.asked, 1)
	require.Len(t, first.asked, 1)

	stopSecond()
	require.False(t, l.Served())
	_, err = l.Ask(ctx, request())()
	require.ErrorIs(t, err, ErrNotServed)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	l.Serve(first)
	_, err = l.Ask(cancelled, request())()
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, first.asked, 1, "a call already ended is not decided")
}

// A link hands the request and the answer over as they are, with no copy between: the
// decider's request is the caller's, and the caller's answer the decider's.
func TestALinkHandsMessagesOverAsTheyAre(t *testing.T) {
	k := &keeper{}
	l := &Link{}
	l.Serve(k)
	req := request()
	resp, err := l.Ask(context.Background(), req)()
	require.NoError(t, err)
	require.Same(t, req, k.asked[0], "the decider decides on the request it was given")
	require.Same(t, k.answered[0], resp, "the caller gets the answer the decider made")
}
