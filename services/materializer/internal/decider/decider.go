// Package decider asks the orchestrator for the decisions a commit causes
// (DecisionService), over one long-lived DecideStream instead of a unary call per commit:
// a call then costs one message each way, without a stream of its own, its headers, its
// signed principal to verify and its handler goroutine.
//
// Invariants:
//   - A call is answered by the response that carries its id, or fails: an answer is never
//     given to another call. A call whose stream ends before its answer fails with the
//     stream's error; the writer then commits without a decision (the commit notice asks
//     for it), as after any failed call.
//   - A failed stream is replaced by a new one on the next call; calls are never resent
//     (the writer has moved on).
//   - An orchestrator without DecideStream (an older release, Unimplemented) is asked call
//     by call with DecideCommitting from then on.
package decider

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
)

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("decider: closed")

// defaultTimeout is a call's timeout when its context has no deadline.
const defaultTimeout = time.Second

// Stream asks over a DecideStream. It is safe for concurrent use; the zero value is not
// usable: make one with New.
type Stream struct {
	client orchv1.DecisionServiceClient
	// unary is set once the orchestrator answered Unimplemented.
	unary  atomic.Bool
	nextID atomic.Uint64

	mu     sync.Mutex
	cur    *session // the open stream, nil when none
	closed bool
}

// New returns a Stream over client.
func New(client orchv1.DecisionServiceClient) *Stream {
	return &Stream{client: client}
}

// session is one DecideStream and the calls waiting on it.
type session struct {
	stream orchv1.DecisionService_DecideStreamClient
	cancel context.CancelFunc
	sendMu sync.Mutex

	mu      sync.Mutex
	waiting map[uint64]chan *orchv1.DecideCommittingResponse
	err     error         // why the stream ended, once done is closed
	done    chan struct{} // closed when the stream ended
}

// DecideCommitting asks what the executions of req decide (orchv1.DecisionServiceClient's
// method, so the writer takes a Stream or a plain client alike). opts apply only when the
// call goes unary.
func (s *Stream) DecideCommitting(ctx context.Context, req *orchv1.DecideCommittingRequest, opts ...grpc.CallOption) (*orchv1.DecideCommittingResponse, error) {
	if s.unary.Load() {
		return s.client.DecideCommitting(ctx, req, opts...)
	}
	return s.Ask(ctx, req)()
}

// Ask sends req now, in the caller's goroutine, and returns what waits for its answer: a
// caller with other work meanwhile (the writer's first round trip) needs no goroutine of
// its own to ask, and the answer reaches it in one hand-over. The wait must be called
// (it forgets the call), and ends with ctx as DecideCommitting does. Against an
// orchestrator without DecideStream the call goes unary, on a goroutine.
func (s *Stream) Ask(ctx context.Context, req *orchv1.DecideCommittingRequest) (wait func() (*orchv1.DecideCommittingResponse, error)) {
	if s.unary.Load() {
		type result struct {
			resp *orchv1.DecideCommittingResponse
			err  error
		}
		done := make(chan result, 1)
		go func() {
			resp, err := s.client.DecideCommitting(ctx, req)
			done <- result{resp, err}
		}()
		return func() (*orchv1.DecideCommittingResponse, error) {
			r := <-done
			return r.resp, r.err
		}
	}
	failed := func(err error) func() (*orchv1.DecideCommittingResponse, error) {
		return func() (*orchv1.DecideCommittingResponse, error) { return nil, err }
	}
	ss, err := s.session()
	if err != nil {
		return failed(err)
	}
	id := s.nextID.Add(1)
	answer := make(chan *orchv1.DecideCommittingResponse, 1)
	if !ss.await(id, answer) {
		return failed(ss.err)
	}
	timeout := defaultTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	// Send blocks while the stream's flow-control window is full (an orchestrator that
	// stopped reading): past the call's deadline the stream is given up, so the writer's
	// row locks are never held longer than a unary call would hold them.
	giveUp := context.AfterFunc(ctx, ss.cancel)
	ss.sendMu.Lock()
	err = ss.stream.Send(&orchv1.DecideStreamRequest{CallId: id, Timeout: durationpb.New(timeout), Request: req})
	ss.sendMu.Unlock()
	giveUp()
	if err != nil {
		ss.forget(id)
		// Send reports io.EOF for a stream the server ended; the reason is Recv's.
		<-ss.done
		return failed(ss.err)
	}
	return func() (*orchv1.DecideCommittingResponse, error) {
		defer ss.forget(id)
		select {
		case resp := <-answer:
			return resp, nil
		case <-ss.done:
			return nil, ss.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close ends the open stream; later calls fail with ErrClosed.
func (s *Stream) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.cur != nil {
		s.cur.cancel()
		s.cur = nil
	}
}

// session returns the open stream, opening one if none is.
func (s *Stream) session() (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.cur != nil {
		return s.cur, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := s.client.DecideStream(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	ss := &session{stream: stream, cancel: cancel, waiting: map[uint64]chan *orchv1.DecideCommittingResponse{}, done: make(chan struct{})}
	s.cur = ss
	go s.receive(ss)
	return ss, nil
}

// receive hands each response to its call until the stream ends, then fails the calls
// still waiting and forgets the stream.
func (s *Stream) receive(ss *session) {
	var err error
	for {
		var resp *orchv1.DecideStreamResponse
		if resp, err = ss.stream.Recv(); err != nil {
			break
		}
		ss.mu.Lock()
		answer := ss.waiting[resp.GetCallId()]
		delete(ss.waiting, resp.GetCallId())
		ss.mu.Unlock()
		if answer != nil { // nil: the call gave up already
			answer <- resp.GetResponse()
		}
	}
	if status.Code(err) == codes.Unimplemented {
		s.unary.Store(true)
	}
	s.mu.Lock()
	if s.cur == ss {
		s.cur = nil
	}
	s.mu.Unlock()
	ss.cancel()
	ss.mu.Lock()
	ss.err = err
	ss.waiting = nil
	ss.mu.Unlock()
	close(ss.done)
}

// await registers a call's answer channel; false when the stream has ended.
func (ss *session) await(id uint64, answer chan *orchv1.DecideCommittingResponse) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.waiting == nil {
		return false
	}
	ss.waiting[id] = answer
	return true
}

// forget drops a call's registration (answered, given up or failed).
func (ss *session) forget(id uint64) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.waiting, id)
}
