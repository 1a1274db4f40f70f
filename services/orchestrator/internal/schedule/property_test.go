package schedule

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Whatever the timing, downtime and policy, Due fires only ticks that are due, in order,
// at most the max, and continues after now; skip fires nothing later than the grace.
func TestDueProperties(t *testing.T) {
	t.Parallel()
	anchor := time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)
	rapid.Check(t, func(t *rapid.T) {
		var tm *Timing
		var err error
		if rapid.Bool().Draw(t, "cron") {
			expr := rapid.SampledFrom([]string{"* * * * *", "*/7 * * * *", "0 */3 * * *", "*/15 * * * * *", "0 9 * * 1-5", "@hourly"}).Draw(t, "expr")
			tz := rapid.SampledFrom([]string{"", "UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"}).Draw(t, "tz")
			tm, err = ParseTiming(expr, 0, tz, anchor)
		} else {
			tm, err = ParseTiming("", time.Duration(rapid.Int64Range(1, 7200).Draw(t, "seconds"))*time.Second, "", anchor)
		}
		if err != nil {
			t.Fatal(err)
		}
		next := tm.Next(anchor)
		now := next.Add(time.Duration(rapid.Int64Range(-3600, 3*86400).Draw(t, "late")) * time.Second)
		policy := rapid.SampledFrom([]string{CatchUpSkip, CatchUpLatest, CatchUpAll}).Draw(t, "policy")
		maxCU := rapid.IntRange(1, 50).Draw(t, "max")
		fire, after := tm.Due(next, now, policy, maxCU)
		if !after.After(now) {
			t.Fatalf("next tick %s is not after now %s", after, now)
		}
		if len(fire) > maxCU || (policy != CatchUpAll && len(fire) > 1) {
			t.Fatalf("%s fired %d ticks (max %d)", policy, len(fire), maxCU)
		}
		for i, at := range fire {
			if at.Before(next) || at.After(now) {
				t.Fatalf("tick %s is not due (next %s, now %s)", at, next, now)
			}
			if i > 0 && !at.After(fire[i-1]) {
				t.Fatalf("ticks out of order: %v", fire)
			}
			if policy == CatchUpSkip && now.Sub(at) > Grace {
				t.Fatalf("skip fired %s, later than the grace at %s", at, now)
			}
		}
		if !next.After(now) && policy != CatchUpSkip && len(fire) == 0 {
			t.Fatalf("%s fired nothing though %s was due at %s", policy, next, now)
		}
		if len(fire) > 0 && tm.Next(fire[len(fire)-1]) != after {
			t.Fatalf("the last fired tick %s is not followed by the next %s", fire[len(fire)-1], after)
		}
	})
}

// FuzzParseTiming: any expression and zone either is refused naming a field or yields
// ticks strictly after their reference.
func FuzzParseTiming(f *testing.F) {
	for _, s := range []string{"* * * * *", "0 9 * * 1-5", "*/5 * * * * *", "@daily", "61 * * * *", "TZ=UTC * * * * *", "0 0 30 2 *"} {
		f.Add(s, "Europe/Berlin")
	}
	anchor := time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, expr, tz string) {
		tm, err := ParseTiming(expr, 0, tz, anchor)
		if err != nil {
			if _, ok := err.(*FieldError); !ok {
				t.Fatalf("%q %q: %T %v", expr, tz, err, err)
			}
			return
		}
		if n := tm.Next(anchor); !n.After(anchor) {
			t.Fatalf("%q %q: next %s is not after %s", expr, tz, n, anchor)
		}
	})
}
