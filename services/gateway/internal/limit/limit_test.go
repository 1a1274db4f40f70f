package limit

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clock is a manual clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTest(cfg Config) (*Limiter, *clock) {
	l := New(cfg)
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	l.now = c.now
	return l, c
}

func exceeded(t *testing.T, err error) *Exceeded {
	t.Helper()
	var ex *Exceeded
	require.True(t, errors.As(err, &ex), "want *Exceeded, got %v", err)
	return ex
}

func TestRateRefusesPastTheBurstAndRefills(t *testing.T) {
	t.Parallel()
	l, c := newTest(Config{RPS: 10, Burst: 3, InFlight: 100})
	for range 3 {
		release, err := l.Acquire("a", false)
		require.NoError(t, err)
		release()
	}
	_, err := l.Acquire("a", false)
	ex := exceeded(t, err)
	require.Equal(t, Rate, ex.Reason)
	require.Equal(t, "a", ex.Tenant)
	require.Equal(t, 100*time.Millisecond, ex.RetryAfter, "one token every 100 ms")
	require.Contains(t, ex.Error(), "rate limit of 10 calls/s (burst 3)")

	// A refusal takes no token: after the advertised delay the call passes.
	c.t = c.t.Add(ex.RetryAfter)
	release, err := l.Acquire("a", false)
	require.NoError(t, err)
	release()
	_, err = l.Acquire("a", false)
	require.Error(t, err)
}

func TestRateSpreadsTheRetriesOfACrowd(t *testing.T) {
	t.Parallel()
	l, c := newTest(Config{RPS: 10, Burst: 1, InFlight: 100})
	release, err := l.Acquire("a", false)
	require.NoError(t, err)
	release()
	// Five callers refused at once are told five successive tokens, not all the next one.
	var after []time.Duration
	for range 5 {
		_, err := l.Acquire("a", false)
		after = append(after, exceeded(t, err).RetryAfter)
	}
	require.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond, 500 * time.Millisecond}, after)
	// Each coming back when told is admitted: one refusal per caller.
	start := c.t
	for _, d := range after {
		c.t = start.Add(d)
		release, err := l.Acquire("a", false)
		require.NoError(t, err, "retry after %s", d)
		release()
	}
	// Once the handed-out times have passed, a refusal waits only for the next token.
	c.t = c.t.Add(time.Second)
	release, err = l.Acquire("a", false)
	require.NoError(t, err)
	release()
	_, err = l.Acquire("a", false)
	require.Equal(t, 100*time.Millisecond, exceeded(t, err).RetryAfter)
}

func TestInFlightCapsConcurrentCalls(t *testing.T) {
	t.Parallel()
	l, _ := newTest(Config{RPS: 1000, Burst: 1000, InFlight: 2})
	r1, err := l.Acquire("a", false)
	require.NoError(t, err)
	r2, err := l.Acquire("a", false)
	require.NoError(t, err)
	_, err = l.Acquire("a", false)
	ex := exceeded(t, err)
	require.Equal(t, InFlight, ex.Reason)
	require.Equal(t, time.Second, ex.RetryAfter)

	// Releasing twice frees one slot only.
	r1()
	r1()
	r3, err := l.Acquire("a", false)
	require.NoError(t, err)
	_, err = l.Acquire("a", false)
	require.Error(t, err)
	r2()
	r3()
}

func TestWaitsHaveACapOfTheirOwn(t *testing.T) {
	t.Parallel()
	l, _ := newTest(Config{RPS: 1000, Burst: 1000, InFlight: 1, Waits: 2})
	w1, err := l.Acquire("a", true)
	require.NoError(t, err)
	w2, err := l.Acquire("a", true)
	require.NoError(t, err)
	_, err = l.Acquire("a", true)
	ex := exceeded(t, err)
	require.Equal(t, Waits, ex.Reason)
	require.Equal(t, "the limit of 2 waiting calls", ex.Limit)
	require.Equal(t, time.Second, ex.RetryAfter)

	// Waiting calls leave the calls in flight to others, and the other way round.
	c1, err := l.Acquire("a", false)
	require.NoError(t, err, "the waits hold no slot of the calls in flight")
	_, err = l.Acquire("a", false)
	require.Equal(t, InFlight, exceeded(t, err).Reason)
	c1()
	c1()
	w2()
	w3, err := l.Acquire("a", true)
	require.NoError(t, err, "a released wait frees its slot")
	c2, err := l.Acquire("a", false)
	require.NoError(t, err, "releasing a call twice freed one slot of the calls in flight, not a wait")
	_, err = l.Acquire("a", true)
	require.Equal(t, Waits, exceeded(t, err).Reason, "two waits held again")
	w1()
	w3()
	c2()
}

func TestATenantThatOnlyWaitsIsNotForgotten(t *testing.T) {
	t.Parallel()
	l, _ := newTest(Config{RPS: 1, Burst: 1, InFlight: 10, MaxTenants: 1})
	w, err := l.Acquire("waiting", true)
	require.NoError(t, err)
	_, err = l.Acquire("other", false)
	require.Equal(t, Tenants, exceeded(t, err).Reason, "a tenant holding a wait is busy")
	w()
	release, err := l.Acquire("other", false)
	require.NoError(t, err, "idle once its wait ended")
	release()
}

func TestTenantsAreIndependent(t *testing.T) {
	t.Parallel()
	l, _ := newTest(Config{RPS: 1, Burst: 5, InFlight: 3})
	var held []func()
	refused := 0
	for range 50 {
		release, err := l.Acquire("flood", false)
		if err != nil {
			refused++
			continue
		}
		held = append(held, release)
	}
	require.Equal(t, 47, refused, "3 in flight, the rest refused")
	for range 3 {
		release, err := l.Acquire("quiet", false)
		require.NoError(t, err, "another tenant's flood does not touch this one's limits")
		defer release()
	}
	for _, r := range held {
		r()
	}
}

func TestTableIsBoundedAndForgetsIdleTenants(t *testing.T) {
	t.Parallel()
	l, _ := newTest(Config{RPS: 1, Burst: 1, InFlight: 10, MaxTenants: 3})
	busy, err := l.Acquire("busy", false)
	require.NoError(t, err)
	for i := range 10 {
		release, err := l.Acquire(fmt.Sprintf("t%d", i), false)
		require.NoError(t, err)
		release()
		require.LessOrEqual(t, l.Tenants(), 3)
	}
	// The busy tenant was never forgotten: its bucket is still empty.
	_, err = l.Acquire("busy", false)
	require.Equal(t, Rate, exceeded(t, err).Reason)

	busy()

	// A full table of busy tenants refuses a new one rather than grow.
	var fresh []func()
	l2, _ := newTest(Config{RPS: 1, Burst: 1, InFlight: 10, MaxTenants: 2})
	for _, name := range []string{"x", "y"} {
		r, err := l2.Acquire(name, false)
		require.NoError(t, err)
		fresh = append(fresh, r)
	}
	_, err = l2.Acquire("z", false)
	require.Equal(t, Tenants, exceeded(t, err).Reason)
	require.Equal(t, 2, l2.Tenants())
	for _, r := range fresh {
		r()
	}
	r, err := l2.Acquire("z", false)
	require.NoError(t, err, "once a tenant is idle it may be forgotten")
	r()
	require.Equal(t, 2, l2.Tenants())
}
