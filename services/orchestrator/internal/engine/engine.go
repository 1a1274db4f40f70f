// Package engine is the orchestrator's decision loop: it consumes commit notices, brings
// the execution's state to the committed seq (its cached state advanced by the events the
// notice carries, or read from the statebuilder on a miss or a gap), decides, and
// publishes the resulting events. Executions are sharded over a fixed set of goroutines, so one
// execution is decided by one goroutine at a time inside a replica.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/eventbus"
	"github.com/noetl/noetl/internal/failpoint"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/platform/telemetry"
	"github.com/noetl/noetl/services/orchestrator/internal/catalog"
	"github.com/noetl/noetl/services/orchestrator/internal/decide"
)

// Config tunes the engine.
type Config struct {
	// Partitions is the number of execution partitions.
	Partitions int
	// Shards is the number of decision goroutines.
	Shards int
	// Consumer is the durable name of the commit-notice consumer.
	Consumer string
	// Results stores render contexts too large to travel in a command; nil keeps them
	// inline (a decision over the message limit then fails the execution).
	Results rsv1.ResultStoreServiceClient
	// ReconcileEvery is how often the reconciler looks for stalled executions.
	ReconcileEvery time.Duration
	// StaleAfter is how long an execution's log may stay still before it is re-driven.
	StaleAfter time.Duration
	// Tracer makes the decision spans (nil: none).
	Tracer trace.Tracer
	// LagPoll is how often the notice consumer's lag is read (zero: natsx.DefaultLagPoll).
	LagPoll time.Duration
	// Limits bound every execution's step entries and events (limits.go; zero: decide's
	// defaults).
	Limits Limits
}

// Engine runs decisions.
type Engine struct {
	cfg     Config
	log     *slog.Logger
	js      jetstream.JetStream
	state   sbv1.StateServiceClient
	catalog *catalog.Catalog

	decisions *prometheus.CounterVec
	latency   prometheus.Histogram
	fired     prometheus.Counter
	redrives  *prometheus.CounterVec
	reg       prometheus.Registerer

	// wake tells the timer loop the due time of a timer this replica scheduled.
	wake chan time.Time
	// collections caches loop collections held by reference (collections.go).
	collections *collectionCache
	// loopResults caches the references of assembled lists of loop results, and
	// loopBuffer bounds the results held while assembling one (loopresults.go).
	loopResults refCache
	loopBuffer  int64

	// shards are the running decision goroutines' inboxes (nil when not running), for
	// the decisions taken inside a commit (inline.go).
	shardsMu sync.RWMutex
	shards   []*shard
	inline   *prometheus.CounterVec
	finals   *prometheus.CounterVec
}

// New builds an engine.
func New(cfg Config, log *slog.Logger, js jetstream.JetStream, state sbv1.StateServiceClient, cat *catalog.Catalog, reg prometheus.Registerer) *Engine {
	if cfg.Shards <= 0 {
		cfg.Shards = 16
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "orchestrator"
	}
	if cfg.ReconcileEvery <= 0 {
		cfg.ReconcileEvery = 10 * time.Second
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 30 * time.Second
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider().Tracer("")
	}
	e := &Engine{cfg: cfg, log: log, js: js, state: state, catalog: cat, reg: reg,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "noetl_orchestrator_decisions_total", Help: "Decisions taken, by outcome."}, []string{"outcome"}),
		latency:   prometheus.NewHistogram(prometheus.HistogramOpts{Name: "noetl_orchestrator_decision_seconds", Help: "Time from notice to published decision.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
	}
	e.fired = prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_orchestrator_timers_fired_total", Help: "Durable timers fired."})
	e.wake = make(chan time.Time, 64)
	e.collections = newCollectionCache(collectionCacheBytes)
	e.loopBuffer = loopResultsBufferBytes
	e.redrives = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "noetl_orchestrator_reconcile_redrives_total", Help: "Stalled executions re-driven, by what was done."}, []string{"action"})
	e.inline = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "noetl_orchestrator_inline_decisions_total", Help: "Executions the materializer asked to decide inside a commit, by answer (decided, or why not)."}, []string{"answer"})
	e.finals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "noetl_orchestrator_final_states_total", Help: "Waits that asked for the state an execution ended in, by answer: held (the engine's, no read of the log) or not_held (read from the statebuilder)."}, []string{"answer"})
	reg.MustRegister(e.decisions, e.latency, e.fired, e.redrives, e.inline, e.finals)
	return e
}

type shard struct {
	in      chan notice
	decided map[string]int64
	// states caches the execution states this shard's goroutine decided on (statecache.go).
	states *stateCache
	// large is the last decision taken inside a commit and answered too large to ride in
	// it, for the notice path to publish instead of taking it again.
	large *largeDecision
	// ended keeps the states of executions that just ended, for their waiters (final.go).
	ended endedKeep
}

// largeDecision is a decision's events and the state they were decided on: an execution's
// seq and last event id, and the commit time its last events were speculated at (a
// decision is a function of the state, and a retried commit gives its events another
// time).
type largeDecision struct {
	id         string
	seq        int64
	lastID     string
	commitTime *timestamppb.Timestamp
	events     []*eventv1.Event
}

// keepLargeFor forgets the kept decision unless notice n carries the events it was decided
// after, as committed: the same commit time.
func (s *shard) keepLargeFor(n *eventv1.CommitNotice) {
	l := s.large
	if l == nil || l.id != n.GetExecutionId() {
		return
	}
	evs := n.GetEvents()
	if len(evs) == 0 || !proto.Equal(evs[len(evs)-1].GetCommitTime(), l.commitTime) {
		s.large = nil
	}
}

// takeLarge returns the kept decision on st, if it is st's, and forgets any kept one.
func (s *shard) takeLarge(st *sbv1.ExecutionState) []*eventv1.Event {
	if s == nil {
		return nil
	}
	l := s.large
	s.large = nil
	if l == nil || l.id != st.GetExecutionId() || l.seq != st.GetSeq() || l.lastID != st.GetLastEventId() {
		return nil
	}
	return l.events
}

// stateCacheBytes bounds the states the shards of one engine cache, together.
const stateCacheBytes = 256 << 20

// Run consumes commit notices until ctx ends.
func (e *Engine) Run(ctx context.Context) error {
	var cons jetstream.Consumer
	err := natsx.Declare(ctx, func(ctx context.Context) (err error) {
		cons, err = e.js.CreateOrUpdateConsumer(ctx, natsx.StreamCommitted, jetstream.ConsumerConfig{
			Durable:       e.cfg.Consumer,
			FilterSubject: natsx.CommittedAll,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       30 * time.Second,
			MaxAckPending: 4096,
			DeliverPolicy: jetstream.DeliverNewPolicy,
		})
		return err
	})
	if err != nil {
		return err
	}
	// The backlog is read on its own goroutine, so it is reported while the shards are stuck.
	lag := natsx.NewLagMonitor(e.js, natsx.StreamCommitted, e.cfg.Consumer, "", e.cfg.LagPoll, e.reg, e.log)
	lagCtx, stopLag := context.WithCancel(ctx)
	lagDone := make(chan struct{})
	go func() {
		defer close(lagDone)
		_ = lag.Run(lagCtx)
	}()
	defer func() {
		stopLag()
		<-lagDone
	}()
	shards := make([]*shard, e.cfg.Shards)
	var wg sync.WaitGroup
	for i := range shards {
		shards[i] = &shard{in: make(chan notice, 256), decided: map[string]int64{}, states: newStateCache(stateCacheBytes / int64(len(shards)))}
		wg.Add(1)
		go func(s *shard) {
			defer wg.Done()
			for n := range s.in {
				switch {
				case n.inline != nil:
					n.inline.reply <- e.decideInline(ctx, s, n.inline)
				case n.final != nil:
					n.final.reply <- s.final(n.final)
				default:
					e.handle(ctx, s, n.msg, n.notice)
				}
			}
		}(shards[i])
	}
	e.setShards(shards)
	defer func() {
		e.setShards(nil) // no inline request is queued from here on
		for _, s := range shards {
			close(s.in)
		}
		wg.Wait()
	}()
	it, err := cons.Messages(jetstream.PullMaxMessages(1024))
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		it.Stop()
	}()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			e.log.Warn("commit notice consumer", slog.String("error", err.Error()))
			continue
		}
		n := &eventv1.CommitNotice{}
		if err := proto.Unmarshal(m.Data(), n); err != nil {
			e.log.Error("bad commit notice", slog.String("error", err.Error()))
			_ = m.Term()
			continue
		}
		shards[shardOf(n.GetExecutionId(), len(shards))].in <- notice{msg: m, notice: n}
	}
}

// notice is a commit notice as received, decoded once, or (inline set) a request to decide
// inside a commit (inline.go), or (final set) a waiter's request for the state an
// execution ended in (final.go).
type notice struct {
	msg    jetstream.Msg
	notice *eventv1.CommitNotice
	inline *inlineRequest
	final  *finalRequest
}

// shardOf is the shard an execution is decided on.
func shardOf(executionID string, shards int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(executionID))
	return int(h.Sum32()) % shards
}

func (e *Engine) handle(ctx context.Context, s *shard, m jetstream.Msg, n *eventv1.CommitNotice) {
	id := n.GetExecutionId()
	if n.GetTerminal() {
		delete(s.decided, id)
		s.keepEnded(n, int64(len(m.Data()))) // for its waiters a while (final.go)
		s.states.drop(id)
		_ = m.Ack()
		return
	}
	// Every notice's events advance the cached state, the decision's own output too, so
	// the next decision starts from the state at this seq without a read.
	s.states.applyCarried(n, int64(len(m.Data())))
	if n.GetNeedsDecision() && s.states.speculative(id) {
		// The commit went ahead without the decision this state speculated (inline.go).
		s.states.drop(id)
	}
	if !n.GetNeedsDecision() {
		_ = m.Ack() // only this service's own decisions were committed
		return
	}
	if s.decided[id] >= n.GetSeq() {
		_ = m.Ack() // a newer state was already decided on
		return
	}
	start := time.Now()
	// The decision continues the trace of the commit that caused it.
	ctx, span := e.cfg.Tracer.Start(natsx.Extract(ctx, m.Headers()), "decide", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(telemetry.AttrTenant.String(n.GetTenant()), telemetry.AttrExecutionID.String(id), telemetry.AttrSeq.Int64(n.GetSeq())))
	defer span.End()
	s.keepLargeFor(n)
	seq, err := e.drive(ctx, s, id, n.GetSeq())
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		telemetry.ErrorStatus(span, err)
		e.decisions.WithLabelValues("error").Inc()
		e.log.Warn("decision failed, will retry", slog.String("execution_id", id), slog.Int64("seq", n.GetSeq()), slog.String("error", err.Error()))
		_ = m.NakWithDelay(200 * time.Millisecond)
		return
	}
	if err := failpoint.Eval(failpoint.OrchestratorAfterPublish); err != nil {
		_ = m.NakWithDelay(100 * time.Millisecond)
		return
	}
	if seq < 0 {
		delete(s.decided, id)
		s.states.drop(id)
	} else {
		if len(s.decided) > 100_000 {
			clear(s.decided)
		}
		s.decided[id] = seq
	}
	e.latency.Observe(time.Since(start).Seconds())
	_ = m.Ack()
}

// Drive reads the state of an execution at or after minSeq, decides, and publishes the
// decision. It returns the seq decided on, or -1 for a terminal execution.
func (e *Engine) Drive(ctx context.Context, executionID string, minSeq int64) (int64, error) {
	return e.drive(ctx, nil, executionID, minSeq)
}

// state returns the execution's state at or after minSeq: a shard's cached state advanced
// by the events after it (one small read), or a full state read.
func (e *Engine) stateOf(ctx context.Context, s *shard, id string, minSeq int64) (*sbv1.ExecutionState, error) {
	if s != nil {
		if st := s.states.get(id); st != nil {
			if st.GetSeq() >= minSeq {
				return st, nil // advanced by the notices' events
			}
			if err := e.advance(ctx, st, minSeq); err == nil {
				return st, nil
			}
			s.states.drop(id) // a gap or an error: fall back to a full read
		}
	}
	resp, err := e.state.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: id, MinSeq: minSeq})
	if err != nil {
		return nil, err
	}
	st := resp.GetState()
	if s != nil {
		s.states.put(st)
	}
	return st, nil
}

// advance folds the committed events after st's seq into st, up to at least minSeq.
func (e *Engine) advance(ctx context.Context, st *sbv1.ExecutionState, minSeq int64) error {
	for {
		resp, err := e.state.ListEvents(ctx, &sbv1.ListEventsRequest{ExecutionId: st.GetExecutionId(), AfterSeq: st.GetSeq(), PageSize: 1000})
		if err != nil {
			return err
		}
		for _, ev := range resp.GetEvents() {
			if err := domain.Apply(st, ev); err != nil {
				return err
			}
		}
		if resp.GetNextAfterSeq() == 0 {
			break
		}
	}
	if st.GetSeq() < minSeq {
		return fmt.Errorf("execution %s: events end at seq %d, before %d", st.GetExecutionId(), st.GetSeq(), minSeq)
	}
	return nil
}

func (e *Engine) drive(ctx context.Context, s *shard, executionID string, minSeq int64) (int64, error) {
	st, err := e.stateOf(ctx, s, executionID, minSeq)
	if err != nil {
		return 0, err
	}
	if domain.IsTerminalStatus(st.GetStatus()) {
		e.decisions.WithLabelValues("terminal").Inc()
		return -1, nil
	}
	events := s.takeLarge(st)
	if events == nil {
		if events, err = e.decideOn(ctx, st, activeOf(s, st)); err != nil {
			return 0, err
		}
	}
	if len(events) == 0 {
		e.decisions.WithLabelValues("wait").Inc()
		return st.GetSeq(), nil
	}
	if err := eventbus.Publish(ctx, e.js, e.cfg.Partitions, events); err != nil {
		if !errors.Is(err, natsx.ErrMessageTooLarge) {
			return 0, err
		}
		// A decision that can never be published (an event over the message limit) would
		// be retried forever: fail the execution instead, naming the cause.
		failed := &eventv1.Event{
			EventId:           domain.EventID(domain.ExecutionCause(st.GetExecutionId()), domain.EventPlaybookFailed),
			ExecutionId:       st.GetExecutionId(),
			Tenant:            st.GetTenant(),
			ParentExecutionId: st.GetParentExecutionId(),
			Type:              domain.EventPlaybookFailed,
			CauseEventId:      st.GetLastEventId(),
			Error:             &eventv1.ErrorInfo{Code: "message_too_large", Message: "the next decision cannot be published: " + err.Error()},
			Producer:          "orchestrator",
		}
		if err := eventbus.Publish(ctx, e.js, e.cfg.Partitions, []*eventv1.Event{failed}); err != nil {
			return 0, err
		}
		e.decisions.WithLabelValues("too_large").Inc()
		return st.GetSeq(), nil
	}
	e.wakeFor(events)
	e.decisions.WithLabelValues("publish").Inc()
	return st.GetSeq(), nil
}

// decideOn decides on st, whose active steps are active (activeOf): it loads what the
// decision needs besides the state (the compiled playbook, loop collections, loop results
// and claim rows held by reference), decides, and moves large collections and render
// contexts to the resultstore. It publishes nothing.
func (e *Engine) decideOn(ctx context.Context, st *sbv1.ExecutionState, active *decide.Active) ([]*eventv1.Event, error) {
	cp, err := e.catalog.Compiled(ctx, st.GetTenant(), st.GetPlaybookPath(), st.GetPlaybookVersion())
	if err != nil {
		if errors.Is(err, catalog.ErrNotFound) {
			return nil, status.Errorf(codes.FailedPrecondition, "playbook %s v%d not in catalog", st.GetPlaybookPath(), st.GetPlaybookVersion())
		}
		return nil, err
	}
	in, err := e.collectionsFor(ctx, st.GetTenant(), active.NeededCollections())
	if err != nil {
		return nil, err
	}
	if in.LoopResults, err = e.loopResultsFor(ctx, st, active.NeededLoopResults()); err != nil {
		return nil, err
	}
	if in.ClaimRows, err = e.claimRowsFor(ctx, st.GetTenant(), active.NeededClaimRows()); err != nil { // cursor.go
		return nil, err
	}
	in.Limits = e.cfg.Limits.For(st.GetTenant())
	in.Active = active
	events, err := decide.DecideWith(cp, st, in)
	if err != nil {
		return nil, err
	}
	if err := failpoint.Eval(failpoint.OrchestratorAfterDecide); err != nil {
		return nil, err
	}
	if len(events) == 0 {
		return nil, nil
	}
	annotate(ctx, events)
	if err := e.offloadCollections(ctx, events); err != nil {
		return nil, err
	}
	if err := e.offloadContexts(ctx, events); err != nil {
		return nil, err
	}
	return events, nil
}

// wakeFor tells the timer loop the due times of the timers events schedule.
func (e *Engine) wakeFor(events []*eventv1.Event) {
	for _, ev := range events {
		if ev.GetType() != domain.EventTimerScheduled {
			continue
		}
		var p domain.TimerPayload
		if json.Unmarshal(ev.GetPayloadJson(), &p) == nil {
			select {
			case e.wake <- p.DueAt:
			default: // the loop re-checks within a second anyway
			}
		}
	}
}

// annotate names on the current span the step the decision moves to (the last step
// entered or issued) and how many events it publishes.
func annotate(ctx context.Context, events []*eventv1.Event) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(telemetry.AttrEvents.Int(len(events)))
	for i := len(events) - 1; i >= 0; i-- {
		if ev := events[i]; ev.GetStep() != "" {
			span.SetAttributes(telemetry.AttrStep.String(ev.GetStep()), telemetry.AttrAttempt.Int(int(ev.GetAttempt())))
			return
		}
	}
}

// RunTimers fires durable timers: it asks the statebuilder for due timers, publishes a
// timer.fired event for each (ids are deterministic, so replicas firing the same timer
// produce one event), then sleeps until the next due time. It re-checks at least every
// second, since timers may be scheduled by other replicas or before a restart.
func (e *Engine) RunTimers(ctx context.Context) error {
	const limit = 500
	for {
		wait := time.Second
		resp, err := e.state.ListDueTimers(ctx, &sbv1.ListDueTimersRequest{Limit: limit})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			e.log.Warn("list due timers", slog.String("error", err.Error()))
		} else {
			for _, t := range resp.GetTimers() {
				payload, _ := json.Marshal(domain.TimerPayload{TimerID: t.GetTimerId(), DueAt: t.GetDueTime().AsTime()})
				ev := &eventv1.Event{
					EventId: domain.EventID(t.GetTimerId(), domain.EventTimerFired), ExecutionId: t.GetExecutionId(), Tenant: t.GetTenant(),
					Type: domain.EventTimerFired, Step: t.GetStep(), PayloadJson: payload, Producer: "orchestrator",
				}
				if err := eventbus.Publish(ctx, e.js, e.cfg.Partitions, []*eventv1.Event{ev}); err != nil {
					e.log.Warn("fire timer", slog.String("execution_id", t.GetExecutionId()), slog.String("error", err.Error()))
					continue
				}
				e.fired.Inc()
			}
			if len(resp.GetTimers()) == limit {
				wait = 0
			} else if next := resp.GetNextDueTime(); next != nil {
				wait = min(wait, max(time.Until(next.AsTime()), time.Millisecond))
			}
		}
		if wait == 0 {
			continue
		}
		deadline := time.Now().Add(wait)
		t := time.NewTimer(wait)
	sleep:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case due := <-e.wake:
				if due.Before(deadline) {
					deadline = due
					t.Reset(max(time.Until(due), time.Millisecond))
				}
			case <-t.C:
				break sleep
			}
		}
	}
}

// inlineContextMax is the largest render context a command carries inline; a larger one is
// stored in the resultstore and the command carries its reference.
const inlineContextMax = 96 << 10

// offloadContexts moves the render contexts of large commands to the resultstore. The id
// derives from the command, so re-deciding writes the same entry again.
func (e *Engine) offloadContexts(ctx context.Context, events []*eventv1.Event) error {
	if e.cfg.Results == nil {
		return nil
	}
	for _, ev := range events {
		for _, cmd := range domain.IssuedCommands(ev) {
			if len(cmd.GetContextJson()) <= inlineContextMax {
				continue
			}
			ref, err := e.putResult(ctx, cmd.GetTenant(), cmd.GetExecutionId(), cmd.GetStep(), cmd.GetCommandId()+"-context", cmd.GetContextJson())
			if err != nil {
				return fmt.Errorf("store context of %s: %w", cmd.GetCommandId(), err)
			}
			cmd.ContextRef = ref
			cmd.ContextJson = nil
		}
	}
	return nil
}
