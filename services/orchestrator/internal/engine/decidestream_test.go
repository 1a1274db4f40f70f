package engine

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/platform/auth"
)

// decisionClient serves DecisionService over an engine that is not running (every
// execution is answered undecided, "not_running") behind the internal authentication, and
// returns a client signed as the service name.
func decisionClient(t *testing.T, as string) orchv1.DecisionServiceClient {
	t.Helper()
	trust, err := auth.NewTrust("decide-stream-test-secret-0123456789")
	require.NoError(t, err)
	e := New(Config{}, slog.New(slog.DiscardHandler), nil, nil, nil, prometheus.NewRegistry())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(auth.ServerOptions(trust)...)
	orchv1.RegisterDecisionServiceServer(srv, &DecisionServer{Engine: e})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(trust.Service(as)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return orchv1.NewDecisionServiceClient(conn)
}

// Calls on one DecideStream are each answered once, with their own call id and an answer
// per execution of their request, whatever order they are sent and answered in.
func TestDecideStreamAnswersEveryCallByItsID(t *testing.T) {
	client := decisionClient(t, "materializer")
	ctx := context.Background()
	stream, err := client.DecideStream(ctx)
	require.NoError(t, err)
	const calls = 50
	for i := range calls {
		req := &orchv1.DecideCommittingRequest{}
		for k := 0; k <= i%3; k++ {
			req.Executions = append(req.Executions, &orchv1.CommittingExecution{ExecutionId: fmt.Sprintf("x%d-%d", i, k)})
		}
		require.NoError(t, stream.Send(&orchv1.DecideStreamRequest{CallId: uint64(100 + i), Timeout: durationpb.New(5e9), Request: req}))
	}
	seen := map[uint64]bool{}
	for range calls {
		resp, err := stream.Recv()
		require.NoError(t, err)
		id := resp.GetCallId()
		require.False(t, seen[id], "call %d answered twice", id)
		seen[id] = true
		i := int(id) - 100
		require.True(t, i >= 0 && i < calls, "unknown call id %d", id)
		ds := resp.GetResponse().GetDecisions()
		require.Len(t, ds, i%3+1)
		for k, d := range ds {
			require.Equal(t, fmt.Sprintf("x%d-%d", i, k), d.GetExecutionId())
			require.False(t, d.GetDecided())
			require.Equal(t, "not_running", d.GetReason())
		}
	}
	require.NoError(t, stream.CloseSend())
	_, err = stream.Recv()
	require.Error(t, err, "the server ends the stream once the calls are answered and the client closed its side")
}

// Only the materializer may open a DecideStream, as only it may call DecideCommitting.
func TestDecideStreamIsTheMaterializersOnly(t *testing.T) {
	client := decisionClient(t, "worker")
	stream, err := client.DecideStream(context.Background())
	require.NoError(t, err)
	_, err = stream.Recv()
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	_, err = client.DecideCommitting(context.Background(), &orchv1.DecideCommittingRequest{})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
}
