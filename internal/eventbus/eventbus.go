// Package eventbus publishes NoETL's events to NOETL_EVENTS: each on its execution's
// partition subject, under its event id, alone in a message (Publish) or with other events
// of its partition in one batch message (Batcher, batch.go), and reads a message's events
// back (Bodies). The orchestrator, the worker and the materializer go through it, so the
// rules are written once. Invariants: an event travels on its execution's partition
// subject; a publisher's events keep its order in the stream; a call returns only once
// every message holding its events is acknowledged.
package eventbus

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/platform/natsx"
)

// Publish publishes events of one execution to NOETL_EVENTS in order, each on its
// execution's partition subject with its event id as Nats-Msg-Id (so a republished event
// is one event), and waits for every ack. The trace of ctx travels with them (natsx.PublishAll).
func Publish(ctx context.Context, js jetstream.JetStream, partitions int, events []*eventv1.Event) error {
	msgs, err := eventMessages(partitions, events)
	if err != nil {
		return err
	}
	return natsx.PublishAll(ctx, js, msgs)
}

// PublishNew publishes one event as Publish does and reports whether
// NOETL_EVENTS already held it (an event of the same id within the stream's duplicate
// window): then no consumer sees it again.
func PublishNew(ctx context.Context, js jetstream.JetStream, partitions int, ev *eventv1.Event) (duplicate bool, err error) {
	msgs, err := eventMessages(partitions, []*eventv1.Event{ev})
	if err != nil {
		return false, err
	}
	return natsx.PublishNew(ctx, js, msgs[0])
}

// eventMessages encodes events as the messages Publish sends.
func eventMessages(partitions int, events []*eventv1.Event) ([]natsx.Message, error) {
	msgs := make([]natsx.Message, 0, len(events))
	for _, ev := range events {
		b, err := proto.Marshal(ev)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, natsx.Message{Subject: natsx.EventSubject(ev.GetExecutionId(), partitions), MsgID: ev.GetEventId(), Data: b})
	}
	return msgs, nil
}
