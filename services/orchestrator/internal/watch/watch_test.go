package watch

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/testkit"
)

// fakeLog is the statebuilder's view of one execution of tenant "t": its committed events.
type fakeLog struct {
	sbv1.StateServiceClient
	mu     sync.Mutex
	events []*eventv1.Event
	reads  int
}

func (l *fakeLog) commit(types ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, typ := range types {
		l.events = append(l.events, &eventv1.Event{ExecutionId: "x1", Tenant: "t", Seq: int64(len(l.events) + 1), Type: typ})
	}
}

func (l *fakeLog) ListEvents(_ context.Context, req *sbv1.ListEventsRequest, _ ...grpc.CallOption) (*sbv1.ListEventsResponse, error) {
	if req.GetTenant() != "t" || req.GetExecutionId() != "x1" {
		return nil, status.Errorf(codes.NotFound, "execution %s not found", req.GetExecutionId())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads++
	resp := &sbv1.ListEventsResponse{}
	for _, ev := range l.events {
		if ev.GetSeq() > req.GetAfterSeq() && len(resp.Events) < int(req.GetPageSize()) {
			resp.Events = append(resp.Events, ev)
		}
	}
	if len(resp.Events) == int(req.GetPageSize()) {
		resp.NextAfterSeq = resp.Events[len(resp.Events)-1].GetSeq()
	}
	return resp, nil
}

func (l *fakeLog) GetState(_ context.Context, req *sbv1.GetStateRequest, _ ...grpc.CallOption) (*sbv1.GetStateResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := &sbv1.ExecutionState{ExecutionId: "x1", Tenant: "t", Seq: int64(len(l.events)), Status: eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING}
	if n := len(l.events); n > 0 && domain.IsTerminal(l.events[n-1].GetType()) {
		st.Status = eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED
	}
	return &sbv1.GetStateResponse{State: st}, nil
}

type watchFixture struct {
	log    *fakeLog
	nc     *nats.Conn
	w      *Watcher
	client orchv1.WatchServiceClient
}

func startWatcher(t *testing.T, max int) *watchFixture {
	t.Helper()
	nc, err := nats.Connect(testkit.StartNATS(t))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	f := &watchFixture{log: &fakeLog{}, nc: nc}
	f.w = NewWatcher(nc, f.log, max)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	orchv1.RegisterWatchServiceServer(srv, f.w)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	f.client = orchv1.NewWatchServiceClient(conn)
	return f
}

// notify publishes a commit notice of the execution, as the materializer does.
func (f *watchFixture) notify(t *testing.T) {
	t.Helper()
	require.NoError(t, f.nc.Publish(natsx.CommittedSubject("x1", 16), []byte{}))
	require.NoError(t, f.nc.Flush())
}

// open starts a watch and waits until it is established (its header arrived).
func (f *watchFixture) open(t *testing.T, ctx context.Context, tenant string, after int64) grpc.ServerStreamingClient[orchv1.WatchExecutionResponse] {
	t.Helper()
	s, err := f.client.WatchExecution(ctx, &orchv1.WatchExecutionRequest{Tenant: tenant, ExecutionId: "x1", AfterSeq: after})
	require.NoError(t, err)
	md, err := s.Header()
	require.NoError(t, err)
	require.NotNil(t, md, "the watch is established")
	return s
}

// recv reads until n events arrived, checking they are consecutive after *seq.
func recv(t *testing.T, s grpc.ServerStreamingClient[orchv1.WatchExecutionResponse], seq *int64, n int) {
	t.Helper()
	for got := 0; got < n; {
		m, err := s.Recv()
		require.NoError(t, err)
		for _, ev := range m.GetEvents() {
			*seq++
			require.Equal(t, *seq, ev.GetSeq(), "gap-free, in seq order")
			got++
		}
	}
}

func TestWatchStreamsCommittedEventsUntilTheTerminalOne(t *testing.T) {
	t.Parallel()
	f := startWatcher(t, 10)
	f.log.commit(domain.EventPlaybookStarted, domain.EventStepEnter)
	s := f.open(t, context.Background(), "t", 0)
	var seq int64
	recv(t, s, &seq, 2)

	// More than a page at once, announced by a burst of notices (they coalesce).
	for range 450 {
		f.log.commit(domain.EventCtxUpdated)
	}
	for range 20 {
		f.notify(t)
	}
	recv(t, s, &seq, 450)

	f.log.commit(domain.EventPlaybookCompleted)
	f.notify(t)
	recv(t, s, &seq, 1)
	_, err := s.Recv()
	require.ErrorIs(t, err, io.EOF, "the watch ends after the terminal event")
	require.Equal(t, int64(453), seq)

	// Watching from a seq: only what follows it.
	s = f.open(t, context.Background(), "t", 450)
	seq = 450
	recv(t, s, &seq, 3)
	_, err = s.Recv()
	require.ErrorIs(t, err, io.EOF)

	// After the terminal event there is nothing to watch: the stream ends at once, without
	// a header.
	s, err = f.client.WatchExecution(context.Background(), &orchv1.WatchExecutionRequest{Tenant: "t", ExecutionId: "x1", AfterSeq: 453})
	require.NoError(t, err)
	md, err := s.Header()
	require.NoError(t, err)
	require.Nil(t, md)
	_, err = s.Recv()
	require.ErrorIs(t, err, io.EOF)
}

func TestWatchRefusesOtherTenantsAndBadRequests(t *testing.T) {
	t.Parallel()
	f := startWatcher(t, 10)
	f.log.commit(domain.EventPlaybookStarted)
	for _, tc := range []struct {
		req  *orchv1.WatchExecutionRequest
		code codes.Code
	}{
		{&orchv1.WatchExecutionRequest{Tenant: "other", ExecutionId: "x1"}, codes.NotFound},
		{&orchv1.WatchExecutionRequest{Tenant: "t", ExecutionId: "nope"}, codes.NotFound},
		{&orchv1.WatchExecutionRequest{Tenant: "t"}, codes.InvalidArgument},
		{&orchv1.WatchExecutionRequest{Tenant: "t", ExecutionId: "x1", AfterSeq: -1}, codes.InvalidArgument},
	} {
		s, err := f.client.WatchExecution(context.Background(), tc.req)
		require.NoError(t, err)
		_, err = s.Recv()
		require.Equal(t, tc.code, status.Code(err), "%v: %v", tc.req, err)
	}
}

func TestWatchesAreBoundedCancellableAndStopped(t *testing.T) {
	t.Parallel()
	f := startWatcher(t, 2)
	f.log.commit(domain.EventPlaybookStarted)
	ctx, cancel := context.WithCancel(context.Background())
	first := f.open(t, ctx, "t", 1)
	second := f.open(t, context.Background(), "t", 1)

	third, err := f.client.WatchExecution(context.Background(), &orchv1.WatchExecutionRequest{Tenant: "t", ExecutionId: "x1"})
	require.NoError(t, err)
	_, err = third.Recv()
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "past the cap: %v", err)

	// A cancelled watch gives its slot back.
	cancel()
	_, err = first.Recv()
	require.Equal(t, codes.Canceled, status.Code(err))
	testkit.WaitFor(t, 10*time.Second, func() error {
		if n := len(f.w.slots); n != 1 {
			return errors.New("the cancelled watch still holds its slot")
		}
		return nil
	})
	third = f.open(t, context.Background(), "t", 1)

	// Stopping ends the open watches with Unavailable, naming where to resume.
	f.w.Stop()
	for _, s := range []grpc.ServerStreamingClient[orchv1.WatchExecutionResponse]{second, third} {
		_, err := s.Recv()
		require.Equal(t, codes.Unavailable, status.Code(err))
		require.Contains(t, status.Convert(err).Message(), "resume the watch after seq 1")
	}
	s, err := f.client.WatchExecution(context.Background(), &orchv1.WatchExecutionRequest{Tenant: "t", ExecutionId: "x1"})
	require.NoError(t, err)
	_, err = s.Recv()
	require.Equal(t, codes.Unavailable, status.Code(err))
	testkit.WaitFor(t, 10*time.Second, func() error {
		if n := len(f.w.slots); n != 0 {
			return errors.New("stopped watches still hold slots")
		}
		return nil
	})
}

func TestWatchResponsesAreBoundedInBytes(t *testing.T) {
	t.Parallel()
	f := startWatcher(t, 10)
	f.log.commit(domain.EventPlaybookStarted)
	for range 6 {
		f.log.commit(domain.EventCallDone)
	}
	f.log.commit(domain.EventPlaybookCompleted)
	f.log.mu.Lock()
	for _, ev := range f.log.events[1:7] {
		ev.ResultJson = make([]byte, 400<<10)
	}
	f.log.mu.Unlock()
	s := f.open(t, context.Background(), "t", 0)
	var seq int64
	messages := 0
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		messages++
		require.LessOrEqual(t, proto.Size(m), watchMessageBytes+1024, "one response carries at most about 1 MiB")
		for _, ev := range m.GetEvents() {
			seq++
			require.Equal(t, seq, ev.GetSeq())
		}
	}
	require.Equal(t, int64(8), seq)
	require.GreaterOrEqual(t, messages, 3)
}
