package worker

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

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
	started := &eventv1.Event{EventId: "e1", ExecutionId: "x", Tenant: "t", Type: domain.EventCommandStarted, Step: "s", CommandId: "c1", Attempt: 2}
	done := &eventv1.Event{EventId: "e2", Type: domain.EventCallDone, CommandId: "c1", PayloadJson: []byte(strings.Repeat("x", natsx.MaxMessageBytes+1))}
	evs := failTooLarge([]*eventv1.Event{started, done, {Type: domain.EventCommandCompleted}}, natsx.ErrMessageTooLarge)
	require.Len(t, evs, 3)
	require.Same(t, started, evs[0])
	require.Equal(t, domain.EventCallError, evs[1].GetType())
	require.Equal(t, domain.EventCommandFailed, evs[2].GetType())
	require.Equal(t, domain.EventID("c1", domain.EventCommandFailed), evs[2].GetEventId())
	require.EqualValues(t, 2, evs[2].GetAttempt())
	require.Equal(t, "outcome_too_large", evs[2].GetError().GetCode())
	require.Contains(t, evs[2].GetError().GetMessage(), "step s")
	require.False(t, evs[2].GetError().GetRetryable())
	for _, e := range evs {
		b, err := proto.Marshal(e)
		require.NoError(t, err)
		require.Less(t, len(b), natsx.MaxMessageBytes)
	}
}
