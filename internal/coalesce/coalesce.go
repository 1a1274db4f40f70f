// Package coalesce hands work from many goroutines to a few loops that each take all that
// is waiting and process it in one go: the materializer's group commit (one transaction
// for the batches of several partitions) and the worker's outcome batcher (one message for
// the outcomes of several commands). Invariants: every item submitted is processed once
// or, when the queue stops first, answered with the stop's error; a caller's item is never
// split; a group never weighs more than the bound, except an item heavier than the bound,
// which goes alone; items keep their submission order within a group.
package coalesce

import (
	"context"
	"sync"
)

// Queue collects items of type T for Run's loops.
type Queue[T any] struct {
	items  chan *entry[T]
	max    int
	weight func(T) int
}

type entry[T any] struct {
	v    T
	done chan error
}

// New returns a Queue holding up to capacity waiting items, whose groups weigh at most
// bound (at least one) by weight.
func New[T any](capacity, bound int, weight func(T) int) *Queue[T] {
	return &Queue[T]{items: make(chan *entry[T], capacity), max: max(bound, 1), weight: weight}
}

// Submit hands v to the queue and waits for its outcome, or for ctx to end (v is then
// processed or not).
func (q *Queue[T]) Submit(ctx context.Context, v T) error {
	e := &entry[T]{v: v, done: make(chan error, 1)}
	select {
	case q.items <- e:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-e.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Waiting is how many submitted items no loop has taken yet.
func (q *Queue[T]) Waiting() int { return len(q.items) }

// Run processes what is submitted until ctx ends, in loops groups at once: each loop takes
// an item, then every item waiting that fits the bound, and calls process with them, which
// returns one error per item (nil for success). Once ctx ends and the loops stop, an item
// still waiting is answered with ctx's error.
func (q *Queue[T]) Run(ctx context.Context, loops int, process func(context.Context, []T) []error) {
	var wg sync.WaitGroup
	for range max(loops, 1) {
		wg.Go(func() { q.loop(ctx, process) })
	}
	wg.Wait()
	for {
		select {
		case e := <-q.items:
			e.done <- ctx.Err()
		default:
			return
		}
	}
}

// loop is one of Run's loops, group after group.
func (q *Queue[T]) loop(ctx context.Context, process func(context.Context, []T) []error) {
	var next *entry[T] // an item taken that did not fit the last group
	for {
		first := next
		next = nil
		if first == nil {
			if ctx.Err() != nil {
				return // a stopped queue takes nothing more, even what is waiting
			}
			select {
			case <-ctx.Done():
				return
			case first = <-q.items:
			}
		}
		group, n := []*entry[T]{first}, q.weight(first.v)
	collect:
		for n < q.max {
			select {
			case e := <-q.items:
				w := q.weight(e.v)
				if n+w > q.max {
					next = e
					break collect
				}
				group, n = append(group, e), n+w
			default:
				break collect
			}
		}
		vs := make([]T, len(group))
		for i, e := range group {
			vs[i] = e.v
		}
		errs := process(ctx, vs)
		for i, e := range group {
			e.done <- errs[i]
		}
	}
}
