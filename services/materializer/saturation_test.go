package materializer

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
	read := func(pending uint64, inFlight int) {
		s.observe(natsx.ConsumerLag{Pending: pending, AckPending: inFlight, At: now})
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
	s.advanced()
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
	ready("", "nothing committed for 1m1s with 10 events pending")

	// A batch finishes: ready again.
	s.advanced()
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
	s.observe(natsx.ConsumerLag{Err: errors.New("consumer not found")})
	ready("", "")
	at(time.Hour + 11*time.Second)
	ready("consumer state unreadable: consumer not found", "")
	read(0, 0)
	ready("", "")

	// Before the first good reading the lag is unknown.
	fresh := &saturation{maxLag: 100, stallAfter: time.Minute, now: func() time.Time { return now }}
	fresh.observe(natsx.ConsumerLag{Err: errors.New("consumer not found")})
	require.ErrorContains(t, fresh.checkLag(ctx), "unreadable")
}
