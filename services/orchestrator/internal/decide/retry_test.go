package decide

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
)

func TestDurableRetryWaitsOnATimerThenRunsTheNextAttempt(t *testing.T) {
	s := newSim(t, `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: r, path: t/p}
workflow:
  - step: start
    tool: {kind: noop}
`, `{}`)
	cmds := s.decide()
	require.Len(t, cmds, 1)
	first := cmds[0]
	failedAt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	mk := func(typ string) *eventv1.Event {
		return &eventv1.Event{EventId: domain.EventID(first.GetCommandId(), typ), ExecutionId: "x", Type: typ, Step: "start", CommandId: first.GetCommandId(), Attempt: 1}
	}
	failed := mk(domain.EventCommandFailed)
	failed.PayloadJson, _ = json.Marshal(domain.FailedPayload{Retry: &domain.RetryRequest{Attempts: 3, DelaySeconds: 2.5}})
	failed.CommitTime = timestamppb.New(failedAt)
	failed.Error = &eventv1.ErrorInfo{Message: "boom", Retryable: true}
	s.apply(mk(domain.EventCommandStarted), failed)
	require.Equal(t, eventv1.StepStatus_STEP_STATUS_RUNNING, s.st.GetSteps()["start"].GetStatus(), "a retried step is still running")

	evs, err := Decide(s.c, s.st)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, domain.EventTimerScheduled, evs[0].GetType())
	var tp domain.TimerPayload
	require.NoError(t, json.Unmarshal(evs[0].GetPayloadJson(), &tp))
	require.Equal(t, failedAt.Add(2500*time.Millisecond), tp.DueAt, "due time comes from the failure's commit time")
	s.apply(evs...)
	// Until the timer fires, nothing happens.
	none, err := Decide(s.c, s.st)
	require.NoError(t, err)
	require.Empty(t, none)

	s.apply(&eventv1.Event{EventId: domain.EventID(tp.TimerID, domain.EventTimerFired), ExecutionId: "x", Type: domain.EventTimerFired, Step: "start", PayloadJson: evs[0].GetPayloadJson()})
	cmds = s.decide()
	require.Len(t, cmds, 1)
	require.Equal(t, int32(2), cmds[0].GetAttempt())
	require.Equal(t, domain.CommandID("x", "start", 1, -1, 2), cmds[0].GetCommandId())
	require.NotEqual(t, first.GetCommandId(), cmds[0].GetCommandId())
	s.complete(cmds[0])
	runAll(t, s, func(string) string { return `{"ok":true}` })
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, s.st.GetStatus())
}
