package writer

import (
	"context"
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
// Between the two round trips, holding the row locks of the batch's executions, the
// writer asks the orchestrator what each execution whose new events need a decision
// decides once they are committed, and commits the answer's events right after them, in
// the same transaction. A step's outcome and the next step's command then cost one commit,
// not two, and the next command is forwarded as soon as it is committed.
//
// What holds:
//   - Nothing of a decision reaches a worker or a reader before it is committed: the
//     answer is rows of this transaction, forwarded after the commit like any other.
//   - A decision is on the state the log holds: the request names the seq and the id of
//     the last event each execution had under the lock, and carries the events being
//     committed with the seqs and commit time they get here; the orchestrator refuses an
//     execution its state does not match.
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

// decideInline asks w.Decide about the executions whose committed events in the batch
// need a decision, and returns evs and bodies extended with the answered events (in
// execution order, each execution's in the order answered), marking the executions
// decided so their notices ask for nothing more.
func (w *Writer) decideInline(ctx context.Context, evs []*eventv1.Event, bodies [][]byte, distinct []int, res *Result, seqs []int64,
	execs []string, state map[string]*execState, commitTime time.Time) ([]*eventv1.Event, [][]byte) {
	if time.Now().UnixNano() < w.decideRestUntil.Load() {
		return evs, bodies
	}
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
	req := &orchv1.DecideCommittingRequest{}
	ct := timestamppb.New(commitTime)
	size := 0
	for _, id := range execs {
		s := state[id]
		if !needs[id] || !s.known || domain.IsTerminalStatus(eventv1.ExecutionStatus(s.after)) {
			continue
		}
		for _, ev := range committing[id] {
			size += proto.Size(ev)
		}
		if size > decideRequestMax && len(req.Executions) > 0 {
			break // the rest are decided after their notices
		}
		req.Executions = append(req.Executions, &orchv1.CommittingExecution{ExecutionId: id, Tenant: s.tenant, SeqBefore: s.lastSeq, LastEventId: s.lastID, Events: committing[id],
			Trace: traceOf(ctx, id)})
	}
	if len(req.Executions) == 0 {
		return evs, bodies
	}
	// The events travel with the seqs and commit time this transaction gives them; they
	// are cleared again before the insert, which stores the events as published.
	idx := map[*eventv1.Event]int{}
	for _, i := range distinct {
		if res.Outcomes[i] == Committed {
			idx[evs[i]] = i
		}
	}
	for _, x := range req.Executions {
		for _, ev := range x.Events {
			ev.Seq, ev.CommitTime = seqs[idx[ev]], ct
		}
	}
	cctx, cancel := context.WithTimeout(ctx, DecideTimeout)
	resp, err := w.Decide.DecideCommitting(cctx, req)
	cancel()
	for _, x := range req.Executions {
		for _, ev := range x.Events {
			ev.Seq, ev.CommitTime = 0, nil
		}
	}
	if err != nil || len(resp.GetDecisions()) != len(req.Executions) {
		w.decideRestUntil.Store(time.Now().Add(decideRest).UnixNano())
		return evs, bodies
	}
	if bodies == nil {
		bodies = make([][]byte, len(evs))
	}
	// An answered event already in the batch means the answer was not on this state.
	inBatch := make(map[[2]string]bool, len(distinct))
	for _, i := range distinct {
		inBatch[[2]string{evs[i].GetExecutionId(), evs[i].GetEventId()}] = true
	}
	for k, d := range resp.GetDecisions() {
		x := req.Executions[k]
		if !d.GetDecided() || d.GetExecutionId() != x.GetExecutionId() || !validDecision(x, d.GetEvents(), inBatch) {
			continue
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
				break
			}
			evs, bodies = append(evs, ev), append(bodies, b)
		}
	}
	return evs, bodies
}

// validDecision reports whether every answered event belongs to the execution, has an id
// that is not in the batch, and needs no rival outcome probed.
func validDecision(x *orchv1.CommittingExecution, evs []*eventv1.Event, inBatch map[[2]string]bool) bool {
	for _, ev := range evs {
		if ev.GetExecutionId() != x.GetExecutionId() || ev.GetTenant() != x.GetTenant() || ev.GetEventId() == "" ||
			domain.OutcomeRival(ev) != "" || inBatch[[2]string{ev.GetExecutionId(), ev.GetEventId()}] {
			return false
		}
	}
	return true
}
