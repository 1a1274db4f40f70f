package partition

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/testkit"
)

func batchOf(p, events int) *job {
	j := &job{partition: p}
	for i := range events {
		j.evs = append(j.evs, &eventv1.Event{ExecutionId: fmt.Sprintf("x%d", p), EventId: fmt.Sprintf("e%d", i)})
	}
	return j
}

// fakeCommit records the partitions of each group it is given; the first group waits for
// release (the transaction that runs while the others queue up), and a group holding
// partition 3 fails with poison.
func fakeCommit(mu *sync.Mutex, groups *[][]int, release chan struct{}, poison error) func(context.Context, []*job) error {
	return func(_ context.Context, jobs []*job) error {
		var parts []int
		for _, j := range jobs {
			parts = append(parts, j.partition)
		}
		mu.Lock()
		first := len(*groups) == 0
		*groups = append(*groups, parts)
		mu.Unlock()
		if first {
			<-release
		}
		if slices.Contains(parts, 3) {
			return poison
		}
		return nil
	}
}

// TestCommitterGroupsWaitingBatches: batches that wait while a transaction runs are
// committed together in the next one, up to the event bound; a group that fails is
// committed again batch by batch, so only the failing partition's batch fails.
func TestCommitterGroupsWaitingBatches(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var groups [][]int
	poison := errors.New("partition 3 cannot commit")
	c := newCommitter(fakeCommit(&mu, &groups, release, poison), 10, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.run(ctx)

	outcome := make(map[int]error)
	var wg sync.WaitGroup
	submit := func(j *job) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.submit(ctx, j)
			mu.Lock()
			outcome[j.partition] = err
			mu.Unlock()
		}()
	}
	submit(batchOf(0, 2))
	testkit.WaitFor(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(groups) != 1 {
			return fmt.Errorf("the first transaction has not started")
		}
		return nil
	})
	// Partitions 1 and 2 fit one transaction (4 + 4 events); 4's 6 events do not.
	for k, j := range []*job{batchOf(1, 4), batchOf(2, 4), batchOf(4, 6)} {
		submit(j)
		testkit.WaitFor(t, 5*time.Second, func() error {
			if n := c.queue.Waiting(); n != k+1 {
				return fmt.Errorf("%d batches queued, want %d", n, k+1)
			}
			return nil
		})
	}
	close(release)
	wg.Wait()
	require.Equal(t, [][]int{{0}, {1, 2}, {4}}, groups, "the waiting batches shared transactions up to 10 events")
	for p, err := range outcome {
		require.NoError(t, err, "partition %d", p)
	}

	// A group holding a batch that cannot commit: the others still commit, each alone.
	mu.Lock()
	groups = nil
	mu.Unlock()
	blocker := make(chan struct{})
	c.commit = fakeCommit(&mu, &groups, blocker, poison)
	outcome = map[int]error{}
	submit(batchOf(0, 1))
	testkit.WaitFor(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(groups) != 1 {
			return fmt.Errorf("the first transaction has not started")
		}
		return nil
	})
	for k, p := range []int{1, 3, 5} {
		submit(batchOf(p, 1))
		testkit.WaitFor(t, 5*time.Second, func() error {
			if n := c.queue.Waiting(); n != k+1 {
				return fmt.Errorf("%d batches queued, want %d", n, k+1)
			}
			return nil
		})
	}
	close(blocker)
	wg.Wait()
	require.ErrorIs(t, outcome[3], poison)
	for _, p := range []int{0, 1, 5} {
		require.NoError(t, outcome[p], "partition %d", p)
	}
	require.Len(t, groups, 5, "the failed group of three, then each of its batches alone")
	require.Equal(t, []int{1, 3, 5}, groups[1])
	require.Equal(t, [][]int{{1}, {3}, {5}}, groups[2:])
}

// TestCommittersCommitSideBySide: with two committer loops, a batch that arrives while one
// transaction is held up is committed by the other at once, not after it; each partition
// still has one batch in flight, so the two transactions hold distinct partitions.
func TestCommittersCommitSideBySide(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var groups [][]int
	c := newCommitter(fakeCommit(&mu, &groups, release, nil), 10, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.run(ctx)
	}()

	first := make(chan error, 1)
	go func() { first <- c.submit(ctx, batchOf(0, 2)) }()
	testkit.WaitFor(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(groups) != 1 {
			return fmt.Errorf("the first transaction has not started")
		}
		return nil
	})
	// The first transaction is held; the second loop commits partition 1's batch.
	require.NoError(t, c.submit(ctx, batchOf(1, 3)))
	select {
	case err := <-first:
		t.Fatalf("the held transaction finished before it was released: %v", err)
	default:
	}
	close(release)
	require.NoError(t, <-first)
	mu.Lock()
	require.Equal(t, [][]int{{0}, {1}}, groups)
	mu.Unlock()
	cancel()
	<-done // run returns once every loop has stopped
}
