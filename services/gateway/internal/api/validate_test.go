package api

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
)

func requireInvalid(t *testing.T, err error, field string) {
	t.Helper()
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.True(t, strings.HasPrefix(status.Convert(err).Message(), field+": "), "%v names %s", err, field)
}

func TestIDsAreCheckedByTheirForm(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"01930000-0000-7000-8000-000000000000", "0193ABCD-ef01-7000-8000-000000000000"} {
		require.NoError(t, validExecutionID("execution_id", ok))
	}
	for _, bad := range []string{"", "\x00", "x1", "01930000-0000-7000-8000-00000000000g", "01930000_0000-7000-8000-000000000000", "01930000-0000-7000-8000-0000000000000", "../../../etc/passwd"} {
		requireInvalid(t, validExecutionID("execution_id", bad), "execution_id")
	}
	for _, ok := range []string{"tests/quick", "a", "_x/y.z-1", "system/a/b", strings.Repeat("a", 256)} {
		require.NoError(t, validPlaybookPath("path", ok), ok)
	}
	for _, bad := range []string{"", "/a", "a/", "a//b", "../a", "a/../b", "a/./b", ".a", "a b", "a\x00b", "a%00", strings.Repeat("a", 257)} {
		requireInvalid(t, validPlaybookPath("path", bad), "path")
	}
	for _, ok := range []string{"c0000000000000000000000000", "noetl://results/acme/01930000-0000-7000-8000-000000000000/c00-context", "e1-items"} {
		require.NoError(t, validResultID("result_id", ok), ok)
	}
	for _, bad := range []string{"", " ", "\x00", "a b", "a%00", "a\nb", strings.Repeat("r", 513)} {
		requireInvalid(t, validResultID("result_id", bad), "result_id")
	}
	require.NoError(t, validKeyID("id", "abcdefghijklm"))
	for _, bad := range []string{"", "a-b", "a\x00", strings.Repeat("k", 65)} {
		requireInvalid(t, validKeyID("id", bad), "id")
	}
}

func TestCheckStringsRefusesNULOutsideJSONValues(t *testing.T) {
	t.Parallel()
	require.NoError(t, CheckStrings(nil))
	w, err := structpb.NewStruct(map[string]any{"text": "a\x00b", "nested": map[string]any{"k\x00": []any{"\x00"}}})
	require.NoError(t, err)
	require.NoError(t, CheckStrings(&apiv1.StartExecutionRequest{Path: "tests/x", Workload: w}), "a workload's JSON is data")
	requireInvalid(t, CheckStrings(&apiv1.StartExecutionRequest{Path: "tests/x", IdempotencyKey: "k\x00"}), "idempotency_key")
	requireInvalid(t, CheckStrings(&apiv1.CreateApiKeyRequest{Roles: []string{"viewer", "ad\x00min"}}), "roles[1]")
	requireInvalid(t, CheckStrings(&apiv1.GetResultRequest{ResultId: "r", Pointer: "/a\x00"}), "pointer")
	requireInvalid(t, CheckStrings(&apiv1.StartExecutionRequest{Path: "tests/x", Labels: map[string]string{"team": "a\x00"}}), "labels[team]")
	requireInvalid(t, CheckStrings(&apiv1.StartExecutionRequest{Path: "tests/x", Labels: map[string]string{"te\x00am": "a"}}), "labels")
	requireInvalid(t, CheckStrings(&apiv1.CreateScheduleRequest{Schedule: &apiv1.Schedule{Name: "nightly", Path: "p\x00"}}), "schedule.path")
	require.NoError(t, CheckStrings(&apiv1.CreateScheduleRequest{Schedule: &apiv1.Schedule{Name: "nightly", Path: "p", Workload: w}}), "nested JSON is data too")
}
