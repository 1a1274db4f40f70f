// Package schedule is the orchestrator's scheduler: schedules stored in noetl.schedule,
// their timing (cron expressions through github.com/robfig/cron/v3, or fixed intervals),
// the ScheduleService that manages them and the loop that ticks them. A tick is recorded
// in noetl.schedule_tick in the transaction that advances its schedule, then started with
// an idempotency key derived from the schedule's id and the tick time, so it starts one
// execution across any number of replicas and any crash.
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Catch-up policies: what a schedule does with the ticks it missed while no orchestrator ran.
const (
	// CatchUpSkip runs no tick later than Grace.
	CatchUpSkip = "skip"
	// CatchUpLatest runs the most recent missed tick.
	CatchUpLatest = "latest"
	// CatchUpAll runs the missed ticks, at most the schedule's max, the most recent ones.
	CatchUpAll = "all"
)

// Grace is how late a tick may be and still run under CatchUpSkip.
const Grace = time.Minute

// Bounds of a schedule's timing.
const (
	// MinInterval is the shortest fixed interval.
	MinInterval = time.Second
	// DefaultMaxCatchUp and MaxCatchUp bound the ticks CatchUpAll runs.
	DefaultMaxCatchUp = 10
	MaxCatchUp        = 1000
)

// parser reads 5 fields, or 6 with seconds first, and descriptors (@daily, @every 5m).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// FieldError is a refused value of one field of a schedule.
type FieldError struct {
	// Field names the field: cron, interval, time_zone, catch_up, max_catch_up, ...
	Field string
	// Reason says what is wrong with it.
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Timing is a schedule's parsed timing: a cron expression in a time zone, or a fixed
// interval counted from an anchor.
type Timing struct {
	cron     cron.Schedule
	loc      *time.Location
	interval time.Duration
	anchor   time.Time
}

// ParseTiming parses exactly one of expr (a cron expression) and interval, with the IANA
// time zone tz (empty: UTC). anchor is where an interval's ticks are counted from. A bad
// value is a *FieldError naming its field.
func ParseTiming(expr string, interval time.Duration, tz string, anchor time.Time) (*Timing, error) {
	expr = strings.TrimSpace(expr)
	switch {
	case expr == "" && interval == 0:
		return nil, &FieldError{"cron", "one of cron and interval is required"}
	case expr != "" && interval != 0:
		return nil, &FieldError{"interval", "give either cron or interval, not both"}
	}
	if interval != 0 {
		if interval < MinInterval {
			return nil, &FieldError{"interval", fmt.Sprintf("%s is shorter than the minimum of %s", interval, MinInterval)}
		}
		if tz != "" {
			if _, err := time.LoadLocation(tz); err != nil {
				return nil, &FieldError{"time_zone", fmt.Sprintf("%q is not an IANA time zone", tz)}
			}
		}
		return &Timing{interval: interval, anchor: anchor}, nil
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, &FieldError{"cron", "name the time zone in time_zone, not in the expression"}
	}
	if strings.HasPrefix(expr, "@every") {
		return nil, &FieldError{"cron", "use interval for a fixed interval, not @every"}
	}
	if n := len(strings.Fields(expr)); !strings.HasPrefix(expr, "@") && n != 5 && n != 6 {
		return nil, &FieldError{"cron", fmt.Sprintf("%q has %d fields, want 5 (minute hour day-of-month month day-of-week) or 6 (seconds first)", expr, n)}
	}
	s, err := parser.Parse(expr)
	if err != nil {
		return nil, &FieldError{"cron", fmt.Sprintf("%q: %v", expr, err)}
	}
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, &FieldError{"time_zone", fmt.Sprintf("%q is not an IANA time zone", tz)}
	}
	t := &Timing{cron: s, loc: loc}
	if t.Next(anchor).IsZero() {
		return nil, &FieldError{"cron", fmt.Sprintf("%q never fires", expr)}
	}
	return t, nil
}

// Next returns the first tick strictly after t (zero when there is none).
func (t *Timing) Next(after time.Time) time.Time {
	if t.interval > 0 {
		if after.Before(t.anchor) {
			return t.anchor.Add(t.interval)
		}
		k := after.Sub(t.anchor)/t.interval + 1
		return t.anchor.Add(k * t.interval).UTC()
	}
	return t.cron.Next(after.In(t.loc)).UTC()
}

// Preview returns the n ticks after t.
func (t *Timing) Preview(after time.Time, n int) []time.Time {
	out := make([]time.Time, 0, n)
	for range n {
		next := t.Next(after)
		if next.IsZero() {
			break
		}
		out = append(out, next)
		after = next
	}
	return out
}

// CheckCatchUp validates a catch-up policy and its max, returning the defaults for empty
// and zero values.
func CheckCatchUp(policy string, maxCatchUp int) (string, int, error) {
	switch policy {
	case "":
		policy = CatchUpSkip
	case CatchUpSkip, CatchUpLatest, CatchUpAll:
	default:
		return "", 0, &FieldError{"catch_up", fmt.Sprintf("%q is not one of skip, latest, all", policy)}
	}
	switch {
	case maxCatchUp == 0:
		maxCatchUp = DefaultMaxCatchUp
	case maxCatchUp < 0 || maxCatchUp > MaxCatchUp:
		return "", 0, &FieldError{"max_catch_up", fmt.Sprintf("%d is outside 1..%d", maxCatchUp, MaxCatchUp)}
	}
	return policy, maxCatchUp, nil
}

// Due returns the ticks to run of a schedule whose next tick is next, at now, under the
// catch-up policy with its max, and the schedule's next tick after them (the first after
// now). It is pure: the loop passes the clock in.
func (t *Timing) Due(next, now time.Time, policy string, maxCatchUp int) (fire []time.Time, after time.Time) {
	if next.After(now) {
		return nil, next
	}
	// The due ticks, oldest first, keeping only the last maxCatchUp (enough for every
	// policy). An interval jumps over a long downtime instead of walking it.
	keep := max(maxCatchUp, 1)
	if t.interval > 0 {
		if lo := t.Next(now.Add(-t.interval * time.Duration(keep))); lo.After(next) {
			next = lo
		}
	}
	var due []time.Time
	for tick := next; !tick.IsZero() && !tick.After(now); tick = t.Next(tick) {
		due = append(due, tick)
		if len(due) > keep {
			due = due[1:]
		}
	}
	after = t.Next(now)
	if len(due) == 0 {
		return nil, after
	}
	latest := due[len(due)-1]
	switch policy {
	case CatchUpAll:
		return due, after
	case CatchUpLatest:
		return []time.Time{latest}, after
	default:
		if now.Sub(latest) <= Grace {
			return []time.Time{latest}, after
		}
		return nil, after
	}
}

// errNotFound is a schedule that does not exist.
var errNotFound = errors.New("schedule not found")
