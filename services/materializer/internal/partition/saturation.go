package partition

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/noetl/noetl/internal/platform/natsx"
)

// saturation decides whether the materializer keeps up: the lag of the partitions it owns
// (read on the lag monitor's goroutine) under MaxLag, and each partition with pending
// events committing batches. A TCP or liveness probe cannot see either: a wedged writer
// still accepts connections.
type saturation struct {
	maxLag     uint64
	stallAfter time.Duration
	now        func() time.Time

	mu sync.Mutex
	// lag is the sum over the owned partitions.
	lag   natsx.ConsumerLag
	parts map[int]*partitionProgress
}

// partitionProgress is what saturation knows of one partition.
type partitionProgress struct {
	lag natsx.ConsumerLag
	// done is when the partition last finished a batch.
	done time.Time
	// pendingSince is when events were first seen pending with no batch finished since;
	// zero while nothing is pending.
	pendingSince time.Time
}

func (s *saturation) part(p int) *partitionProgress {
	if s.parts == nil {
		s.parts = map[int]*partitionProgress{}
	}
	pp := s.parts[p]
	if pp == nil {
		pp = &partitionProgress{}
		s.parts[p] = pp
	}
	return pp
}

// advanced records a finished batch of partition p.
func (s *saturation) advanced(p int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.part(p).done = s.now()
}

// observe takes a reading of the lag: the total and each owned partition's (a partition
// not in each is no longer owned).
func (s *saturation) observe(total natsx.ConsumerLag, each map[int]natsx.ConsumerLag) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if total.Err != nil {
		s.lag.Err = total.Err
		return
	}
	s.lag = total
	for p := range s.parts {
		if _, ok := each[p]; !ok {
			delete(s.parts, p)
		}
	}
	for p, l := range each {
		pp := s.part(p)
		pp.lag = l
		switch {
		case l.Total() == 0:
			pp.pendingSince = time.Time{}
		case pp.pendingSince.IsZero() || !pp.done.Before(pp.pendingSince):
			pp.pendingSince = l.At
		}
	}
}

// lagStaleAfter is how long the last good reading of the lag stands in for failed ones.
const lagStaleAfter = 10 * time.Second

// checkLag fails while the lag exceeds maxLag, or while it cannot be read (an unknown lag
// is not a lag of zero).
func (s *saturation) checkLag(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lag.Err != nil && (s.lag.At.IsZero() || s.now().Sub(s.lag.At) > lagStaleAfter) {
		return fmt.Errorf("consumer state unreadable: %w", s.lag.Err)
	}
	if n := s.lag.Total(); n > s.maxLag {
		return fmt.Errorf("consumer lag %d (%d pending, %d in flight) exceeds %d", n, s.lag.Pending, s.lag.AckPending, s.maxLag)
	}
	return nil
}

// checkProgress fails when a partition's events have been pending for stallAfter without
// a batch of it finished.
func (s *saturation) checkProgress(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := make([]int, 0, len(s.parts))
	for p := range s.parts {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	for _, p := range ps {
		pp := s.parts[p]
		if pp.pendingSince.IsZero() || !pp.done.Before(pp.pendingSince) {
			continue
		}
		if d := s.now().Sub(pp.pendingSince); d > s.stallAfter {
			return fmt.Errorf("nothing committed for %s with %d events pending (partition %d)", d.Round(time.Second), pp.lag.Total(), p)
		}
	}
	return nil
}
