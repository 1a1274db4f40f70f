package execute

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/natsx"
)

func TestLongErrorMessagesAreClipped(t *testing.T) {
	require.Equal(t, "short", clip("short"))
	long := strings.Repeat("é", 100000) + "the end"
	c := clip(long)
	require.LessOrEqual(t, len(c), maxErrorMessage+64)
	require.True(t, utf8.ValidString(c))
	require.True(t, strings.HasSuffix(c, "the end"), "the tail, where tracebacks end, is kept")
	require.Contains(t, c, "bytes elided")
}

func TestAnOutcomeTooLargeToPublishFailsTheCommand(t *testing.T) {
	began := timestamppb.Now()
	done := &eventv1.Event{EventId: "e2", ExecutionId: "x", Tenant: "t", Type: domain.EventCommandCompleted, Step: "s", CommandId: "c1", Attempt: 2,
		StartTime: began, PayloadJson: []byte(strings.Repeat("x", natsx.MaxMessageBytes+1))}
	evs := FailTooLarge([]*eventv1.Event{done}, natsx.ErrMessageTooLarge)
	require.Len(t, evs, 1, "one outcome event replaces the one that did not fit")
	require.Equal(t, domain.EventCommandFailed, evs[0].GetType())
	require.Equal(t, domain.EventID("c1", domain.EventCommandFailed), evs[0].GetEventId())
	require.EqualValues(t, 2, evs[0].GetAttempt())
	require.Equal(t, "x", evs[0].GetExecutionId())
	require.True(t, proto.Equal(began, evs[0].GetStartTime()))
	require.Empty(t, evs[0].GetPayloadJson())
	require.Equal(t, "outcome_too_large", evs[0].GetError().GetCode())
	require.Contains(t, evs[0].GetError().GetMessage(), "step s")
	require.False(t, evs[0].GetError().GetRetryable())
	for _, e := range evs {
		b, err := proto.Marshal(e)
		require.NoError(t, err)
		require.Less(t, len(b), natsx.MaxMessageBytes)
	}
}
