package executions

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// headLog is the statebuilder's view of executions of tenant "t": each one's status and
// last seq, and the calls a wait made. (The mesh's wait tests run it against the real
// statebuilder and Postgres.)
type headLog struct {
	sbv1.StateServiceClient
	mu     sync.Mutex
	execs  map[string]*sbv1.ExecutionState
	heads  int
	states []int64 // min_seq of each GetState
	// headRead, when set, receives the id of every head read: the wait is subscribed.
	headRead chan string
	// old makes it a statebuilder from before GetExecutionHead.
	old bool
}

func (l *headLog) find(id, tenant string) (*sbv1.ExecutionState, error) {
	st, ok := l.execs[id]
	if !ok || (tenant != "" && tenant != st.GetTenant()) {
		return nil, status.Errorf(codes.NotFound, "execution %s not found", id)
	}
	return st, nil
}

func (l *headLog) GetExecutionHead(_ context.Context, req *sbv1.GetExecutionHeadRequest, _ ...grpc.CallOption) (*sbv1.GetExecutionHeadResponse, error) {
	if l.old {
		return nil, status.Error(codes.Unimplemented, "unknown method GetExecutionHead")
	}
	l.mu.Lock()
	l.heads++
	st, err := l.find(req.GetExecutionId(), req.GetTenant())
	var resp *sbv1.GetExecutionHeadResponse
	if err == nil {
		resp = &sbv1.GetExecutionHeadResponse{Tenant: st.GetTenant(), Status: st.GetStatus(), LastSeq: st.GetSeq()}
	}
	l.mu.Unlock()
	if l.headRead != nil {
		l.headRead <- req.GetExecutionId()
	}
	return resp, err
}

func (l *headLog) GetState(_ context.Context, req *sbv1.GetStateRequest, _ ...grpc.CallOption) (*sbv1.GetStateResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.states = append(l.states, req.GetMinSeq())
	st, err := l.find(req.GetExecutionId(), req.GetTenant())
	if err != nil {
		return nil, err
	}
	if st.GetSeq() < req.GetMinSeq() {
		return nil, status.Errorf(codes.Unavailable, "behind")
	}
	return &sbv1.GetStateResponse{State: proto.Clone(st).(*sbv1.ExecutionState)}, nil
}

// commit moves an execution to seq and status, as a commit does, and publishes its notice.
func (l *headLog) commit(t *testing.T, nc *nats.Conn, id string, seq int64, st eventv1.ExecutionStatus) {
	t.Helper()
	l.mu.Lock()
	l.execs[id].Seq, l.execs[id].Status = seq, st
	l.mu.Unlock()
	b, err := proto.Marshal(&eventv1.CommitNotice{ExecutionId: id, Tenant: "t", Seq: seq, Terminal: st != eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING})
	require.NoError(t, err)
	require.NoError(t, nc.Publish(natsx.CommittedSubject(id, 16), b))
	require.NoError(t, nc.Flush())
}

func waitFixture(t *testing.T) (*Service, *headLog, *nats.Conn) {
	t.Helper()
	nc, err := nats.Connect(testkit.StartNATS(t))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	running, completed := eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED
	l := &headLog{execs: map[string]*sbv1.ExecutionState{
		"done": {ExecutionId: "done", Tenant: "t", Seq: 7, Status: completed, ResultJson: []byte(`{"ok":true}`)},
		"live": {ExecutionId: "live", Tenant: "t", Seq: 2, Status: running},
	}}
	return &Service{NC: nc, State: l, Waiters: make(chan struct{}, 4)}, l, nc
}

// An execution that already ended costs one head read and one state read at its
// terminal seq.
func TestWaitOnAnEndedExecutionReadsTheStateOnce(t *testing.T) {
	s, l, _ := waitFixture(t)
	resp, err := s.WaitExecution(context.Background(), &orchv1.WaitExecutionRequest{Tenant: "t", ExecutionId: "done"})
	require.NoError(t, err)
	require.True(t, resp.GetTerminal())
	require.Equal(t, int64(7), resp.GetSeq())
	require.Equal(t, `{"ok":true}`, string(resp.GetState().GetResultJson()))
	require.Equal(t, 1, l.heads)
	require.Equal(t, []int64{7}, l.states, "one state read, at the terminal seq")
}

// A running execution is waited for through its notices; its state is read once, at
// the terminal notice's seq.
func TestWaitFollowsNoticesToTheEndThenReadsTheStateOnce(t *testing.T) {
	s, l, nc := waitFixture(t)
	l.headRead = make(chan string, 1)
	type result struct {
		resp *orchv1.WaitExecutionResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := s.WaitExecution(context.Background(), &orchv1.WaitExecutionRequest{Tenant: "t", ExecutionId: "live", Timeout: durationpb.New(time.Minute)})
		done <- result{resp, err}
	}()
	require.Equal(t, "live", <-l.headRead, "the wait subscribed and read the head")
	l.commit(t, nc, "live", 3, eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING)
	l.commit(t, nc, "live", 5, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED)
	r := <-done
	require.NoError(t, r.err)
	require.True(t, r.resp.GetTerminal())
	require.Equal(t, int64(5), r.resp.GetSeq())
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, r.resp.GetState().GetStatus())
	require.Equal(t, 1, l.heads)
	require.Equal(t, []int64{5}, l.states, "no state read before the end, one after")
}

// finals is the engine's keep of ended states, as a waiter sees it: it holds the state
// named by id at the head (seq, last event id) it was given.
type finals struct {
	mu    sync.Mutex
	held  map[string]*sbv1.ExecutionState
	heads map[string]string // id -> last event id
	asked []string          // "id seq last" of each request
	stuck bool              // answers only when the request's context ends
}

func (f *finals) FinalState(ctx context.Context, id, tenant string, seq int64, lastID string) *sbv1.ExecutionState {
	if f.stuck {
		<-ctx.Done() // a shard held up: the wait gives up on it
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, fmt.Sprintf("%s %d %s", id, seq, lastID))
	st := f.held[id]
	if st == nil || st.GetSeq() != seq || f.heads[id] != lastID || st.GetTenant() != tenant {
		return nil
	}
	return st
}

// waitOnLive starts a WaitExecution of the fixture's running execution and returns, once
// the wait subscribed and read its head, where its answer will come.
func waitOnLive(t *testing.T, s *Service, l *headLog) <-chan *orchv1.WaitExecutionResponse {
	t.Helper()
	l.headRead = make(chan string, 1)
	done := make(chan *orchv1.WaitExecutionResponse, 1)
	go func() {
		resp, err := s.WaitExecution(context.Background(), &orchv1.WaitExecutionRequest{Tenant: "t", ExecutionId: "live", Timeout: durationpb.New(time.Minute)})
		assert.NoError(t, err)
		done <- resp
	}()
	require.Equal(t, "live", <-l.headRead, "the wait subscribed and read the head")
	return done
}

// The terminal notice names the log's head: a wait takes the state the engine holds at
// that head and reads none; when the engine holds none there, or does not answer in
// time, it reads the state once.
func TestWaitTakesTheEnginesStateAtTheTerminalHead(t *testing.T) {
	for _, c := range []struct{ held, stuck bool }{{true, false}, {false, false}, {true, true}} {
		held := c.held && !c.stuck
		t.Run(fmt.Sprintf("held=%v stuck=%v", c.held, c.stuck), func(t *testing.T) {
			s, l, nc := waitFixture(t)
			f := &finals{held: map[string]*sbv1.ExecutionState{}, heads: map[string]string{}, stuck: c.stuck}
			if held {
				f.held["live"] = &sbv1.ExecutionState{ExecutionId: "live", Tenant: "t", Seq: 5, Status: eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, ResultJson: []byte(`"engine"`)}
				f.heads["live"] = "e5"
			}
			s.Finals = f
			done := waitOnLive(t, s, l)
			l.mu.Lock()
			l.execs["live"].Seq, l.execs["live"].Status = 5, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED
			l.mu.Unlock()
			b, err := proto.Marshal(&eventv1.CommitNotice{ExecutionId: "live", Tenant: "t", Seq: 5, Terminal: true, LastEventId: "e5"})
			require.NoError(t, err)
			require.NoError(t, nc.Publish(natsx.CommittedSubject("live", 16), b))
			require.NoError(t, nc.Flush())
			resp := <-done
			require.True(t, resp.GetTerminal())
			require.EqualValues(t, 5, resp.GetSeq())
			if !c.stuck {
				require.Equal(t, []string{"live 5 e5"}, f.asked, "asked at the head the notice named")
			}
			if held {
				require.Equal(t, `"engine"`, string(resp.GetState().GetResultJson()))
				require.Empty(t, l.states, "no read of the log")
			} else {
				require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, resp.GetState().GetStatus())
				require.Equal(t, []int64{5}, l.states, "read once, at the terminal seq")
			}
		})
	}
}

// A terminal notice that names no head (an older materializer's) is not asked about: the
// state is read as before.
func TestWaitWithoutATerminalHeadReadsTheState(t *testing.T) {
	s, l, nc := waitFixture(t)
	f := &finals{}
	s.Finals = f
	done := waitOnLive(t, s, l)
	l.commit(t, nc, "live", 4, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED)
	resp := <-done
	require.True(t, resp.GetTerminal())
	require.Empty(t, f.asked)
	require.Equal(t, []int64{4}, l.states)
}

// A wait that times out reports the seq it knows, not terminal and without a state, and
// reads no state.
func TestWaitThatTimesOutReportsWhatIsKnown(t *testing.T) {
	s, l, _ := waitFixture(t)
	resp, err := s.WaitExecution(context.Background(), &orchv1.WaitExecutionRequest{Tenant: "t", ExecutionId: "live", Timeout: durationpb.New(50 * time.Millisecond)})
	require.NoError(t, err)
	require.False(t, resp.GetTerminal())
	require.Equal(t, int64(2), resp.GetSeq())
	require.Nil(t, resp.GetState())
	require.Empty(t, l.states)
}

// An execution that does not exist, or is another tenant's, is NotFound; a wait needs an
// id; waits beyond the bound are refused.
func TestWaitRefusesUnknownOtherTenantsAndTooMany(t *testing.T) {
	s, l, _ := waitFixture(t)
	ctx := context.Background()
	for _, req := range []*orchv1.WaitExecutionRequest{
		{Tenant: "t", ExecutionId: "nope"},
		{Tenant: "u", ExecutionId: "done"},
	} {
		_, err := s.WaitExecution(ctx, req)
		require.Equal(t, codes.NotFound, status.Code(err), "%v: %v", req, err)
	}
	require.Empty(t, l.states, "NotFound is known from the head")
	_, err := s.WaitExecution(ctx, &orchv1.WaitExecutionRequest{Tenant: "t"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.ErrorContains(t, err, "execution_id")
	for range cap(s.Waiters) {
		s.Waiters <- struct{}{}
	}
	_, err = s.WaitExecution(ctx, &orchv1.WaitExecutionRequest{Tenant: "t", ExecutionId: "done"})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
}

// A statebuilder from before GetExecutionHead (a rolling upgrade) is read as before: the
// state stands in for the head.
func TestWaitOnAStatebuilderWithoutHeadsReadsTheState(t *testing.T) {
	s, l, _ := waitFixture(t)
	l.old = true
	resp, err := s.WaitExecution(context.Background(), &orchv1.WaitExecutionRequest{Tenant: "t", ExecutionId: "done"})
	require.NoError(t, err)
	require.True(t, resp.GetTerminal())
	require.Equal(t, int64(7), resp.GetSeq())
	require.Equal(t, `{"ok":true}`, string(resp.GetState().GetResultJson()))
	_, err = s.WaitExecution(context.Background(), &orchv1.WaitExecutionRequest{Tenant: "u", ExecutionId: "done"})
	require.Equal(t, codes.NotFound, status.Code(err))
}

// A start whose idempotency key names a logged execution answers from the head alone.
func TestStartWithAKeyOfALoggedExecutionReadsOnlyItsHead(t *testing.T) {
	s, l, _ := waitFixture(t)
	id := uuid.NewSHA1(idempotencyNS, []byte("t\x00k1")).String()
	l.execs[id] = &sbv1.ExecutionState{ExecutionId: id, Tenant: "t", Seq: 3, Status: eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING}
	got, existing, err := s.publishStart(context.Background(), "t", "k1", "", []byte(`{}`), nil, nil)
	require.NoError(t, err)
	require.True(t, existing)
	require.Equal(t, id, got)
	require.Equal(t, 1, l.heads)
	require.Empty(t, l.states, "no state read")
}
