package partition

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
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
	// done receives the batch's outcome (buffered: the committer never waits on it).
	done chan error
}

// committer commits the partitions' batches (see above).
type committer struct {
	// commit commits a group of batches in one transaction (loop.commit).
	commit    func(context.Context, []*job) error
	jobs      chan *job
	maxEvents int
	// loops is how many groups are committed at once (at least one).
	loops int
}

// committerQueue bounds the batches waiting for the committer: one per partition.
const committerQueue = 1024

func newCommitter(l *loop, maxEvents, loops int) *committer {
	return &committer{commit: l.commit, jobs: make(chan *job, committerQueue), maxEvents: max(maxEvents, 1), loops: max(loops, 1)}
}

// submit hands j to the committer and waits for its outcome, or for ctx to end (the batch
// is then committed or not, as after a crash: the next owner reads it again).
func (c *committer) submit(ctx context.Context, j *job) error {
	if len(j.evs) == 0 {
		return nil
	}
	j.done = make(chan error, 1)
	select {
	case c.jobs <- j:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-j.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run commits what the partitions hand over until ctx ends, in c.loops transactions at
// once.
func (c *committer) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range max(c.loops, 1) {
		wg.Go(func() { c.loop(ctx) })
	}
	wg.Wait()
}

// loop is one of the committer's transactions, group after group.
func (c *committer) loop(ctx context.Context) {
	var next *job // a batch taken that did not fit the last group
	for {
		first := next
		next = nil
		if first == nil {
			select {
			case <-ctx.Done():
				return
			case first = <-c.jobs:
			}
		}
		group, n := []*job{first}, len(first.evs)
	collect:
		for n < c.maxEvents {
			select {
			case j := <-c.jobs:
				if n+len(j.evs) > c.maxEvents {
					next = j
					break collect
				}
				group, n = append(group, j), n+len(j.evs)
			default:
				break collect
			}
		}
		err := c.commit(ctx, group)
		if err != nil && len(group) > 1 {
			for _, j := range group {
				j.done <- c.commit(ctx, []*job{j})
			}
			continue
		}
		for _, j := range group {
			j.done <- err
		}
	}
}
