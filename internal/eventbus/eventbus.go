// Package eventbus publishes NoETL's events to NOETL_EVENTS, each on its execution's
// partition subject: the events of one call packed by partition into batch messages
// (Publish), those of many concurrent callers likewise (Batcher, batch.go), a lone event
// plain under its event id (and PublishNew always so), and reads a message's events back
// (Bodies). The orchestrator, the worker and the materializer go through it, so the
// rules are written once. Invariants: an event travels on its execution's partition
// subject; a publisher's events keep its order in the stream; a call returns only once
// every message holding its events is acknowledged.
package eventbus

import (
	"context"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/platform/natsx"
)

// Publish publishes events to NOETL_EVENTS in order and waits for every ack: each on its
// execution's partition subject, the events of one partition packed into batch messages
// (pack), and the trace of ctx travels with them (natsx.PublishAll). A decision's events
// so cost one message, not one each (a loop that enters ten thousand iterations, 40).
func Publish(ctx context.Context, js jetstream.JetStream, partitions int, events []*eventv1.Event) error {
	bodies, err := marshal(partitions, events)
	if err != nil {
		return err
	}
	msgs, err := pack(partitions, events, bodies)
	if err != nil {
		return err
	}
	return natsx.PublishAll(ctx, js, msgs)
}

// PublishNew publishes one event, alone in its message under its event id, and reports
// whether NOETL_EVENTS already held it (an event of the same id within the stream's
// duplicate window): then no consumer sees it again.
func PublishNew(ctx context.Context, js jetstream.JetStream, partitions int, ev *eventv1.Event) (duplicate bool, err error) {
	b, err := proto.Marshal(ev)
	if err != nil {
		return false, err
	}
	return natsx.PublishNew(ctx, js, natsx.Message{Subject: natsx.EventSubject(ev.GetExecutionId(), partitions), MsgID: ev.GetEventId(), Data: b})
}

// marshal encodes events for pack, refusing before anything is published an event that
// no message can hold (natsx.CheckSize: ErrMessageTooLarge, naming its subject and id).
func marshal(partitions int, events []*eventv1.Event) ([][]byte, error) {
	bodies := make([][]byte, len(events))
	for i, ev := range events {
		b, err := proto.Marshal(ev)
		if err != nil {
			return nil, err
		}
		if err := natsx.CheckSize(natsx.Message{Subject: natsx.EventSubject(ev.GetExecutionId(), partitions), MsgID: ev.GetEventId(), Data: b}); err != nil {
			return nil, err
		}
		bodies[i] = b
	}
	return bodies, nil
}

// pack groups events (marshalled in bodies) into the messages that carry them, in order:
// per partition subject, consecutive events of it share an EventBatch message (up to
// MaxBatchEvents and maxBatchBytes; one over the bound opens the next), and a message that
// holds a single event is the plain event under its own id.
func pack(partitions int, events []*eventv1.Event, bodies [][]byte) ([]natsx.Message, error) {
	type pending struct {
		subject string
		ids     []string
		bodies  [][]byte
		size    int
	}
	var order []*pending
	open := map[string]*pending{} // subject -> the message still being filled
	for i, ev := range events {
		subj := natsx.EventSubject(ev.GetExecutionId(), partitions)
		p := open[subj]
		if p == nil || len(p.bodies) >= MaxBatchEvents || p.size+len(bodies[i]) > maxBatchBytes {
			p = &pending{subject: subj}
			open[subj] = p
			order = append(order, p)
		}
		p.ids, p.bodies, p.size = append(p.ids, ev.GetEventId()), append(p.bodies, bodies[i]), p.size+len(bodies[i])
	}
	msgs := make([]natsx.Message, len(order))
	for i, p := range order {
		if len(p.bodies) == 1 {
			msgs[i] = natsx.Message{Subject: p.subject, MsgID: p.ids[0], Data: p.bodies[0]}
			continue
		}
		data, err := proto.Marshal(&eventv1.EventBatch{Events: p.bodies})
		if err != nil {
			return nil, err
		}
		msgs[i] = natsx.Message{Subject: p.subject, MsgID: natsx.GroupMsgID("batch", p.ids), Data: data,
			Header: nats.Header{BatchHeader: []string{strconv.Itoa(len(p.bodies))}}}
	}
	return msgs, nil
}
