package partition

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/platform/natsx"
)

// TestSaturation walks the readiness of the materializer through lag readings and batches
// on a fake clock.
func TestSaturation(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	s := &saturation{maxLag: 100, stallAfter: time.Minute, now: func() time.Time { return now }}
	ctx := context.Background()
	// One partition (3) carries the lag; another (5) is owned and idle.
	read := func(pending uint64, inFlight int) {
		l := natsx.ConsumerLag{Pending: pending, AckPending: inFlight, At: now}
		s.observe(l, map[int]natsx.ConsumerLag{3: l, 5: {At: now}})
	}
	at := func(d time.Duration) { now = t0.Add(d) }
	ready := func(wantLag, wantProgress string) {
		t.Helper()
		for _, c := range []struct {
			err  error
			want string
		}{{s.checkLag(ctx), wantLag}, {s.checkProgress(ctx), wantProgress}} {
			if c.want == "" {
				require.NoError(t, c.err)
			} else {
				require.ErrorContains(t, c.err, c.want)
			}
		}
	}

	ready("", "") // nothing read yet
	read(0, 0)
	ready("", "")

	// Busy and keeping up: work pending, batches finishing.
	at(time.Second)
	read(50, 20)
	at(30 * time.Second)
	s.advanced(3)
	at(90 * time.Second)
	read(60, 10)
	ready("", "")

	// Past the lag limit: not ready, whatever the progress.
	read(90, 11)
	ready("consumer lag 101 (90 pending, 11 in flight) exceeds 100", "")

	// Pending and nothing finished since it was seen pending: stalled after a minute.
	read(5, 5)
	at(150 * time.Second)
	read(5, 5)
	ready("", "")
	at(151 * time.Second)
	ready("", "nothing committed for 1m1s with 10 events pending (partition 3)")

	// A batch finishes: ready again.
	s.advanced(3)
	ready("", "")
	at(10 * time.Minute)
	read(5, 5)
	ready("", "")

	// Drained: nothing pending is never a stall, however long ago the last batch.
	read(0, 0)
	at(time.Hour)
	ready("", "")

	// An unreadable consumer (deleted, NATS down) is not a lag of zero, once the last good
	// reading is too old to stand in.
	read(0, 0)
	s.observe(natsx.ConsumerLag{Err: errors.New("consumer not found")}, nil)
	ready("", "")
	at(time.Hour + 11*time.Second)
	ready("consumer state unreadable: consumer not found", "")
	read(0, 0)
	ready("", "")

	// Before the first good reading the lag is unknown.
	fresh := &saturation{maxLag: 100, stallAfter: time.Minute, now: func() time.Time { return now }}
	fresh.observe(natsx.ConsumerLag{Err: errors.New("consumer not found")}, nil)
	require.ErrorContains(t, fresh.checkLag(ctx), "unreadable")

	// A partition that stalls while another keeps committing is reported: progress is
	// per partition.
	at(2 * time.Hour)
	s.observe(natsx.ConsumerLag{Pending: 10, At: now}, map[int]natsx.ConsumerLag{3: {Pending: 5, At: now}, 5: {Pending: 5, At: now}})
	at(2*time.Hour + 2*time.Minute)
	s.advanced(5)
	s.observe(natsx.ConsumerLag{Pending: 10, At: now}, map[int]natsx.ConsumerLag{3: {Pending: 5, At: now}, 5: {Pending: 5, At: now}})
	ready("", "nothing committed for 2m0s with 5 events pending (partition 3)")
	// Once partition 3 is no longer owned, it is not this replica's stall.
	s.observe(natsx.ConsumerLag{Pending: 5, At: now}, map[int]natsx.ConsumerLag{5: {Pending: 5, At: now}})
	ready("", "")
}
