package limit

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newFailures(cfg FailuresConfig) (*Failures, *clock) {
	f := NewFailures(cfg)
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	f.now = c.now
	return f, c
}

func TestFailuresThrottleAKeyPastItsBurstUntilItRefills(t *testing.T) {
	t.Parallel()
	f, c := newFailures(FailuresConfig{PerMinute: 10, Burst: 3})
	for i := range 3 {
		_, _, throttled := f.Throttled("addr", "key")
		require.False(t, throttled, "failure %d is within the burst", i)
		f.Fail("addr", "key")
	}
	key, after, throttled := f.Throttled("other", "addr")
	require.True(t, throttled)
	require.Equal(t, "addr", key)
	require.Equal(t, 6*time.Second, after, "10 a minute: one failure is forgiven every 6 s")

	c.t = c.t.Add(3 * time.Second)
	_, after, throttled = f.Throttled("addr")
	require.True(t, throttled)
	require.Equal(t, 3*time.Second, after)
	c.t = c.t.Add(3 * time.Second)
	_, _, throttled = f.Throttled("addr")
	require.False(t, throttled, "refilled one")
	f.Fail("addr")
	_, _, throttled = f.Throttled("addr")
	require.True(t, throttled, "and spent it")

	// Other keys are untouched; checking charges nothing.
	for range 100 {
		_, _, throttled = f.Throttled("other")
		require.False(t, throttled)
	}
	_, _, throttled = f.Throttled("", "other")
	require.False(t, throttled)
}

func TestFailuresThrottledNamesTheLongestWait(t *testing.T) {
	t.Parallel()
	f, c := newFailures(FailuresConfig{PerMinute: 60, Burst: 1})
	f.Fail("a")
	c.t = c.t.Add(500 * time.Millisecond)
	f.Fail("b")
	key, after, throttled := f.Throttled("a", "b")
	require.True(t, throttled)
	require.Equal(t, "b", key)
	require.Equal(t, time.Second, after)
}

func TestFailuresForgetTheLeastRecentPastTheirBound(t *testing.T) {
	t.Parallel()
	f, _ := newFailures(FailuresConfig{PerMinute: 1, Burst: 1, MaxTracked: 100})
	f.Fail("attacker")
	for i := range 10_000 { // a flood of random keys
		f.Fail(fmt.Sprint("random-", i))
		require.LessOrEqual(t, f.Tracked(), 100)
	}
	require.Equal(t, 100, f.Tracked())
	_, _, throttled := f.Throttled("random-9999")
	require.True(t, throttled, "the most recent are remembered")
	_, _, throttled = f.Throttled("random-0")
	require.False(t, throttled, "the oldest were forgotten")
	f.Fail("")
	require.Equal(t, 100, f.Tracked(), "an empty key is not tracked")
}

func TestFailuresDefaults(t *testing.T) {
	t.Parallel()
	f := NewFailures(FailuresConfig{})
	require.InDelta(t, 10, f.PerMinute(), 1e-9)
	require.Equal(t, 20, f.Burst())
	require.Equal(t, DefaultFailuresTracked, f.max)
}
