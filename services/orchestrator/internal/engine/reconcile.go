package engine

import (
	"context"
	"log/slog"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/commandbus"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/platform/telemetry"
)

// The reconciler. A commit notice or a command can be lost between the commit and the bus
// (a materializer crash after its commit, a lost publish, a message that aged out of a
// stream). Both leave a running execution whose log stops growing. Every ReconcileEvery
// the reconciler lists the running executions whose log has been still for StaleAfter and
// re-drives each one:
//
//   - it decides again from the committed state (covering a lost notice: the decision is
//     deterministic, so a decision that was taken already yields the same event ids, which
//     the materializer drops as duplicates);
//   - it re-publishes every committed command that is still open and that the commands
//     stream no longer holds (covering a lost command), whatever issued it: a step, a loop
//     iteration, a retry. The command is taken from its command.issued event, so it is
//     the command that was committed, byte for byte.
//
// A command is open when the log holds its command.issued but neither its outcome
// (command.completed or command.failed) nor its command.started, and its step is still
// running in the same epoch. A started command is left alone: a worker holds its
// message and the stream redelivers it if that worker dies. A command the stream still
// holds is queued or being run and is left alone too, so a backlogged pool is not flooded
// with copies (alone, or in a pack found through the pack's first command: a command
// further inside a pack whose first command ended is published again, at-least-once).
// Any number of replicas may reconcile at once: command publishes are deduplicated by
// id, and a command run twice yields events of the same ids.

// Reconcile re-drives stalled executions until ctx ends.
func (e *Engine) Reconcile(ctx context.Context) error {
	t := time.NewTicker(e.cfg.ReconcileEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := e.reconcileOnce(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("reconcile", slog.String("error", err.Error()))
		}
	}
}

func (e *Engine) reconcileOnce(ctx context.Context) error {
	before := timestamppb.New(time.Now().Add(-e.cfg.StaleAfter))
	token := ""
	for {
		resp, err := e.state.ListExecutions(ctx, &sbv1.ListExecutionsRequest{Status: eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, UpdatedBefore: before, PageSize: 500, PageToken: token})
		if err != nil {
			return err
		}
		for _, x := range resp.GetExecutions() {
			if err := e.redrive(ctx, x.GetExecutionId()); err != nil {
				e.log.Warn("re-drive failed", slog.String("execution_id", x.GetExecutionId()), slog.String("error", err.Error()))
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			return nil
		}
	}
}

func (e *Engine) redrive(ctx context.Context, id string) (err error) {
	ctx, span := e.cfg.Tracer.Start(ctx, "redrive", trace.WithAttributes(telemetry.AttrExecutionID.String(id)))
	defer func() {
		telemetry.ErrorStatus(span, err)
		span.End()
	}()
	if _, err := e.Drive(ctx, id, 0); err != nil {
		return err
	}
	e.redrives.WithLabelValues("decide").Inc()
	resp, err := e.state.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: id})
	if err != nil {
		return err
	}
	open, err := e.openCommands(ctx, resp.GetState())
	if err != nil || len(open) == 0 {
		return err
	}
	commands, err := e.js.Stream(ctx, natsx.StreamCommands)
	if err != nil {
		return err
	}
	lost, err := lostCommands(ctx, commands, open, e.cfg.Partitions)
	if err != nil || len(lost) == 0 {
		return err
	}
	// Published again one by one, each under its own subject and id.
	msgs := make([]natsx.Message, len(lost))
	for i, c := range lost {
		b, err := proto.Marshal(c)
		if err != nil {
			return err
		}
		msgs[i] = natsx.Message{Subject: natsx.CommandSubject(c.GetPool(), c.GetExecutionId(), c.GetCommandId(), e.cfg.Partitions), MsgID: c.GetCommandId(), Data: b}
	}
	if err := natsx.PublishAll(ctx, e.js, msgs); err != nil {
		return err
	}
	e.redrives.WithLabelValues("republish").Add(float64(len(msgs)))
	return nil
}

// lostCommands returns the commands of open (in issue order) that the commands stream no
// longer holds: neither on their own subject nor in a pack found through its first
// command, which comes before the pack's others in open.
func lostCommands(ctx context.Context, commands jetstream.Stream, open []*eventv1.Command, partitions int) ([]*eventv1.Command, error) {
	var lost []*eventv1.Command
	held := map[string]bool{}
	for _, c := range open {
		if held[c.GetCommandId()] {
			continue
		}
		queued, members, err := commandbus.Queued(ctx, commands, c, partitions)
		if err != nil {
			return nil, err
		}
		for _, id := range members {
			held[id] = true
		}
		if !queued {
			lost = append(lost, c)
		}
	}
	return lost, nil
}

// reconcileEventsPage is the page size of the log reads of openCommands.
const reconcileEventsPage = 1000

// openCommands reads the committed commands of st that are open (see the reconciler
// above), in the order they were issued. Only running executions have any.
func (e *Engine) openCommands(ctx context.Context, st *sbv1.ExecutionState) ([]*eventv1.Command, error) {
	if st.GetStatus() != eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING {
		return nil, nil
	}
	type issued struct {
		seq int64
		pos int // its place among the commands of its event (a commands.issued's)
		cmd *eventv1.Command
	}
	open := map[string]issued{}
	closed := map[string]bool{}
	for after := int64(0); after < st.GetSeq(); {
		resp, err := e.state.ListEvents(ctx, &sbv1.ListEventsRequest{ExecutionId: st.GetExecutionId(), AfterSeq: after, PageSize: reconcileEventsPage,
			Types: []string{domain.EventCommandIssued, domain.EventCommandsIssued, domain.EventCommandStarted, domain.EventCommandCompleted, domain.EventCommandFailed}, UpToSeq: st.GetSeq()})
		if err != nil {
			return nil, err
		}
		for _, ev := range resp.GetEvents() {
			after = ev.GetSeq()
			if !domain.IsIssue(ev.GetType()) {
				closed[ev.GetCommandId()] = true
				continue
			}
			for pos, c := range domain.IssuedCommands(ev) {
				if c.GetCommandId() != "" {
					c.IssuedEventId = ev.GetEventId()
					open[c.GetCommandId()] = issued{seq: ev.GetSeq(), pos: pos, cmd: c}
				}
			}
		}
		if resp.GetNextAfterSeq() == 0 || len(resp.GetEvents()) == 0 {
			break
		}
	}
	out := make([]issued, 0, len(open))
	for id, is := range open {
		if closed[id] {
			continue
		}
		s := st.GetSteps()[is.cmd.GetStep()]
		if s.GetStatus() != eventv1.StepStatus_STEP_STATUS_RUNNING || s.GetEpoch() != is.cmd.GetIteration().GetEpoch() {
			continue
		}
		out = append(out, is)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].seq < out[j].seq || out[i].seq == out[j].seq && out[i].pos < out[j].pos
	})
	cmds := make([]*eventv1.Command, len(out))
	for i, is := range out {
		cmds[i] = is.cmd
	}
	return cmds, nil
}
