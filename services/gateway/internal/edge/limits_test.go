package edge

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
)

// TestOnlyCallsThatWaitOnAnExecutionAreWaits walks every RPC of the public API: exactly
// the wait, the two watches and a start that sets a wait take a slot of the tenant's
// waiting calls; every other call, a start without a wait or with a zero one among them,
// is a call in flight. A new RPC that waits on an execution must be added to waits.
func TestOnlyCallsThatWaitOnAnExecutionAreWaits(t *testing.T) {
	t.Parallel()
	_ = apiv1.File_noetl_api_v1_api_proto // the descriptors are registered by the import
	want := map[string]bool{
		apiv1.ExecutionService_WaitExecution_FullMethodName:      true,
		apiv1.ExecutionService_WatchExecution_FullMethodName:     true,
		apiv1.ExecutionService_WatchExecutionLogs_FullMethodName: true,
	}
	seen := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("noetl.api.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				m := "/" + string(sd.FullName()) + "/" + string(sd.Methods().Get(j).Name())
				seen++
				require.Equal(t, want[m], waits(m, nil), "%s", m)
			}
		}
		return true
	})
	require.Greater(t, seen, len(want))

	start := apiv1.ExecutionService_StartExecution_FullMethodName
	require.True(t, waits(start, &apiv1.StartExecutionRequest{Path: "p", Wait: durationpb.New(time.Minute)}))
	require.False(t, waits(start, &apiv1.StartExecutionRequest{Path: "p"}))
	require.False(t, waits(start, &apiv1.StartExecutionRequest{Path: "p", Wait: durationpb.New(0)}))
}
