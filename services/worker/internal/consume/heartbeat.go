package consume

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/services/worker/internal/execute"
)

// A command whose heartbeat interval is set (a cursor loop's body with
// frame.heartbeat_seconds) reports command.heartbeat every that often while it runs, so
// the orchestrator keeps its frame's lease alive; the beats stop before its outcome is
// published. Other commands carry no interval and cost nothing here. The beats of one
// delivery of the command count from 1 and their ids name the delivery
// (domain.HeartbeatDelivery): a worker that takes over a command whose worker died sends
// beats the materializer keeps, not copies of the dead worker's ids.

// HeartbeatEvent is heartbeat number beat of delivery (domain.HeartbeatDelivery) of cmd.
func HeartbeatEvent(cmd *eventv1.Command, delivery string, beat int32) *eventv1.Event {
	ev := execute.CommandEvent(cmd, domain.EventCommandHeartbeat)
	ev.EventId = domain.HeartbeatEventID(cmd.GetCommandId(), delivery, beat)
	ev.PayloadJson, _ = json.Marshal(domain.HeartbeatPayload{Beat: beat, Delivery: delivery})
	return ev
}

// delivery names the delivery of m (domain.HeartbeatDelivery): empty when m carries no
// JetStream metadata.
func delivery(m jetstream.Msg) string {
	md, err := m.Metadata()
	if err != nil {
		return ""
	}
	return domain.HeartbeatDelivery(md.Sequence.Stream, md.NumDelivered)
}

// heartbeats starts cmd's heartbeats, when its interval is set, and returns what stops
// them: it returns once no heartbeat is being published. deliveryOf names the delivery of
// cmd being run; it is asked only for a command that beats (reading a message's metadata
// costs a parse of its reply subject).
func (c *Consumer) heartbeats(ctx context.Context, cmd *eventv1.Command, deliveryOf func() string, log *slog.Logger) (stop func()) {
	every := cmd.GetHeartbeat().AsDuration()
	if every <= 0 {
		return func() {}
	}
	delivery := deliveryOf()
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		var beat int32
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			beat++
			if err := c.publish(ctx, []*eventv1.Event{HeartbeatEvent(cmd, delivery, beat)}); err != nil && ctx.Err() == nil {
				// The next beat may pass; a lease that runs out meanwhile issues the frame
				// again, which the cursor loop's bookkeeping tolerates.
				log.Warn("publish command.heartbeat", slog.String("execution_id", cmd.GetExecutionId()), slog.String("step", cmd.GetStep()), slog.String("error", err.Error()))
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
