package schedule

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, s)
	require.NoError(t, err)
	return at
}

func TestCronInATimeZone(t *testing.T) {
	t.Parallel()
	anchor := mustTime(t, "2026-03-07T12:00:00Z")
	tm, err := ParseTiming("30 9 * * *", 0, "America/New_York", anchor)
	require.NoError(t, err)
	// 09:30 in New York: 14:30 UTC before the DST change of 2026-03-08, 13:30 after.
	require.Equal(t, []time.Time{
		mustTime(t, "2026-03-07T14:30:00Z"),
		mustTime(t, "2026-03-08T13:30:00Z"),
		mustTime(t, "2026-03-09T13:30:00Z"),
	}, tm.Preview(anchor, 3))

	six, err := ParseTiming("*/20 * * * * *", 0, "", anchor)
	require.NoError(t, err)
	require.Equal(t, mustTime(t, "2026-03-07T12:00:20Z"), six.Next(anchor))
	daily, err := ParseTiming("@daily", 0, "Europe/Paris", anchor)
	require.NoError(t, err)
	require.Equal(t, mustTime(t, "2026-03-07T23:00:00Z"), daily.Next(anchor))
}

func TestInterval(t *testing.T) {
	t.Parallel()
	anchor := mustTime(t, "2026-03-07T12:00:00Z")
	tm, err := ParseTiming("", 90*time.Second, "", anchor)
	require.NoError(t, err)
	require.Equal(t, mustTime(t, "2026-03-07T12:01:30Z"), tm.Next(anchor))
	require.Equal(t, mustTime(t, "2026-03-07T12:03:00Z"), tm.Next(anchor.Add(91*time.Second)))
	require.Equal(t, mustTime(t, "2026-03-07T12:03:00Z"), tm.Next(anchor.Add(90*time.Second)), "strictly after")
}

func TestBadTimingNamesTheField(t *testing.T) {
	t.Parallel()
	now := time.Now()
	cases := []struct {
		cron     string
		interval time.Duration
		tz       string
		field    string
	}{
		{"", 0, "", "cron"},
		{"* * * *", 0, "", "cron"},
		{"* * * * * * *", 0, "", "cron"},
		{"61 * * * *", 0, "", "cron"},
		{"* * * * *", time.Minute, "", "interval"},
		{"", time.Millisecond, "", "interval"},
		{"* * * * *", 0, "Mars/Olympus", "time_zone"},
		{"TZ=UTC * * * * *", 0, "", "cron"},
		{"@every 1m", 0, "", "cron"},
		{"0 0 30 2 *", 0, "", "cron"},
	}
	for _, tc := range cases {
		_, err := ParseTiming(tc.cron, tc.interval, tc.tz, now)
		var fe *FieldError
		require.True(t, errors.As(err, &fe), "%q %s %q: %v", tc.cron, tc.interval, tc.tz, err)
		require.Equal(t, tc.field, fe.Field, "%q: %v", tc.cron, err)
	}
	_, _, err := CheckCatchUp("sometimes", 0)
	require.ErrorContains(t, err, "catch_up:")
	_, _, err = CheckCatchUp("all", MaxCatchUp+1)
	require.ErrorContains(t, err, "max_catch_up:")
}

func TestCatchUpPolicies(t *testing.T) {
	t.Parallel()
	anchor := mustTime(t, "2026-03-07T12:00:00Z")
	tm, err := ParseTiming("", time.Minute, "", anchor)
	require.NoError(t, err)
	first := anchor.Add(time.Minute)
	at := func(m int) time.Time { return anchor.Add(time.Duration(m) * time.Minute) }

	// On time: every policy fires the one due tick.
	for _, p := range []string{CatchUpSkip, CatchUpLatest, CatchUpAll} {
		fire, next := tm.Due(first, first.Add(time.Second), p, 10)
		require.Equal(t, []time.Time{first}, fire, p)
		require.Equal(t, at(2), next, p)
	}
	// Not due yet.
	fire, next := tm.Due(first, anchor.Add(30*time.Second), CatchUpAll, 10)
	require.Empty(t, fire)
	require.Equal(t, first, next)

	// Down from 12:00:30 to 12:20:30: twenty ticks missed, the last 30 s late.
	now := at(20).Add(30 * time.Second)
	fire, next = tm.Due(first, now, CatchUpSkip, 10)
	require.Equal(t, []time.Time{at(20)}, fire, "skip: the last tick is within the grace")
	require.Equal(t, at(21), next)
	fire, _ = tm.Due(first, now.Add(2*time.Minute-30*time.Second), CatchUpSkip, 10)
	require.Equal(t, []time.Time{at(22)}, fire)
	fire, next = tm.Due(first, now, CatchUpLatest, 10)
	require.Equal(t, []time.Time{at(20)}, fire)
	require.Equal(t, at(21), next)
	fire, next = tm.Due(first, now, CatchUpAll, 5)
	require.Equal(t, []time.Time{at(16), at(17), at(18), at(19), at(20)}, fire, "all: bounded by the max, the most recent")
	require.Equal(t, at(21), next)
	// A year down walks nothing: the interval jumps.
	fire, _ = tm.Due(first, at(525600), CatchUpAll, 3)
	require.Equal(t, []time.Time{at(525598), at(525599), at(525600)}, fire)

	// A cron schedule catches up the same way.
	hourly, err := ParseTiming("0 * * * *", 0, "", anchor)
	require.NoError(t, err)
	fire, next = hourly.Due(mustTime(t, "2026-03-07T13:00:00Z"), mustTime(t, "2026-03-07T17:10:00Z"), CatchUpAll, 10)
	require.Len(t, fire, 5)
	require.Equal(t, mustTime(t, "2026-03-07T18:00:00Z"), next)
	fire, _ = hourly.Due(mustTime(t, "2026-03-07T13:00:00Z"), mustTime(t, "2026-03-07T17:10:00Z"), CatchUpSkip, 10)
	require.Empty(t, fire, "skip: a tick later than the grace does not run")
}

func TestKeyIsStable(t *testing.T) {
	t.Parallel()
	at := mustTime(t, "2026-03-07T12:00:00Z")
	require.Equal(t, Key("a", at), Key("a", at.In(time.FixedZone("x", 3600))))
	require.NotEqual(t, Key("a", at), Key("a", at.Add(time.Second)))
	require.NotEqual(t, Key("a", at), Key("b", at))
}
