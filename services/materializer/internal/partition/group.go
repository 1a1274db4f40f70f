package partition

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/coalesce"
	"github.com/noetl/noetl/services/materializer/internal/writer"
)

// Group commit. Each partition reads its events in stream order and hands its batch to the
// replica's committer, then waits for the outcome before it reads the next batch, so a
// partition has at most one batch in flight and its events are committed in order. The
// committer runs Config.Committers transactions at once: each takes the batch that is
// waiting and any others that are (as long as they fit BatchSize events together; a larger
// batch goes alone), and commits them in one transaction that also moves each one's
// partition cursor (loop.commit), then forwards their commands and notices. Under load the
// partitions share transactions, commits and fsyncs instead of paying for one each, and
// while one transaction waits on Postgres, the decider or the forward's acknowledgements,
// another commits the batches that arrived meanwhile (one loop doing it all serialised
// every batch behind the previous one's round trips, with the CPU mostly idle). Batches of
// distinct partitions hold distinct executions, so neither merging them nor committing
// them side by side changes any execution's order, and two transactions never lock the
// same rows (an execution's, a partition cursor's).
//
// A failure fails every batch of the transaction, and each partition retries its own (as
// after a crash: what was committed comes back as duplicates). So that one partition's
// batch that keeps failing does not hold the others back, a failed group is committed
// again batch by batch at once, and each batch gets its own outcome.

// job is one partition's batch handed to the committer.
type job struct {
	partition int
	evs       []*eventv1.Event
	bodies    [][]byte
	msgs      []jetstream.Msg
	// cursor is the partition's cursor to move in the batch's transaction (StreamSeq zero:
	// none).
	cursor writer.Cursor
}

// committer commits the partitions' batches (see above) through a coalescing queue: each
// of its loops takes the batches waiting, as many as fit maxEvents together.
type committer struct {
	// commit commits a group of batches in one transaction (loop.commit).
	commit func(context.Context, []*job) error
	queue  *coalesce.Queue[*job]
	// loops is how many groups are committed at once (at least one).
	loops int
}

// committerQueue bounds the batches waiting for the committer: one per partition.
const committerQueue = 1024

func newCommitter(commit func(context.Context, []*job) error, maxEvents, loops int) *committer {
	return &committer{commit: commit, queue: coalesce.New(committerQueue, maxEvents, func(j *job) int { return len(j.evs) }), loops: max(loops, 1)}
}

// submit hands j to the committer and waits for its outcome, or for ctx to end (the batch
// is then committed or not, as after a crash: the next owner reads it again).
func (c *committer) submit(ctx context.Context, j *job) error {
	if len(j.evs) == 0 {
		return nil
	}
	return c.queue.Submit(ctx, j)
}

// run commits what the partitions hand over until ctx ends, in c.loops transactions at
// once.
func (c *committer) run(ctx context.Context) { c.queue.Run(ctx, c.loops, c.group) }

// group commits one group in one transaction; when that fails and the group holds several
// batches, each is committed again on its own, so each gets its own outcome.
func (c *committer) group(ctx context.Context, group []*job) []error {
	errs := make([]error, len(group))
	err := c.commit(ctx, group)
	if err != nil && len(group) > 1 {
		for i, j := range group {
			errs[i] = c.commit(ctx, []*job{j})
		}
		return errs
	}
	for i := range errs {
		errs[i] = err
	}
	return errs
}
