// Package failpoint provides named failure points between side effects. A point is a
// no-op (one atomic load) unless a test enables it; an enabled point returns an error for
// its next n evaluations, which the caller treats like a crash at that point: it stops
// without performing (or acknowledging) what follows, and redelivery must recover.
package failpoint

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Names of the points between two side effects.
const (
	OrchestratorAfterDecide  = "orchestrator/after-decide"  // decided, nothing published
	MaterializerAfterInsert  = "materializer/after-insert"  // rows written, not committed
	MaterializerAfterDecide  = "materializer/after-decide"  // decided inside the commit, nothing inserted
	MaterializerAfterCommit  = "materializer/after-commit"  // committed, nothing forwarded
	MaterializerAfterPublish = "materializer/after-publish" // forwarded, input not acked
	WorkerAfterTool          = "worker/after-tool"          // tool ran, nothing published
	WorkerAfterPublish       = "worker/after-publish"       // outcome published, command not acked
	OrchestratorAfterPublish = "orchestrator/after-publish" // decision published, notice not acked
	MaterializerLoseNotice   = "materializer/lose-notice"   // a commit notice is never published
	MaterializerLoseCommand  = "materializer/lose-command"  // a committed command is never published
	OrchestratorAfterTick    = "orchestrator/after-tick"    // schedule ticks recorded, none started
)

// ErrInjected is the error an enabled point returns.
var ErrInjected = errors.New("failpoint injected")

var (
	enabled atomic.Bool
	mu      sync.Mutex
	points  = map[string]int{}
	hits    = map[string]int{}
)

// Enable makes point fail its next n evaluations.
func Enable(point string, n int) {
	mu.Lock()
	defer mu.Unlock()
	points[point] = n
	enabled.Store(true)
}

// Reset disables every point and clears the hit counts.
func Reset() {
	mu.Lock()
	defer mu.Unlock()
	clear(points)
	clear(hits)
	enabled.Store(false)
}

// Hits returns how many times point failed.
func Hits(point string) int {
	mu.Lock()
	defer mu.Unlock()
	return hits[point]
}

// Active reports whether any point was enabled since the last Reset.
func Active() bool { return enabled.Load() }

// Eval returns ErrInjected (wrapped with the point's name) when point is enabled.
func Eval(point string) error {
	if !enabled.Load() {
		return nil
	}
	mu.Lock()
	defer mu.Unlock()
	if points[point] <= 0 {
		return nil
	}
	points[point]--
	hits[point]++
	return fmt.Errorf("%s: %w", point, ErrInjected)
}
