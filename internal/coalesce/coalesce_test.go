package coalesce

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/testkit"
)

// waitFor waits until n items are waiting in q.
func waitFor[T any](t *testing.T, q *Queue[T], n int) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, func() error {
		if got := q.Waiting(); got != n {
			return fmt.Errorf("%d waiting, want %d", got, n)
		}
		return nil
	})
}

// TestQueueGroupsWhatWaitsWithinTheBound: items waiting when a loop is free go in one
// group, in submission order, as long as they fit the bound; the one that does not opens
// the next group, and an item heavier than the bound goes alone. Each caller gets its own
// item's outcome.
func TestQueueGroupsWhatWaitsWithinTheBound(t *testing.T) {
	q := New(16, 10, func(v int) int { return v })
	var mu sync.Mutex
	var groups [][]int
	process := func(_ context.Context, vs []int) []error {
		mu.Lock()
		groups = append(groups, append([]int(nil), vs...))
		mu.Unlock()
		errs := make([]error, len(vs))
		for i, v := range vs {
			if v == 3 {
				errs[i] = errors.New("three")
			}
		}
		return errs
	}
	items := []int{4, 3, 2, 5, 12, 1}
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	for i, v := range items {
		wg.Go(func() { errs[i] = q.Submit(context.Background(), v) })
		waitFor(t, q, i+1) // submitted in this order
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.Run(ctx, 1, process)
	}()
	wg.Wait()
	cancel()
	<-done
	require.Equal(t, [][]int{{4, 3, 2}, {5}, {12}, {1}}, groups)
	for i, v := range items {
		if v == 3 {
			require.EqualError(t, errs[i], "three")
		} else {
			require.NoError(t, errs[i], "item %d", v)
		}
	}
}

// TestQueueStopAnswersWaitingItems: an item still waiting when Run stops gets Run's
// context error instead of waiting for ever.
func TestQueueStopAnswersWaitingItems(t *testing.T) {
	q := New(4, 10, func(int) int { return 1 })
	errc := make(chan error, 1)
	go func() { errc <- q.Submit(context.Background(), 1) }()
	waitFor(t, q, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	q.Run(ctx, 2, func(context.Context, []int) []error { t.Error("processed after the stop"); return nil })
	require.ErrorIs(t, <-errc, context.Canceled)
}

// TestQueueSubmitLeavesWithItsContext: a caller whose context ends stops waiting.
func TestQueueSubmitLeavesWithItsContext(t *testing.T) {
	q := New(4, 10, func(int) int { return 1 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, q.Submit(ctx, 1), context.Canceled)
}
