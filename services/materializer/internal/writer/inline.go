package writer

import (
	"context"
	"slices"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/telemetry"
)

// Decisions inside the commit.
//
// The writer asks the orchestrator what each execution whose new events need a decision
// decides once they are committed, and commits the answer's events right after them, in
// the same transaction. It asks before the first round trip, on the heads it committed
// last (askEarly), so the call overlaps Postgres's work; an answer is taken only if the
// row lock finds that head. An execution it has no head for is asked between the two
// round trips, holding the lock. A step's outcome and the next step's command then cost one commit,
// not two, and the next command is forwarded as soon as it is committed.
//
// What holds:
//   - Nothing of a decision reaches a worker or a reader before it is committed: the
//     answer is rows of this transaction, forwarded after the commit like any other.
//   - A decision is on the state the log holds: the request names the seq and the id of
//     the last event each execution had under the lock (in a one-round-trip commit, the
//     head its guards then find under the lock, or nothing is written: fast.go), and
//     carries the events being committed with the seqs and commit time they get here; the
//     orchestrator refuses an execution its state does not match.
//   - An execution the orchestrator does not decide, or any failure of the call, commits
//     the batch alone, and its commit notice asks for the decision (NeedsDecision), as
//     without a decider. A failed call also rests the decider for decideRest, so a stuck
//     orchestrator delays one batch, not every one.
//   - The decision's events follow the classification of every event: after a terminal
//     event nothing is taken. The orchestrator answers no event that needs a rival
//     outcome probed (domain.OutcomeRival), the one check made in the log before insert.

// spansKey carries, in the context Commit is called with, the trace context of each
// execution's commit (WithSpans).
type spansKey struct{}

// WithSpans returns ctx carrying of: the context of the span that commits an execution's
// events (nil for none). The decisions asked inside the commit continue it.
func WithSpans(ctx context.Context, of func(executionID string) context.Context) context.Context {
	return context.WithValue(ctx, spansKey{}, of)
}

// traceOf is the W3C carrier of the span that commits an execution's events, or nil.
func traceOf(ctx context.Context, executionID string) map[string]string {
	of, _ := ctx.Value(spansKey{}).(func(string) context.Context)
	if of == nil {
		return nil
	}
	sctx := of(executionID)
	if sctx == nil || !trace.SpanContextFromContext(sctx).IsValid() {
		return nil
	}
	c := propagation.MapCarrier{}
	telemetry.Propagator.Inject(sctx, c)
	return c
}

// Decider is the orchestrator's DecisionService client (orchv1.DecisionServiceClient).
type Decider interface {
	DecideCommitting(ctx context.Context, req *orchv1.DecideCommittingRequest, opts ...grpc.CallOption) (*orchv1.DecideCommittingResponse, error)
}

// DecideTimeout bounds one call to the decider; the row locks are held meanwhile.
const DecideTimeout = time.Second

// decideRequestMax bounds the events one call carries (about; the first execution always
// goes).
const decideRequestMax = 4 << 20

// decideRest is how long a failed call leaves the decider unasked.
const decideRest = 5 * time.Second

// decideInline takes the decisions of the executions whose committed events in the batch
// need one: from early, the call made before the first round trip, for each execution it
// asked about on the state the lock found (seq, last event, the same events all
// committed); by a call now for the executions early did not ask about. It returns evs and
// bodies extended with the answered events (in execution order, each execution's in the
// order answered), marking the executions decided so their notices ask for nothing more.
func (w *Writer) decideInline(ctx context.Context, early *earlyAsk, asked map[string]bool, evs []*eventv1.Event, bodies [][]byte, distinct []int, res *Result,
	execs []string, state map[string]*execState, commitTime time.Time) ([]*eventv1.Event, [][]byte) {
	// The committed events per execution, in seq order (distinct is grouped by execution
	// in arrival order), and whether any needs a decision.
	committing := map[string][]*eventv1.Event{}
	needs := map[string]bool{}
	for _, i := range distinct {
		if res.Outcomes[i] != Committed {
			continue
		}
		id := evs[i].GetExecutionId()
		committing[id] = append(committing[id], evs[i])
		needs[id] = needs[id] || domain.NeedsDecision(evs[i].GetType())
	}
	if early != nil {
		resp, err := early.wait()
		if err != nil || len(resp.GetDecisions()) != len(early.req.Executions) {
			w.decideRestUntil.Store(time.Now().Add(decideRest).UnixNano())
			return evs, bodies
		}
		for k, x := range early.req.Executions {
			id := x.GetExecutionId()
			asked[id] = true // decided on another state, it is the notice's to decide again
			s := state[id]
			if !needs[id] || !s.known || s.lastSeq != x.GetSeqBefore() || s.lastID != x.GetLastEventId() || !sameEvents(committing[id], x.GetEvents()) {
				continue
			}
			evs, bodies = w.take(x, resp.GetDecisions()[k], evs, bodies, distinct, res, state)
		}
	}
	if time.Now().UnixNano() < w.decideRestUntil.Load() {
		return evs, bodies
	}
	req := &orchv1.DecideCommittingRequest{}
	ct := timestamppb.New(commitTime)
	size := 0
	for _, id := range execs {
		s := state[id]
		if asked[id] || !needs[id] || !s.known || domain.IsTerminalStatus(eventv1.ExecutionStatus(s.after)) {
			continue
		}
		for _, ev := range committing[id] {
			size += proto.Size(ev)
		}
		if size > decideRequestMax && len(req.Executions) > 0 {
			break // the rest are decided after their notices
		}
		// The committed events of an execution take the seqs right after its head, in order.
		req.Executions = append(req.Executions, committingExecution(ctx, id, s.tenant, s.lastSeq, s.lastID, committing[id], ct))
	}
	if len(req.Executions) == 0 {
		return evs, bodies
	}
	cctx, cancel := context.WithTimeout(ctx, DecideTimeout)
	resp, err := w.Decide.DecideCommitting(cctx, req)
	cancel()
	if err != nil || len(resp.GetDecisions()) != len(req.Executions) {
		w.decideRestUntil.Store(time.Now().Add(decideRest).UnixNano())
		return evs, bodies
	}
	for k, d := range resp.GetDecisions() {
		asked[req.Executions[k].GetExecutionId()] = true
		evs, bodies = w.take(req.Executions[k], d, evs, bodies, distinct, res, state)
	}
	return evs, bodies
}

// take appends the events of d, the answer about x, to evs and bodies when it is a valid
// decision on x, and marks the execution decided.
func (w *Writer) take(x *orchv1.CommittingExecution, d *orchv1.Decision, evs []*eventv1.Event, bodies [][]byte, distinct []int, res *Result,
	state map[string]*execState) ([]*eventv1.Event, [][]byte) {
	if !d.GetDecided() || d.GetExecutionId() != x.GetExecutionId() || !validDecision(x, d.GetEvents(), evs, distinct) {
		return evs, bodies
	}
	if bodies == nil {
		bodies = make([][]byte, len(evs))
	}
	s := state[x.GetExecutionId()]
	s.decide = false
	if len(d.GetTrace()) > 0 {
		if res.DecisionTraces == nil {
			res.DecisionTraces = map[string]map[string]string{}
		}
		res.DecisionTraces[x.GetExecutionId()] = d.GetTrace()
	}
	for _, ev := range d.GetEvents() {
		ev.Seq, ev.CommitTime = 0, nil
		b, err := proto.Marshal(ev)
		if err != nil {
			return evs, bodies // not the whole answer: its notice goes to the orchestrator
		}
		evs, bodies = append(evs, ev), append(bodies, b)
	}
	// A start's notice still goes to the orchestrators: their starts wait for it, an older
	// release's on NOETL_COMMITTED only.
	if x.GetSeqBefore() > 0 {
		if res.Inline == nil {
			res.Inline = map[string]bool{}
		}
		res.Inline[x.GetExecutionId()] = true
	}
	return evs, bodies
}

// sameEvents reports whether the events asked about are the ones committed, in order.
func sameEvents(committed, asked []*eventv1.Event) bool {
	if len(committed) != len(asked) {
		return false
	}
	for i := range committed {
		if committed[i].GetEventId() != asked[i].GetEventId() {
			return false
		}
	}
	return true
}

// committingExecution is one execution's part of a DecideCommitting request: its head
// before the batch (seqBefore, lastID) and copies of evs, its events the batch commits, with
// the seqs after the head in order and the commit time the transaction gives them (evs
// themselves are inserted as published). The copies are the request's alone: an orchestrator
// in this process decides on them as they are and keeps those it folds (decisionlink), so
// nothing here changes them once asked.
func committingExecution(ctx context.Context, id, tenant string, seqBefore int64, lastID string, evs []*eventv1.Event, ct *timestamppb.Timestamp) *orchv1.CommittingExecution {
	x := &orchv1.CommittingExecution{ExecutionId: id, Tenant: tenant, SeqBefore: seqBefore, LastEventId: lastID, Trace: traceOf(ctx, id),
		Events: make([]*eventv1.Event, 0, len(evs))}
	for k, ev := range evs {
		c := proto.Clone(ev).(*eventv1.Event)
		c.Seq, c.CommitTime = seqBefore+int64(k)+1, ct
		x.Events = append(x.Events, c)
	}
	return x
}

// head is an execution's last event as this writer committed it.
type head struct {
	seq    int64
	id     string
	tenant string
	status int16 // the execution's status after its last commit
}

// maxHeads bounds the heads a writer remembers; past it they are forgotten together.
const maxHeads = 200_000

// noteHeads remembers, after a commit, the last event of each execution the batch touched.
func (w *Writer) noteHeads(execs []string, state map[string]*execState, lastIDs map[string]string) {
	w.headsMu.Lock()
	defer w.headsMu.Unlock()
	if w.heads == nil || len(w.heads) > maxHeads {
		w.heads = map[string]head{}
	}
	for _, id := range execs {
		s := state[id]
		if !s.known || s.seq == 0 {
			delete(w.heads, id)
			continue
		}
		last := s.lastID
		if s.seq > s.lastSeq {
			last = lastIDs[id]
		}
		if last == "" || domain.IsTerminalStatus(eventv1.ExecutionStatus(s.after)) {
			delete(w.heads, id) // nothing more to decide, or not known
			continue
		}
		w.heads[id] = head{seq: s.seq, id: last, tenant: s.tenant, status: s.after}
	}
}

// earlyAsk is a DecideCommitting call made before a batch's first round trip, on the heads
// this writer last committed and assuming every event of the batch is new: the answer
// about an execution is taken only if the lock finds it so.
type earlyAsk struct {
	req *orchv1.DecideCommittingRequest
	// answer waits for the call's answer; wait calls it once, in the writer's goroutine.
	answer func() (*orchv1.DecideCommittingResponse, error)
	waited bool
	resp   *orchv1.DecideCommittingResponse
	err    error
	cancel context.CancelFunc
}

// askEarly starts the early call, or returns nil when there is nothing to ask (or the
// decider rests).
func (w *Writer) askEarly(ctx context.Context, evs []*eventv1.Event, distinct []int, execs []string, commitTime time.Time) *earlyAsk {
	if time.Now().UnixNano() < w.decideRestUntil.Load() {
		return nil
	}
	byExec := make(map[string][]*eventv1.Event, len(execs))
	for _, i := range distinct {
		byExec[evs[i].GetExecutionId()] = append(byExec[evs[i].GetExecutionId()], evs[i])
	}
	req := &orchv1.DecideCommittingRequest{}
	ct := timestamppb.New(commitTime)
	size := 0
	w.headsMu.Lock()
	for _, id := range execs {
		batch := byExec[id]
		needs, starts := false, false
		for _, ev := range batch {
			needs = needs || domain.NeedsDecision(ev.GetType())
			starts = starts || ev.GetType() == domain.EventPlaybookStarted
		}
		if !needs {
			continue
		}
		h, ok := w.heads[id]
		switch {
		case ok:
		case starts && batch[0].GetType() == domain.EventPlaybookStarted:
			h = head{tenant: batch[0].GetTenant()} // a new execution: nothing before it
		default:
			continue // asked after the lock
		}
		if slices.ContainsFunc(batch, func(ev *eventv1.Event) bool { return ev.GetTenant() != h.tenant }) {
			continue
		}
		for _, ev := range batch {
			size += proto.Size(ev)
		}
		if size > decideRequestMax && len(req.Executions) > 0 {
			break
		}
		req.Executions = append(req.Executions, committingExecution(ctx, id, h.tenant, h.seq, h.id, batch, ct))
	}
	w.headsMu.Unlock()
	if len(req.Executions) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, DecideTimeout)
	a := &earlyAsk{req: req, cancel: cancel}
	if as, ok := w.Decide.(asker); ok && size <= earlySendMax {
		// Sent now, in this goroutine: starting one to send cost a chain step about a
		// tenth of its latency in scheduling, and its answer a second hand-over.
		a.answer = as.Ask(cctx, req)
		return a
	}
	// A large request is encoded on a goroutine of its own, beside the first round trip.
	done := make(chan struct{})
	var resp *orchv1.DecideCommittingResponse
	var err error
	go func() {
		defer close(done)
		resp, err = w.Decide.DecideCommitting(cctx, req)
	}()
	a.answer = func() (*orchv1.DecideCommittingResponse, error) {
		<-done
		return resp, err
	}
	return a
}

// asker is a Decider that sends a call apart from waiting for its answer (decider.Stream).
type asker interface {
	Ask(ctx context.Context, req *orchv1.DecideCommittingRequest) (wait func() (*orchv1.DecideCommittingResponse, error))
}

// earlySendMax is the largest early request (its events' encoded size) sent in the
// writer's own goroutine; a larger one is encoded on a goroutine beside the first round
// trip.
const earlySendMax = 32 << 10

// wait returns the early call's answer, waiting for it the first time.
func (a *earlyAsk) wait() (*orchv1.DecideCommittingResponse, error) {
	if !a.waited {
		a.resp, a.err = a.answer()
		a.waited = true
	}
	return a.resp, a.err
}

// stop ends the early call (a batch that failed before waiting for it) and waits for it.
func (a *earlyAsk) stop() {
	if a == nil {
		return
	}
	a.cancel()
	_, _ = a.wait()
}

// validDecision reports whether every answered event belongs to the execution, has an id
// that is not in the batch (evs at distinct), and needs no rival outcome probed.
func validDecision(x *orchv1.CommittingExecution, answer, evs []*eventv1.Event, distinct []int) bool {
	for _, ev := range answer {
		if ev.GetExecutionId() != x.GetExecutionId() || ev.GetTenant() != x.GetTenant() || ev.GetEventId() == "" || domain.OutcomeRival(ev) != "" {
			return false
		}
	}
	ids := make(map[string]bool, len(answer))
	for _, ev := range answer {
		ids[ev.GetEventId()] = true
	}
	for _, i := range distinct {
		if evs[i].GetExecutionId() == x.GetExecutionId() && ids[evs[i].GetEventId()] {
			return false
		}
	}
	return true
}
