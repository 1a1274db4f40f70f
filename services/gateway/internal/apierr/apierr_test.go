package apierr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
)

func details(t *testing.T, err error) (*errdetails.ErrorInfo, *errdetails.BadRequest) {
	t.Helper()
	var info *errdetails.ErrorInfo
	var bad *errdetails.BadRequest
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			require.Nil(t, info, "one ErrorInfo")
			info = d
		case *errdetails.BadRequest:
			require.Nil(t, bad, "one BadRequest")
			bad = d
		}
	}
	return info, bad
}

func TestEdgeMasksInternalErrorsBehindACorrelationID(t *testing.T) {
	t.Parallel()
	for _, in := range []error{
		status.Error(codes.Internal, "pq: password authentication failed for user noetl"),
		status.Error(codes.Unknown, "pq: password authentication failed for user noetl"),
		errors.New("pq: password authentication failed for user noetl"),
	} {
		var logs bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&logs, nil))
		err := Edge(log, "/noetl.api.v1.CatalogService/GetPlaybook", nil, in)
		st := status.Convert(err)
		require.Equal(t, codes.Internal, st.Code())
		id := CorrelationID(st)
		require.Len(t, id, 16)
		require.Equal(t, fmt.Sprintf("internal error (correlation id %s)", id), st.Message())
		require.NotContains(t, st.String(), "password")
		info, _ := details(t, err)
		require.Equal(t, Domain, info.GetDomain())
		require.Equal(t, ReasonInternal, info.GetReason())
		// The original is logged with the id.
		require.Contains(t, logs.String(), `"correlation_id":"`+id+`"`)
		require.Contains(t, logs.String(), "password authentication failed")
		require.Contains(t, logs.String(), "GetPlaybook")

		again := Edge(log, "m", nil, err)
		require.Equal(t, id, CorrelationID(status.Convert(again)), "an error masked once is not masked again")
	}
	a := CorrelationID(status.Convert(Edge(nil, "m", nil, errors.New("x"))))
	b := CorrelationID(status.Convert(Edge(nil, "m", nil, errors.New("x"))))
	require.NotEqual(t, a, b)
}

func TestEdgeAddsErrorInfoAndBadRequest(t *testing.T) {
	t.Parallel()
	req := &apiv1.WaitExecutionRequest{}
	cases := []struct {
		name   string
		err    error
		req    proto.Message
		code   codes.Code
		reason string
		field  string
		desc   string
	}{
		{"field of the request", status.Error(codes.InvalidArgument, "execution_id: required"), req, codes.InvalidArgument, "INVALID_ARGUMENT", "execution_id", "required"},
		{"json name of a field", status.Error(codes.InvalidArgument, "executionId: required"), req, codes.InvalidArgument, "INVALID_ARGUMENT", "executionId", "required"},
		{"nested path", status.Error(codes.InvalidArgument, "timeout.seconds: out of range"), req, codes.InvalidArgument, "INVALID_ARGUMENT", "timeout.seconds", "out of range"},
		{"not a field", status.Error(codes.InvalidArgument, "proto: syntax error (line 1:2)"), req, codes.InvalidArgument, "INVALID_ARGUMENT", "", ""},
		{"no request", status.Error(codes.InvalidArgument, "execution_id: required"), nil, codes.InvalidArgument, "INVALID_ARGUMENT", "", ""},
		{"not found", status.Error(codes.NotFound, "execution x not found"), req, codes.NotFound, "NOT_FOUND", "", ""},
		{"cancelled", context.Canceled, req, codes.Canceled, "CANCELED", "", ""},
		{"deadline", fmt.Errorf("wait: %w", context.DeadlineExceeded), req, codes.DeadlineExceeded, "DEADLINE_EXCEEDED", "", ""},
		{"reason kept", New(codes.ResourceExhausted, ReasonRateLimited, "slow down", nil, RetryInfo(time.Second)), req, codes.ResourceExhausted, ReasonRateLimited, "", ""},
		{"violation kept", FieldViolation(ReasonInvalidPlaybook, "content", "line 3: bad", "invalid playbook: line 3: bad"), req, codes.InvalidArgument, ReasonInvalidPlaybook, "content", "line 3: bad"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Edge(nil, "m", tc.req, tc.err)
			require.Equal(t, tc.code, status.Code(err))
			info, bad := details(t, err)
			require.Equal(t, Domain, info.GetDomain())
			require.Equal(t, tc.reason, info.GetReason())
			if tc.field == "" {
				require.Nil(t, bad)
				return
			}
			require.Len(t, bad.GetFieldViolations(), 1)
			require.Equal(t, tc.field, bad.GetFieldViolations()[0].GetField())
			require.Equal(t, tc.desc, bad.GetFieldViolations()[0].GetDescription())
			require.Equal(t, status.Convert(err).Proto().String(), status.Convert(Edge(nil, "m", tc.req, err)).Proto().String(), "idempotent")
		})
	}
	require.NoError(t, Edge(nil, "m", nil, nil))
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	d, ok := RetryAfter(status.Convert(New(codes.ResourceExhausted, ReasonRateLimited, "x", nil, RetryInfo(1500*time.Millisecond))))
	require.True(t, ok)
	require.Equal(t, 1500*time.Millisecond, d)
	_, ok = RetryAfter(status.New(codes.ResourceExhausted, "x"))
	require.False(t, ok)
	for in, want := range map[time.Duration]string{0: "1", time.Millisecond: "1", time.Second: "1", 1001 * time.Millisecond: "2", time.Minute: "60"} {
		require.Equal(t, want, RetryAfterSeconds(in), "%s", in)
	}
}

// An error whose message names the mesh's internals (the message of a start the engine
// could not publish named its NATS subject) is masked whatever its code: the caller sees
// the code, a public text and a correlation id; the log has the original.
func TestEdgeMasksMessagesNamingInternals(t *testing.T) {
	t.Parallel()
	for _, in := range []error{
		status.Error(codes.InvalidArgument, "workload: too large (publish noetl.events.3 (eabc): 5000123 bytes: message exceeds 256 KiB); pass large inputs by reference"),
		status.Error(codes.Unavailable, "publish start: nats: timeout"),
		status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.7:50061: connect: connection refused"`),
		status.Error(codes.FailedPrecondition, "stream NOETL_EVENTS not found"),
		status.Error(codes.Unimplemented, "unknown service noetl.orchestrator.v1.OrchestratorService"),
	} {
		var logs bytes.Buffer
		err := Edge(slog.New(slog.NewJSONHandler(&logs, nil)), "/noetl.api.v1.ExecutionService/StartExecution", nil, in)
		st := status.Convert(err)
		require.Equal(t, status.Code(in), st.Code(), "the code is kept")
		info, _ := details(t, err)
		id := info.GetMetadata()[MetaCorrelationID]
		require.Len(t, id, 16)
		require.Regexp(t, `^[a-z ;]+ \(correlation id [0-9a-f]{16}\)$`, st.Message())
		for _, s := range []string{"noetl.events", "nats", "NOETL_", "10.0.0.7", "256 KiB", "orchestrator"} {
			require.NotContains(t, st.String(), s)
		}
		require.Contains(t, logs.String(), id)
		require.Contains(t, logs.String(), status.Convert(in).Message()[:10], "the original is logged")
		require.Equal(t, st.Proto().String(), status.Convert(Edge(nil, "m", nil, err)).Proto().String(), "idempotent")
	}
	d, ok := RetryAfter(status.Convert(Edge(nil, "m", nil, New(codes.Unavailable, "X", "publish start: nats: timeout", nil, RetryInfo(time.Second)))))
	require.True(t, ok, "a RetryInfo is kept")
	require.Equal(t, time.Second, d)
	require.Equal(t, "playbook \"tests/x\" (version 0) not found", status.Convert(Edge(nil, "m", nil, status.Error(codes.NotFound, "playbook \"tests/x\" (version 0) not found"))).Message(), "public messages pass")
}

func TestTooLargeReasons(t *testing.T) {
	t.Parallel()
	for _, r := range []string{ReasonBodyTooLarge, ReasonMessageTooLarge, ReasonWorkloadTooLarge, ReasonContentTooLarge} {
		require.True(t, TooLarge(r), r)
		require.Equal(t, r, Reason(status.Convert(New(codes.ResourceExhausted, r, "x", nil))))
	}
	require.False(t, TooLarge(ReasonRateLimited))
	require.False(t, TooLarge(ReasonAuthThrottled))
	require.Empty(t, Reason(status.New(codes.ResourceExhausted, "x")))
}
