package execute

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// flakyStore is a resultstore whose first calls fail with failWith (nil: succeed) after
// reading what the worker sent; the later ones store the payload.
type flakyStore struct {
	rsv1.UnimplementedResultStoreServiceServer
	failWith error
	fails    int

	mu     sync.Mutex
	calls  int
	stored []byte
}

func (f *flakyStore) fail() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.failWith != nil && (f.fails < 0 || f.calls <= f.fails) {
		return f.failWith
	}
	return nil
}

func (f *flakyStore) PutResult(stream grpc.ClientStreamingServer[rsv1.PutResultRequest, rsv1.PutResultResponse]) error {
	var body []byte
	var h *rsv1.PutResultHeader
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if m.GetHeader() != nil {
			h = m.GetHeader()
		}
		body = append(body, m.GetChunk()...)
	}
	if err := f.fail(); err != nil {
		return err
	}
	f.mu.Lock()
	f.stored = body
	f.mu.Unlock()
	return stream.SendAndClose(&rsv1.PutResultResponse{Ref: &eventv1.ResultRef{
		Uri: fmt.Sprintf("noetl://results/%s/%s/%s", h.GetTenant(), h.GetExecutionId(), h.GetResultId()), Size: int64(len(body)), ContentType: h.GetContentType()}})
}

func (f *flakyStore) GetResult(req *rsv1.GetResultRequest, stream grpc.ServerStreamingServer[rsv1.GetResultResponse]) error {
	if err := f.fail(); err != nil {
		return err
	}
	body := []byte(`{"k":"v"}`)
	return stream.Send(&rsv1.GetResultResponse{Ref: &eventv1.ResultRef{Uri: req.GetUri(), Size: int64(len(body)), ContentType: "application/json"}, Chunk: body})
}

func (f *flakyStore) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// bigTool returns a result over any small inline budget.
type bigTool struct{}

func (bigTool) Run(context.Context, *tools.Call) (any, error) {
	return map[string]any{"blob": strings.Repeat("x", 10000)}, nil
}

// storeWorker is a worker whose resultstore is f, served on 127.0.0.1, with an inline
// budget of 1 KiB.
func storeExecutor(t *testing.T, f *flakyStore, retry time.Duration) *Executor {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	rsv1.RegisterResultStoreServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ex := testExecutor()
	ex.Results.InlineMaxBytes = 1 << 10
	ex.Results.Retry = retry
	ex.Tools["big"] = bigTool{}
	ex.Results.Results = rsv1.NewResultStoreServiceClient(conn)
	ex.Results.Retries = prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_worker_resultstore_retries_total"})
	return ex
}

func bigCommand() *eventv1.Command {
	return &eventv1.Command{CommandId: "c1", ExecutionId: "x1", Tenant: "t", Step: "big", PlaybookPath: "p",
		Tools: []*eventv1.ToolCall{{Kind: "big", ConfigJson: []byte(`{}`)}}}
}

// A resultstore that answers Unavailable (it is restarting) is tried again with backoff
// until it stores the result: the step completes with the reference. An answer that is
// not Unavailable fails the step at once, and so does an Unavailable store once the retry
// bound (or the command's deadline) has passed.
func TestStoreResultRetriesAnUnavailableResultstore(t *testing.T) {
	t.Parallel()
	t.Run("unavailable, then stored", func(t *testing.T) {
		t.Parallel()
		f := &flakyStore{failWith: status.Error(codes.Unavailable, "restarting"), fails: 3}
		ex := storeExecutor(t, f, time.Minute)
		evs := ex.Execute(context.Background(), bigCommand())
		require.Len(t, evs, 1)
		require.Nil(t, evs[0].GetError(), "%v", evs[0].GetError())
		require.Equal(t, domain.EventCommandCompleted, evs[0].GetType())
		require.Equal(t, "noetl://results/t/x1/c1", evs[0].GetResultRef().GetUri())
		require.Equal(t, 4, f.callCount(), "three refusals, then stored")
		require.Len(t, f.stored, 10000+len(`{"blob":""}`), "the whole result, uploaded again")
		require.Equal(t, float64(3), testutil.ToFloat64(ex.Results.Retries))
	})
	t.Run("permanent error", func(t *testing.T) {
		t.Parallel()
		f := &flakyStore{failWith: status.Error(codes.InvalidArgument, "header: tenant is required"), fails: -1}
		ex := storeExecutor(t, f, time.Minute)
		evs := ex.Execute(context.Background(), bigCommand())
		require.Equal(t, domain.EventCommandFailed, evs[0].GetType())
		require.Equal(t, "result_store_error", evs[0].GetError().GetCode())
		require.Contains(t, evs[0].GetError().GetMessage(), "store the result: rpc error: code = InvalidArgument")
		require.Equal(t, 1, f.callCount(), "an answer is not retried")
	})
	t.Run("unavailable past the bound", func(t *testing.T) {
		t.Parallel()
		f := &flakyStore{failWith: status.Error(codes.Unavailable, "gone"), fails: -1}
		ex := storeExecutor(t, f, 500*time.Millisecond)
		evs := ex.Execute(context.Background(), bigCommand())
		require.Equal(t, domain.EventCommandFailed, evs[0].GetType())
		require.Equal(t, "result_store_error", evs[0].GetError().GetCode())
		require.True(t, evs[0].GetError().GetRetryable())
		require.Contains(t, evs[0].GetError().GetMessage(), "code = Unavailable desc = gone")
		require.Greater(t, f.callCount(), 1, "retried within the bound")
	})
	t.Run("past the command's deadline", func(t *testing.T) {
		t.Parallel()
		f := &flakyStore{failWith: status.Error(codes.Unavailable, "gone"), fails: -1}
		ex := storeExecutor(t, f, time.Minute)
		cmd := bigCommand()
		cmd.Deadline = timestamppb.New(time.Now().Add(-time.Second))
		evs := ex.Execute(context.Background(), cmd)
		require.Equal(t, domain.EventCommandFailed, evs[0].GetType())
		require.Equal(t, 1, f.callCount(), "no retry past the deadline")
	})
	t.Run("loading a result", func(t *testing.T) {
		t.Parallel()
		f := &flakyStore{failWith: status.Error(codes.Unavailable, "restarting"), fails: 2}
		ex := storeExecutor(t, f, time.Minute)
		body, err := ex.Results.Fetch(context.Background(), "t", "noetl://results/t/x0/c0")
		require.NoError(t, err)
		require.JSONEq(t, `{"k":"v"}`, string(body))
		require.Equal(t, 3, f.callCount())
	})
}
