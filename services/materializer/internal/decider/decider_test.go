package decider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/testkit"
)

// orchestrator is a DecisionService that answers each execution with its id as the
// reason. Its streams answer the calls they receive in reverse order of arrival, in
// groups of `group` (so answers cross), and end with failWith after failAfter calls
// when set. Without streams it has only the unary method, as an older release.
type orchestrator struct {
	orchv1.UnimplementedDecisionServiceServer
	group     int
	failAfter int
	failWith  error
	streams   atomic.Int32
	unary     atomic.Int32
	mu        sync.Mutex
	timeouts  []time.Duration
}

func answer(req *orchv1.DecideCommittingRequest) *orchv1.DecideCommittingResponse {
	resp := &orchv1.DecideCommittingResponse{}
	for _, x := range req.GetExecutions() {
		resp.Decisions = append(resp.Decisions, &orchv1.Decision{ExecutionId: x.GetExecutionId(), Reason: x.GetExecutionId()})
	}
	return resp
}

func (o *orchestrator) DecideCommitting(_ context.Context, req *orchv1.DecideCommittingRequest) (*orchv1.DecideCommittingResponse, error) {
	o.unary.Add(1)
	return answer(req), nil
}

type streamingOrchestrator struct{ *orchestrator }

func (o streamingOrchestrator) DecideStream(ss orchv1.DecisionService_DecideStreamServer) error {
	o.streams.Add(1)
	var held []*orchv1.DecideStreamRequest
	n := 0
	for {
		call, err := ss.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		o.mu.Lock()
		o.timeouts = append(o.timeouts, call.GetTimeout().AsDuration())
		o.mu.Unlock()
		n++
		if o.failWith != nil && n > o.failAfter {
			return o.failWith
		}
		held = append(held, call)
		if len(held) < o.group {
			continue
		}
		for i := len(held) - 1; i >= 0; i-- {
			if err := ss.Send(&orchv1.DecideStreamResponse{CallId: held[i].GetCallId(), Response: answer(held[i].GetRequest())}); err != nil {
				return err
			}
		}
		held = held[:0]
	}
}

func serve(t *testing.T, srv orchv1.DecisionServiceServer) orchv1.DecisionServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := grpc.NewServer()
	orchv1.RegisterDecisionServiceServer(s, srv)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return orchv1.NewDecisionServiceClient(conn)
}

func ask(ctx context.Context, s *Stream, id string) (string, error) {
	resp, err := s.DecideCommitting(ctx, &orchv1.DecideCommittingRequest{Executions: []*orchv1.CommittingExecution{{ExecutionId: id}}})
	if err != nil {
		return "", err
	}
	if len(resp.GetDecisions()) != 1 {
		return "", fmt.Errorf("%d decisions", len(resp.GetDecisions()))
	}
	return resp.GetDecisions()[0].GetReason(), nil
}

// Concurrent calls share one stream and each gets its own answer, though the server
// answers them in another order than they were sent; each call tells the server its
// timeout.
func TestConcurrentCallsGetTheirOwnAnswers(t *testing.T) {
	o := &orchestrator{group: 4}
	s := New(serve(t, streamingOrchestrator{o}))
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const calls = 64
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("x%d", i)
			got, err := ask(ctx, s, id)
			if err == nil && got != id {
				err = fmt.Errorf("call for %s got the answer for %s", id, got)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int32(1), o.streams.Load(), "one stream carried every call")
	require.Zero(t, o.unary.Load())
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, d := range o.timeouts {
		require.True(t, d > 0 && d <= 30*time.Second, "timeout sent: %v", d)
	}
}

// Ask has sent its call when it returns: the server holds it before anyone waits for the
// answer (the writer's first round trip runs meanwhile), and each wait gets its own call's
// answer, also against an orchestrator without streams.
func TestAskSendsBeforeItsWait(t *testing.T) {
	for _, streams := range []bool{true, false} {
		t.Run(fmt.Sprintf("streams=%v", streams), func(t *testing.T) {
			o := &orchestrator{group: 2} // answers only once two calls arrived
			var srv orchv1.DecisionServiceServer = streamingOrchestrator{o}
			if !streams {
				srv = o
			}
			s := New(serve(t, srv))
			defer s.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if !streams {
				_, err := ask(ctx, s, "probe")
				require.Equal(t, codes.Unimplemented, status.Code(err), "the first call finds no streams")
			}
			req := func(id string) *orchv1.DecideCommittingRequest {
				return &orchv1.DecideCommittingRequest{Executions: []*orchv1.CommittingExecution{{ExecutionId: id}}}
			}
			waitA := s.Ask(ctx, req("a"))
			if streams {
				testkit.WaitFor(t, 10*time.Second, func() error {
					o.mu.Lock()
					defer o.mu.Unlock()
					if len(o.timeouts) != 1 {
						return fmt.Errorf("%d calls at the server", len(o.timeouts))
					}
					return nil
				})
			}
			waitB := s.Ask(ctx, req("b"))
			for id, wait := range map[string]func() (*orchv1.DecideCommittingResponse, error){"b": waitB, "a": waitA} {
				resp, err := wait()
				require.NoError(t, err)
				require.Equal(t, id, resp.GetDecisions()[0].GetReason())
			}
		})
	}
}

// A stream that ends fails the calls waiting on it with its error; the next call opens a
// new stream.
func TestAFailedStreamFailsItsCallsAndIsReplaced(t *testing.T) {
	o := &orchestrator{group: 1, failAfter: 1, failWith: status.Error(codes.Unavailable, "orchestrator stopping")}
	s := New(serve(t, streamingOrchestrator{o}))
	defer s.Close()
	ctx := context.Background()
	got, err := ask(ctx, s, "a")
	require.NoError(t, err)
	require.Equal(t, "a", got)
	_, err = ask(ctx, s, "b")
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	testkit.WaitFor(t, 10*time.Second, func() error {
		got, err := ask(ctx, s, "c")
		if err != nil {
			return err
		}
		if got != "c" {
			return fmt.Errorf("answer %q", got)
		}
		return nil
	})
	require.GreaterOrEqual(t, o.streams.Load(), int32(2), "a new stream replaced the failed one")
	require.Zero(t, o.unary.Load())
}

// A call whose context ends before its answer returns the context's error, and its late
// answer reaches no other call.
func TestAnAbandonedCallsAnswerGoesNowhere(t *testing.T) {
	o := &orchestrator{group: 2} // answers only once two calls arrived
	s := New(serve(t, streamingOrchestrator{o}))
	defer s.Close()
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := ask(short, s, "late")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// The second call completes the pair: the server answers both, "late" first to nobody.
	got, err := ask(context.Background(), s, "next")
	require.NoError(t, err)
	require.Equal(t, "next", got)
}

// Against an orchestrator without DecideStream the first call fails (Unimplemented) and
// every later one is unary.
func TestAnOrchestratorWithoutStreamsIsAskedCallByCall(t *testing.T) {
	o := &orchestrator{}
	s := New(serve(t, o))
	defer s.Close()
	ctx := context.Background()
	_, err := ask(ctx, s, "a")
	require.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)
	for _, id := range []string{"b", "c"} {
		got, err := ask(ctx, s, id)
		require.NoError(t, err)
		require.Equal(t, id, got)
	}
	require.Equal(t, int32(2), o.unary.Load())
}

// After Close every call fails with ErrClosed.
func TestClosedStreamRefusesCalls(t *testing.T) {
	o := &orchestrator{group: 1}
	s := New(serve(t, streamingOrchestrator{o}))
	_, err := ask(context.Background(), s, "a")
	require.NoError(t, err)
	s.Close()
	_, err = ask(context.Background(), s, "b")
	require.ErrorIs(t, err, ErrClosed)
}

// stuckOrchestrator opens streams and never reads them.
type stuckOrchestrator struct {
	orchv1.UnimplementedDecisionServiceServer
}

func (stuckOrchestrator) DecideStream(ss orchv1.DecisionService_DecideStreamServer) error {
	<-ss.Context().Done()
	return nil
}

// A call whose Send blocks (an orchestrator that stopped reading fills the stream's
// flow-control window) returns once its deadline passes, instead of holding the writer's
// row locks until the orchestrator reads again.
func TestACallBlockedOnAStuckStreamReturnsAtItsDeadline(t *testing.T) {
	s := New(serve(t, stuckOrchestrator{}))
	defer s.Close()
	big := &orchv1.DecideCommittingRequest{Executions: []*orchv1.CommittingExecution{{ExecutionId: "x", Events: []*eventv1.Event{{PayloadJson: make([]byte, 256<<10)}}}}}
	done := make(chan error, 8)
	for range 8 { // more than the window holds
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := s.DecideCommitting(ctx, big)
			done <- err
		}()
	}
	for range 8 {
		select {
		case err := <-done:
			require.Error(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("a call stayed blocked on the stuck stream past its deadline")
		}
	}
}
