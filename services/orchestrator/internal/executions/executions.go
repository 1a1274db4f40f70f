// Package executions is the execution half of the orchestrator's OrchestratorService:
// starting, rerunning, cancelling and waiting for executions. Each is a command to the log
// (playbook.started, playbook.cancelled, published to the events stream for the
// materializer to commit) or a read of the log's state (the statebuilder); the package
// holds no state of its own.
//
// Invariants: a start answers only once its playbook.started is committed (it subscribes to
// the commit notice before publishing); a start with an idempotency key has a UUIDv5 id of
// tenant and key, so a retried start names the same execution and the log keeps one copy;
// a cancelled execution's running children are cancelled with it; system/ playbooks are
// started and rerun only by the system role.
package executions

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/eventbus"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/services/orchestrator/internal/catalog"
	"github.com/noetl/noetl/services/orchestrator/internal/notice"
)

// Service implements the execution RPCs of OrchestratorService (StartExecution,
// RerunExecution, CancelExecution, WaitExecution).
type Service struct {
	Catalog    *catalog.Catalog
	NC         *nats.Conn
	JS         jetstream.JetStream
	State      sbv1.StateServiceClient
	Partitions int
	// StartTimeout bounds how long a start waits for playbook.started to commit.
	StartTimeout time.Duration
	// Waiters bounds concurrent WaitExecution calls.
	Waiters chan struct{}
	// Finals, when set, is asked for an execution's final state before the statebuilder
	// (the engine's, which holds the states it decided an end on).
	Finals FinalStates
}

// FinalStates hands out the state an execution ended in without a read of the log.
type FinalStates interface {
	// FinalState returns the state of the execution of tenant at its terminal event, the
	// event of id lastID at seq, or nil when it does not hold exactly that state.
	FinalState(ctx context.Context, id, tenant string, seq int64, lastID string) *sbv1.ExecutionState
}

// MaxWorkloadBytes is the public limit on an execution's workload as JSON, which the
// gateway also holds a start request's own workload to (domain.MaxWorkloadBytes).
const MaxWorkloadBytes = domain.MaxWorkloadBytes

var idempotencyNS = uuid.MustParse("6f1c3f36-58b4-4c1e-9a43-6e6f65746c21")

// StartExecution publishes playbook.started and waits until it is committed.
func (s *Service) StartExecution(ctx context.Context, req *orchv1.StartExecutionRequest) (*orchv1.StartExecutionResponse, error) {
	tenant := domain.TenantOrDefault(req.GetTenant())
	req.Path = playbook.CleanPath(req.GetPath())
	if req.GetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "path: required")
	}
	if domain.PoolFor(req.GetPath()) == "system" && !auth.FromContext(ctx).Can(auth.PermSystem) {
		return nil, status.Errorf(codes.PermissionDenied, "path: starting system/ playbooks requires the system role")
	}
	// A start with an idempotency key looks up the execution the key names while the
	// playbook is looked up.
	var prior *priorStart
	if req.GetIdempotencyKey() != "" {
		prior = s.lookupPrior(ctx, tenant, req.GetIdempotencyKey())
		defer prior.stop()
	}
	cp, err := s.Catalog.Compiled(ctx, tenant, req.GetPath(), req.GetVersion())
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "playbook %q (version %d) not found", req.GetPath(), req.GetVersion())
	}
	if err != nil {
		return nil, err
	}
	var over map[string]any
	if len(req.GetWorkloadJson()) > 0 {
		if err := json.Unmarshal(req.GetWorkloadJson(), &over); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "workload: not a JSON object: %v", err)
		}
	}
	workload := domain.MergeWorkload(cp.Playbook.Workload, over)
	// Refused before anything is published, naming the public limit.
	if b, err := json.Marshal(workload); err == nil && len(b) > MaxWorkloadBytes {
		return nil, status.Errorf(codes.ResourceExhausted, "workload: %d bytes (the playbook's workload merged with the request's, as JSON) exceeds the limit of %d bytes", len(b), MaxWorkloadBytes)
	}

	if err := domain.ValidateLabels("labels", req.GetLabels()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	timeout := cp.Playbook.Timeout
	if t := req.GetTimeout(); t != nil {
		if timeout = t.AsDuration(); !t.IsValid() || timeout <= 0 || timeout > playbook.MaxExecutionTimeout {
			return nil, status.Errorf(codes.InvalidArgument, "timeout: must be positive and at most %s", playbook.MaxExecutionTimeout)
		}
	}
	payload, err := json.Marshal(domain.StartedPayload{Path: cp.Path, Version: cp.Version, Workload: workload, Labels: req.GetLabels(), TimeoutSeconds: timeout.Seconds()})
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "workload: %v", err)
	}
	wait, err := waitOf(req.GetWait())
	if err != nil {
		return nil, err
	}
	wait, release := s.reserveWait(wait)
	defer release()
	id, existing, watch, err := s.publishStartWatched(ctx, tenant, req.GetIdempotencyKey(), req.GetParentExecutionId(), payload, func() error {
		// The message of the publish error names the internal subject: not for the caller.
		return status.Errorf(codes.ResourceExhausted, "workload: the start is too large to record; keep the workload under %d bytes of JSON", MaxWorkloadBytes)
	}, prior, wait > 0)
	if err != nil {
		return nil, err
	}
	out := &orchv1.StartExecutionResponse{ExecutionId: id, Version: cp.Version, Existing: existing}
	if wait > 0 {
		out.State = s.awaitStarted(ctx, id, tenant, watch, wait)
	}
	return out, nil
}

// reserveWait takes one of the orchestrator's waits (Waiters) for a start that asks to
// wait up to wait. It returns the wait to keep, zero when none was asked or none is free
// (the start then answers alone, and its caller waits with WaitExecution), and what gives
// the wait back.
func (s *Service) reserveWait(wait time.Duration) (time.Duration, func()) {
	if wait <= 0 {
		return 0, func() {}
	}
	select {
	case s.Waiters <- struct{}{}:
		return wait, func() { <-s.Waiters }
	default:
		return 0, func() {}
	}
}

// awaitStarted waits up to wait for the end of an execution a start just published and
// returns its final state, or nil when it did not end in time or the wait failed: the
// start stands whatever the wait meets. watch is the subscription the start made before
// publishing (publishStartWatched), closed here; no notice can have passed it, so the end
// needs no read of the head, and what its notices said so far counts (the start's own
// Next may have folded the end already). Without it (an execution the key named, or a
// start whose notice was missed) the wait is WaitExecution's.
func (s *Service) awaitStarted(ctx context.Context, id, tenant string, watch *notice.Watch, wait time.Duration) *sbv1.ExecutionState {
	var w *orchv1.WaitExecutionResponse
	var err error
	if watch != nil {
		defer watch.Close()
		seq, terminal := watch.Known()
		w, err = s.waitOn(ctx, watch, id, tenant, &orchv1.WaitExecutionResponse{Seq: seq, Terminal: terminal}, wait)
	} else {
		w, err = s.wait(ctx, id, tenant, wait)
	}
	if err != nil || !w.GetTerminal() {
		return nil
	}
	return w.GetState()
}

// maxWait bounds a wait for an execution's end (WaitExecution, or a start that waits).
const maxWait = 5 * time.Minute

// waitOf is a request's wait: zero when unset, at most maxWait, an error when negative or
// malformed.
func waitOf(d *durationpb.Duration) (time.Duration, error) {
	if err := domain.CheckDuration("wait", d); err != nil {
		return 0, status.Error(codes.InvalidArgument, err.Error())
	}
	return min(d.AsDuration(), maxWait), nil
}

// publishStart picks the id of a new execution (a UUIDv7, or with an idempotency key a
// UUIDv5 of tenant and key, so a retried start finds the same execution), publishes its
// playbook.started with payload and waits until it is committed. tooLarge is the error
// for a start larger than a message may be. existing reports that the idempotency key
// named an execution already logged (or already in the stream), which this call did not
// start. prior, when not nil, is the look-up of that execution the caller started
// (lookupPrior); publishStart starts it itself otherwise.
func (s *Service) publishStart(ctx context.Context, tenant, idempotencyKey, parent string, payload []byte, tooLarge func() error, prior *priorStart) (id string, existing bool, err error) {
	id, existing, _, err = s.publishStartWatched(ctx, tenant, idempotencyKey, parent, payload, tooLarge, prior, false)
	return id, existing, err
}

// publishStartWatched is publishStart, which with keep also returns the subscription to
// the execution's notices that it made before publishing, for the caller to go on
// watching and to close, when it started the execution (nil when the key named an
// earlier one).
func (s *Service) publishStartWatched(ctx context.Context, tenant, idempotencyKey, parent string, payload []byte, tooLarge func() error, prior *priorStart, keep bool) (id string, existing bool, kept *notice.Watch, err error) {
	if idempotencyKey != "" {
		if prior == nil {
			prior = s.lookupPrior(ctx, tenant, idempotencyKey)
		}
		id = prior.id
	} else {
		u, err := uuid.NewV7()
		if err != nil {
			return "", false, nil, err
		}
		id = u.String()
	}
	ev := &eventv1.Event{
		EventId:           domain.EventID(domain.ExecutionCause(id), domain.EventPlaybookStarted),
		ExecutionId:       id,
		Tenant:            tenant,
		Type:              domain.EventPlaybookStarted,
		ParentExecutionId: parent,
		PayloadJson:       payload,
		Producer:          "orchestrator",
		ProduceTime:       timestamppb.Now(),
	}
	// Subscribe before publishing so the commit notice cannot be missed (its flush overlaps
	// the look-up of a prior start).
	watch, err := notice.SubscribeEnd(s.NC, id)
	if err != nil {
		prior.stop()
		return "", false, nil, status.Errorf(codes.Unavailable, "nats: %v", err)
	}
	defer func() {
		if kept == nil {
			watch.Close()
		}
	}()
	if found, err := prior.wait(); err != nil {
		return "", false, nil, err
	} else if found {
		return id, true, nil, nil
	}
	duplicate, err := eventbus.PublishNew(ctx, s.JS, s.Partitions, ev)
	if err != nil {
		if errors.Is(err, natsx.ErrMessageTooLarge) {
			return "", false, nil, tooLarge()
		}
		return "", false, nil, status.Errorf(codes.Unavailable, "publish start: %v", err)
	}
	if duplicate {
		// The same start (same idempotency key) is already in the stream, durably: it is
		// committed, or will be, once; no notice follows a copy the stream dropped.
		return id, true, nil, nil
	}
	timeout := s.StartTimeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, _, err := watch.Next(wctx); err != nil {
		// Notices are core messages to this subscription, which can miss one: the log
		// has the last word.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if _, herr := s.head(hctx, id, tenant); herr == nil {
			return id, false, nil, nil // the start's notice was missed: a waiter reads the head
		}
		return "", false, nil, status.Errorf(codes.Unavailable, "execution %s was published but its start was not committed within %s", id, timeout)
	}
	if keep {
		kept = watch
	}
	return id, false, kept, nil
}

// priorStart is the look-up of the execution an idempotency key names, started as soon as
// the start is asked for so it overlaps the start's other work (the playbook's look-up, the
// notice subscription). A nil *priorStart is a start without a key.
type priorStart struct {
	id     string
	done   chan struct{}
	found  bool
	err    error
	cancel context.CancelFunc
}

// lookupPrior starts the look-up of the execution the idempotency key names: the id is a
// UUIDv5 of tenant and key, so a retried start finds the same execution. A start already
// logged answers at once. When the statebuilder cannot tell, the start is published
// anyway: its playbook.started has the id of the first one, so the materializer keeps one
// copy and notifies the commit either way. Its existence is all the start needs: the head,
// not the state.
func (s *Service) lookupPrior(ctx context.Context, tenant, idempotencyKey string) *priorStart {
	p := &priorStart{id: uuid.NewSHA1(idempotencyNS, []byte(tenant+"\x00"+idempotencyKey)).String(), done: make(chan struct{})}
	var sctx context.Context
	sctx, p.cancel = context.WithTimeout(ctx, 2*time.Second) // a paused statebuilder is one that cannot tell
	go func() {
		defer close(p.done)
		_, err := s.head(sctx, p.id, tenant)
		switch code := status.Code(err); {
		case err == nil:
			p.found = true
		case code == codes.NotFound, code == codes.Unavailable, code == codes.DeadlineExceeded:
		default:
			p.err = err
		}
	}()
	return p
}

// wait returns whether the key's execution is already logged, or the look-up's error.
func (p *priorStart) wait() (found bool, err error) {
	if p == nil {
		return false, nil
	}
	<-p.done
	p.cancel()
	return p.found, p.err
}

// stop abandons the look-up (a start that failed before it needed it) and waits for it.
func (p *priorStart) stop() {
	if p != nil {
		p.cancel()
		<-p.done
	}
}

// CancelExecution publishes playbook.cancelled for a running execution.
func (s *Service) CancelExecution(ctx context.Context, req *orchv1.CancelExecutionRequest) (*orchv1.CancelExecutionResponse, error) {
	if req.GetExecutionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "execution_id: required")
	}
	resp, err := s.State.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: req.GetExecutionId(), Tenant: domain.TenantOrDefault(req.GetTenant())})
	if err != nil {
		return nil, err
	}
	st := resp.GetState()
	if domain.IsTerminalStatus(st.GetStatus()) {
		return nil, status.Errorf(codes.FailedPrecondition, "execution %s is already %s", st.GetExecutionId(), st.GetStatus())
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "cancelled by request"
	}
	payload, _ := json.Marshal(domain.TerminalPayload{Reason: reason})
	ev := &eventv1.Event{
		EventId:           domain.EventID(domain.ExecutionCause(st.GetExecutionId()), domain.EventPlaybookCancelled),
		ExecutionId:       st.GetExecutionId(),
		Tenant:            st.GetTenant(),
		ParentExecutionId: st.GetParentExecutionId(),
		Type:              domain.EventPlaybookCancelled,
		CauseEventId:      st.GetLastEventId(),
		PayloadJson:       payload,
		Error:             &eventv1.ErrorInfo{Code: "cancelled", Message: reason},
		Producer:          "orchestrator",
		ProduceTime:       timestamppb.Now(),
	}
	if err := eventbus.Publish(ctx, s.JS, s.Partitions, []*eventv1.Event{ev}); err != nil {
		return nil, status.Errorf(codes.Unavailable, "publish cancel: %v", err)
	}
	s.cancelChildren(ctx, st.GetTenant(), st.GetExecutionId(), reason)
	return &orchv1.CancelExecutionResponse{}, nil
}

// WaitExecution waits for an execution's terminal commit notice. It subscribes before
// reading the execution's head (its row: tenant, status, last seq), so a terminal commit
// between the two cannot be missed; the state is read once, when the execution is
// terminal, at its terminal seq. A wait that times out (or whose caller leaves) reports
// the seq it knows, with no state.
func (s *Service) WaitExecution(ctx context.Context, req *orchv1.WaitExecutionRequest) (*orchv1.WaitExecutionResponse, error) {
	if req.GetExecutionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "execution_id: required")
	}
	select {
	case s.Waiters <- struct{}{}:
		defer func() { <-s.Waiters }()
	default:
		return nil, status.Error(codes.ResourceExhausted, "too many concurrent waits; retry later")
	}
	timeout := req.GetTimeout().AsDuration()
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	return s.wait(ctx, req.GetExecutionId(), domain.TenantOrDefault(req.GetTenant()), min(timeout, maxWait))
}

// wait waits up to timeout for the execution's end: it subscribes to its notices, reads
// its head (an execution that ended before the subscription sends no notice again), and
// watches on (waitOn).
func (s *Service) wait(ctx context.Context, id, tenant string, timeout time.Duration) (*orchv1.WaitExecutionResponse, error) {
	watch, err := notice.SubscribeEnd(s.NC, id)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "nats: %v", err)
	}
	defer watch.Close()
	head, err := s.head(ctx, id, tenant)
	if err != nil {
		return nil, err
	}
	return s.waitOn(ctx, watch, id, tenant, &orchv1.WaitExecutionResponse{Seq: head.GetLastSeq(), Terminal: domain.IsTerminalStatus(head.GetStatus())}, timeout)
}

// waitOn watches the execution's notices from out (what is known of its head) for up to
// timeout, until one says it ended, and then reads its final state once. Past the timeout
// (or when the caller leaves) it answers what it knows, without the state.
func (s *Service) waitOn(ctx context.Context, watch *notice.Watch, id, tenant string, out *orchv1.WaitExecutionResponse, timeout time.Duration) (*orchv1.WaitExecutionResponse, error) {
	ended := out.Terminal // before the wait: its seq is the state's, as it always was
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for !out.Terminal {
		seq, terminal, err := watch.Next(wctx)
		if err != nil {
			return out, nil // timed out (or the caller left): report what is known
		}
		out.Seq = max(out.Seq, seq)
		out.Terminal = terminal
	}
	// The terminal notice gave the log's head: a state the engine holds at exactly that
	// head is the log's, and saves a read and fold of the whole log.
	if endSeq, endID, ok := watch.End(); ok && s.Finals != nil && endSeq == out.Seq {
		// Bounded: a shard held up (a slow read of the log) leaves the wait to the
		// statebuilder rather than holding it.
		fctx, cancel := context.WithTimeout(ctx, finalWait)
		st := s.Finals.FinalState(fctx, id, tenant, endSeq, endID)
		cancel()
		if st != nil {
			out.State = st
			return out, nil
		}
	}
	final, err := s.State.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: id, Tenant: tenant, MinSeq: out.Seq})
	if err != nil {
		return nil, err
	}
	out.State = final.GetState()
	if ended {
		out.Seq = out.GetState().GetSeq()
	}
	return out, nil
}

// finalWait bounds how long a wait waits for the engine's final state (Finals).
const finalWait = 250 * time.Millisecond

// head reads an execution's head. A statebuilder older than GetExecutionHead (a rolling
// upgrade) answers Unimplemented: its state says the same, at the cost of a fold.
func (s *Service) head(ctx context.Context, id, tenant string) (*sbv1.GetExecutionHeadResponse, error) {
	head, err := s.State.GetExecutionHead(ctx, &sbv1.GetExecutionHeadRequest{ExecutionId: id, Tenant: tenant})
	if status.Code(err) != codes.Unimplemented {
		return head, err
	}
	resp, err := s.State.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: id, Tenant: tenant})
	if err != nil {
		return nil, err
	}
	st := resp.GetState()
	return &sbv1.GetExecutionHeadResponse{Tenant: st.GetTenant(), Status: st.GetStatus(), LastSeq: st.GetSeq()}, nil
}

// cancelChildren cancels the running child executions of a cancelled execution (their own
// cancellation cascades further). Children that already ended are left alone; failures are
// not fatal for the parent's cancellation.
func (s *Service) cancelChildren(ctx context.Context, tenant, parent, reason string) {
	token := ""
	for {
		resp, err := s.State.ListExecutions(ctx, &sbv1.ListExecutionsRequest{Tenant: tenant, ParentExecutionId: parent, Status: eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, PageSize: 500, PageToken: token})
		if err != nil {
			return
		}
		for _, c := range resp.GetExecutions() {
			_, _ = s.CancelExecution(ctx, &orchv1.CancelExecutionRequest{Tenant: tenant, ExecutionId: c.GetExecutionId(), Reason: "parent " + parent + " cancelled: " + reason})
		}
		if token = resp.GetNextPageToken(); token == "" {
			return
		}
	}
}
