package eventbus

import (
	"context"
	"errors"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/coalesce"
	"github.com/noetl/noetl/internal/platform/natsx"
)

// BatchHeader marks a NOETL_EVENTS message that holds an eventv1.EventBatch; its value is
// the batch's count of events. A message without it holds one marshalled Event.
const BatchHeader = "Noetl-Batch"

// Batch bounds: the events of one batch message, and its bytes (under the stream's
// message limit, with room for the batch's framing and headers).
const (
	MaxBatchEvents = 256
	maxBatchBytes  = natsx.MaxMessageBytes - 4096
)

// ErrMalformedBatch is a NOETL_EVENTS message marked as a batch that does not decode as one.
var ErrMalformedBatch = errors.New("malformed event batch")

// Bodies returns the marshalled events a NOETL_EVENTS message holds, in order: its data
// for a single event, the batch's events for a batch (header BatchHeader).
func Bodies(h nats.Header, data []byte) ([][]byte, error) {
	if h.Get(BatchHeader) == "" {
		return [][]byte{data}, nil
	}
	b := &eventv1.EventBatch{}
	if err := proto.Unmarshal(data, b); err != nil || len(b.GetEvents()) == 0 {
		return nil, ErrMalformedBatch
	}
	return b.GetEvents(), nil
}

// Count is how many events a NOETL_EVENTS message holds, read from its header alone (one
// for a message that is not a batch, or whose count does not parse).
func Count(h nats.Header) int {
	if v := h.Get(BatchHeader); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return 1
}

// Batcher publishes events to NOETL_EVENTS for many concurrent callers. The events that
// are waiting when one of its loops is free go out together: one message per partition,
// an EventBatch when the partition has several (up to MaxBatchEvents and the message
// limit), the plain event otherwise, so a lone publish (a chain's outcome) travels as
// Publish sends it. Each caller's events keep their order and their partition's, and
// Publish returns once every message holding them is acknowledged, so a caller that acks
// its command after Publish acks it after its outcome is in the stream, as with the
// package's Publish.
//
// A batch message's id (the stream's deduplication id) derives from its events' ids, so a
// batch published again after a lost acknowledgement is dropped by the stream; the same
// events regrouped are not, and the materializer drops them as duplicates of the log.
type Batcher struct {
	js         jetstream.JetStream
	partitions int
	loops      int
	queue      *coalesce.Queue[*batchReq]
}

// batchReq is one caller's events.
type batchReq struct {
	ctx    context.Context
	events []*eventv1.Event
	bodies [][]byte
}

// NewBatcher returns a Batcher over js for a stream of partitions partitions, with up to
// loops rounds (at least one) in flight at once. Run must run for Publish to return.
func NewBatcher(js jetstream.JetStream, partitions, loops int) *Batcher {
	return &Batcher{js: js, partitions: partitions, loops: max(loops, 1),
		queue: coalesce.New(4*MaxBatchEvents, MaxBatchEvents, func(r *batchReq) int { return len(r.events) })}
}

// Publish publishes events (all of one execution, or not) and waits for their
// acknowledgement, for ctx's end, or for a failure, which may leave some of them
// published (as Publish may).
func (b *Batcher) Publish(ctx context.Context, events []*eventv1.Event) error {
	if len(events) == 0 {
		return nil
	}
	bodies, err := marshal(b.partitions, events) // an event too large fails its own caller alone
	if err != nil {
		return err
	}
	return b.queue.Submit(ctx, &batchReq{ctx: ctx, events: events, bodies: bodies})
}

// Run publishes what callers hand to Publish, round after round of the requests waiting
// (up to MaxBatchEvents events), until ctx ends; a call waiting then fails with ctx's
// error.
func (b *Batcher) Run(ctx context.Context) { b.queue.Run(ctx, b.loops, b.publish) }

// publish sends one round, the requests' events packed into messages by partition in the
// requests' order (pack); every request gets the round's outcome.
func (b *Batcher) publish(ctx context.Context, round []*batchReq) []error {
	var evs []*eventv1.Event
	var bodies [][]byte
	for _, r := range round {
		evs, bodies = append(evs, r.events...), append(bodies, r.bodies...)
	}
	out, err := pack(b.partitions, evs, bodies)
	if err == nil {
		// The messages continue the trace of the round's first caller; they are published
		// in the Batcher's context, so one caller that leaves does not fail the others.
		if trace.SpanContextFromContext(round[0].ctx).IsValid() {
			for i := range out {
				out[i].Header = natsx.Inject(round[0].ctx, out[i].Header)
			}
		}
		err = natsx.PublishAll(ctx, b.js, out)
	}
	errs := make([]error, len(round))
	for i := range errs {
		errs[i] = err
	}
	return errs
}
