package engine

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/platform/telemetry"
)

// Decisions inside a commit.
//
// The materializer, holding the row locks of the executions a batch touches, asks
// DecideCommitting what each execution decides once the batch's events are committed, and
// commits the answer in the same transaction: an outcome and the decision it causes cost one
// commit, not two. What makes it safe:
//
//   - The decision is decide's, on the state the log will hold: the execution's state at
//     seq_before (the seq the materializer read under the lock, checked against the cached
//     state's seq and last event id) folded with the committing events, which carry the
//     seqs and commit time the transaction gives them.
//   - Nothing is published here. The events answered are committed with the batch or not
//     at all; a command reaches a worker only after the materializer's commit, as always.
//   - The shard's cached state takes the committing events and the decision's events at
//     the seqs the materializer will give them, before they are committed: it speculates.
//     Each speculated event is confirmed by the commit notice that carries it (same seq,
//     same id); a notice that contradicts one or does not carry it drops the state, as does
//     a notice asking for a decision while speculated events remain (the commit went ahead
//     without this answer). A dropped state is read afresh from the statebuilder.
//   - Anything else (no cached state, a state at another seq, a decision that needs a
//     rival outcome checked, an answer too large, a timeout) answers "not decided": the
//     batch commits alone and its notice asks for the decision, as without this service.

// inlineRequest is one execution's part of a DecideCommitting call, queued on its shard.
type inlineRequest struct {
	ctx   context.Context
	exec  *orchv1.CommittingExecution
	reply chan *orchv1.Decision
	// size bounds the encoded size of a decision with events, set by the shard before it
	// replies: the answer's bound then measures none of its events again.
	size int
}

// inlineAnswerMax bounds the encoded events answered for one execution.
const inlineAnswerMax = 4 << 20

// inlineResponseMax bounds one DecideCommitting answer (the materializer's client takes
// up to 16 MiB).
const inlineResponseMax = 12 << 20

// maxSpeculated bounds the unconfirmed events a cached state may hold; past it the state
// is dropped (its notices go to another replica, say).
const maxSpeculated = 1024

func (e *Engine) setShards(shards []*shard) {
	e.shardsMu.Lock()
	defer e.shardsMu.Unlock()
	e.shards = shards
}

// DecideCommitting decides, for each execution of req, on its state after the committing
// events, on the execution's shard (so it is ordered with that execution's notices).
func (e *Engine) DecideCommitting(ctx context.Context, req *orchv1.DecideCommittingRequest) *orchv1.DecideCommittingResponse {
	return e.AskCommitting(ctx, req)()
}

// AskCommitting is DecideCommitting in two halves: it hands req's executions to their
// shards now, in the caller's goroutine, and returns what waits for their decisions (a
// caller in the same process, decisionlink, starts no goroutine to ask). The wait must be
// called.
func (e *Engine) AskCommitting(ctx context.Context, req *orchv1.DecideCommittingRequest) (wait func() *orchv1.DecideCommittingResponse) {
	reqs := make([]*inlineRequest, len(req.GetExecutions()))
	e.shardsMu.RLock()
	shards := e.shards
	for i, x := range req.GetExecutions() {
		if shards == nil {
			break
		}
		r := &inlineRequest{ctx: ctx, exec: x, reply: make(chan *orchv1.Decision, 1)}
		select {
		case shards[shardOf(x.GetExecutionId(), len(shards))].in <- notice{inline: r}:
			reqs[i] = r
		case <-ctx.Done():
		}
	}
	e.shardsMu.RUnlock()
	return func() *orchv1.DecideCommittingResponse { return e.collect(ctx, req, reqs, shards != nil) }
}

// collect waits for the decisions of the executions AskCommitting handed to their shards
// (reqs, nil where none was) and makes them one answer within inlineResponseMax.
func (e *Engine) collect(ctx context.Context, req *orchv1.DecideCommittingRequest, reqs []*inlineRequest, running bool) *orchv1.DecideCommittingResponse {
	resp := &orchv1.DecideCommittingResponse{Decisions: make([]*orchv1.Decision, len(req.GetExecutions()))}
	size := 0
	for i, x := range req.GetExecutions() {
		var d *orchv1.Decision
		if r := reqs[i]; r != nil {
			select {
			case d = <-r.reply:
			case <-ctx.Done():
			}
		}
		if d == nil {
			reason := "not_running"
			if running {
				reason = "expired"
			}
			e.inline.WithLabelValues(reason).Inc()
			d = &orchv1.Decision{ExecutionId: x.GetExecutionId(), Reason: reason}
		}
		n := reqs[i].answerSize(d)
		if size += n; size > inlineResponseMax && len(d.GetEvents()) > 0 {
			// Over what one answer carries: decided after its notice (which drops the
			// state this decision speculated).
			e.inline.WithLabelValues("too_large").Inc()
			d = &orchv1.Decision{ExecutionId: x.GetExecutionId(), Reason: "too_large"}
		}
		resp.Decisions[i] = d
	}
	return resp
}

// answerBound bounds the encoded size of d, whose events' sizes add up to eventsSize: each
// event costs its size plus a tag and a length in the answer (under 8 bytes for events
// under inlineAnswerMax), and the rest is the decision's own fields.
func answerBound(d *orchv1.Decision, eventsSize int) int {
	return eventsSize + 8*len(d.GetEvents()) + proto.Size(&orchv1.Decision{ExecutionId: d.GetExecutionId(), Decided: d.GetDecided(), Reason: d.GetReason(), Trace: d.GetTrace()})
}

// answerSize bounds d's encoded size: the bound its shard measured when d is the
// decision with events it answered r with, d's own size otherwise (a decision without
// events is a few bytes).
func (r *inlineRequest) answerSize(d *orchv1.Decision) int {
	if r != nil && len(d.GetEvents()) > 0 && r.size > 0 {
		return r.size
	}
	return proto.Size(d)
}

// decideInline runs on the execution's shard goroutine.
func (e *Engine) decideInline(ctx context.Context, s *shard, r *inlineRequest) *orchv1.Decision {
	x := r.exec
	id := x.GetExecutionId()
	out := &orchv1.Decision{ExecutionId: id}
	no := func(reason string) *orchv1.Decision {
		e.inline.WithLabelValues(reason).Inc()
		out.Reason = reason
		return out
	}
	evs := x.GetEvents()
	switch {
	case r.ctx.Err() != nil:
		return no("expired") // the materializer committed without an answer
	case len(evs) == 0:
		return no("no_events")
	}
	st := s.states.get(id)
	switch {
	case x.GetSeqBefore() == 0:
		// The batch starts the execution: its state before is the empty one.
		st = domain.NewState(id)
		s.states.put(st)
	case st == nil:
		return no("not_cached")
	case st.GetSeq() != x.GetSeqBefore() || st.GetLastEventId() != x.GetLastEventId():
		s.states.drop(id)
		return no("moved")
	default:
		// The log stands where the state speculated it would: what it speculated is
		// committed (the commit of an answer announces itself to waiters only, not here).
		s.states.confirmed(id)
	}
	// The committing events, at the seqs the commit gives them.
	for _, ev := range evs {
		if ev.GetSeq() != st.GetSeq()+1 || ev.GetExecutionId() != id {
			s.states.drop(id)
			return no("gap")
		}
		if err := domain.Apply(st, ev); err != nil {
			s.states.drop(id)
			return no("fold")
		}
		s.states.folded(st, ev)
		s.states.speculate(id, ev.GetSeq(), ev.GetEventId(), int64(proto.Size(ev)))
	}
	if st.GetTenant() != x.GetTenant() {
		s.states.drop(id)
		return no("tenant")
	}
	out.Decided = true
	if domain.IsTerminalStatus(st.GetStatus()) {
		e.inline.WithLabelValues("decided").Inc()
		return out // nothing follows a terminal event
	}
	// The decision continues the trace of the commit that asks for it.
	parent := ctx
	if len(x.GetTrace()) > 0 {
		parent = telemetry.Propagator.Extract(ctx, propagation.MapCarrier(x.GetTrace()))
	}
	ctx, span := e.cfg.Tracer.Start(parent, "decide", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(telemetry.AttrTenant.String(x.GetTenant()), telemetry.AttrExecutionID.String(id), telemetry.AttrSeq.Int64(st.GetSeq())))
	defer span.End()
	events, err := e.decideOn(ctx, st, activeOf(s, st))
	if err != nil {
		telemetry.ErrorStatus(span, err)
		out.Decided = false
		return no("error")
	}
	size := 0
	sizes := make([]int64, len(events))
	for i, ev := range events {
		n := proto.Size(ev)
		size, sizes[i] = size+n, int64(n)
		switch {
		case ev.GetExecutionId() != id, domain.OutcomeRival(ev) != "":
			out.Decided = false
			return no("rival") // its rival is probed in the log before it is committed
		case n > natsx.MaxMessageBytes, size > inlineAnswerMax:
			out.Decided = false
			// The commit's notice asks for this decision again, on this state if the commit
			// goes as speculated: it is kept for it (drive) rather than taken twice. An event
			// over the message limit fails the execution there, naming it.
			s.large = &largeDecision{id: id, seq: st.GetSeq(), lastID: st.GetLastEventId(), commitTime: evs[len(evs)-1].GetCommitTime(), events: events}
			return no("too_large")
		}
	}
	// The decision's events, at the seqs and commit time the commit will give them.
	commitTime := evs[len(evs)-1].GetCommitTime()
	for i, ev := range events {
		// The state folds a copy: the answer's events go to the materializer as they are
		// (decisionlink), which sets their seqs as it commits them. A fan-out's commands
		// are most of its decision, and no fold reads them.
		c := domain.FoldCopy(ev)
		c.Seq, c.CommitTime = st.GetSeq()+1, commitTime
		if err := domain.Apply(st, c); err != nil {
			s.states.drop(id) // decide made an event its own fold refuses: let the notice path decide
			out.Decided = false
			return no("fold")
		}
		s.states.folded(st, c)
		s.states.speculate(id, c.GetSeq(), c.GetEventId(), sizes[i])
	}
	out.Events = events
	if span.SpanContext().IsValid() {
		c := propagation.MapCarrier{}
		telemetry.Propagator.Inject(ctx, c)
		out.Trace = c
	}
	r.size = answerBound(out, size)
	// s.decided is left alone: it names states decided after their notices, and this
	// answer may yet not be committed (its notice then asks for the decision).
	e.wakeFor(events)
	e.inline.WithLabelValues("decided").Inc()
	if len(events) == 0 {
		e.decisions.WithLabelValues("wait").Inc()
	} else {
		e.decisions.WithLabelValues("inline").Inc()
	}
	return out
}

// DecisionServer serves DecisionService over the engine: to the materializer only.
type DecisionServer struct {
	orchv1.UnimplementedDecisionServiceServer
	Engine *Engine
}

// DecideCommitting implements orchv1.DecisionServiceServer.
func (d *DecisionServer) DecideCommitting(ctx context.Context, req *orchv1.DecideCommittingRequest) (*orchv1.DecideCommittingResponse, error) {
	if err := materializerOnly(ctx, "DecideCommitting"); err != nil {
		return nil, err
	}
	return d.Engine.DecideCommitting(ctx, req), nil
}

// DecideStream implements orchv1.DecisionServiceServer: each call is decided as
// DecideCommitting decides it, concurrently with the others, within the call's timeout,
// and answered on the stream as soon as it is decided.
//
// The calls are decided by goroutines that live as long as the stream: one is started
// only when every one started is busy, up to streamCallsMax, and each then takes call
// after call. A goroutine started per call grew its stack from the smallest size at every
// call (deciding and encoding an answer run deep): about a twentieth of a chain step's
// CPU went to copying stacks.
func (d *DecisionServer) DecideStream(ss orchv1.DecisionService_DecideStreamServer) error {
	if err := materializerOnly(ss.Context(), "DecideStream"); err != nil {
		return err
	}
	var (
		sendMu   sync.Mutex // a stream's Send is not safe for concurrent use
		sendErr  error
		deciders sync.WaitGroup
		started  int
		calls    = make(chan *orchv1.DecideStreamRequest) // unbuffered: a send is taken by a free decider
	)
	defer func() {
		close(calls)
		deciders.Wait()
	}()
	decide := func(call *orchv1.DecideStreamRequest) {
		timeout := streamCallMax
		if t := call.GetTimeout(); t != nil {
			timeout = min(max(t.AsDuration(), 0), streamCallMax)
		}
		ctx, cancel := context.WithTimeout(ss.Context(), timeout)
		resp := d.Engine.DecideCommitting(ctx, call.GetRequest())
		cancel()
		sendMu.Lock()
		defer sendMu.Unlock()
		if sendErr == nil {
			// A failed Send ends the stream: the caller's calls fail, and it asks again
			// on a new stream or leaves the decisions to the commit notices.
			sendErr = ss.Send(&orchv1.DecideStreamResponse{CallId: call.GetCallId(), Response: resp})
		}
	}
	for {
		call, err := ss.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case calls <- call: // a decider was free
			continue
		default:
		}
		if started < streamCallsMax {
			started++
			deciders.Go(func() {
				decide(call)
				for c := range calls {
					decide(c)
				}
			})
			continue
		}
		// Past streamCallsMax calls in flight the stream is read no further until one is
		// answered: the caller's sends wait on the stream's flow control.
		calls <- call
	}
}

// streamCallsMax bounds the calls of one DecideStream decided at once (a materializer has
// about one in flight per commit).
const streamCallsMax = 256

// streamCallMax bounds how long a DecideStream call may wait for its decisions (the
// materializer holds row locks meanwhile).
const streamCallMax = 5 * time.Second

// materializerOnly admits only the materializer's service principal to DecisionService.
func materializerOnly(ctx context.Context, method string) error {
	if p := auth.FromContext(ctx); p == nil || !p.Service || p.Subject != auth.ServicePrincipal("materializer").Subject {
		return status.Error(codes.PermissionDenied, method+": only the materializer decides inside its commits")
	}
	return nil
}
