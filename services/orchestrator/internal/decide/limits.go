package decide

import (
	"fmt"

	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
)

// Default limits of one execution, used when the operator sets none. They are generous
// but finite: a cycle with no exit ends instead of filling the log.
//
//   - DefaultMaxStepEntries: 10,000 entries of one step covers pagination through 10,000
//     pages; a two-step cycle then ends after about 120,000 events. Loop iterations and
//     retries are not entries, so a loop over any collection is not bounded by it.
//   - DefaultMaxEvents: 1,000,000 events is a loop of about 250,000 iterations (four events
//     each), and a log of roughly a gigabyte at a kilobyte an event.
const (
	DefaultMaxStepEntries = 10_000
	DefaultMaxEvents      = 1_000_000
)

// Limit is one bound on an execution and the setting it comes from, as failure messages
// name it.
type Limit struct {
	// Max is the bound; zero or less means not set.
	Max int64
	// Source names the setting, for example "NOETL_MAX_EVENTS" or
	// `max_events of tenant "acme" (NOETL_TENANT_LIMITS)`.
	Source string
}

// Limits bound one execution: how many times one step may be entered, and how many events
// its log may hold.
type Limits struct {
	// StepEntries bounds the entries of each step (a step's epoch).
	StepEntries Limit
	// Events bounds the events of the execution (its seq).
	Events Limit
}

// EffectiveLimits combines the operator's limits for the execution's tenant with the
// playbook's own: a field the operator leaves unset takes the default, and the playbook's
// value applies only when it is lower. The operator's limit is a ceiling that a playbook
// can lower and never raise.
func EffectiveLimits(pb playbook.Limits, op Limits) Limits {
	pick := func(own int64, op Limit, def int64, name string) Limit {
		if op.Max <= 0 {
			op = Limit{Max: def, Source: "the default " + name}
		}
		if own > 0 && own <= op.Max {
			return Limit{Max: own, Source: playbook.LimitsField + "." + name}
		}
		return op
	}
	return Limits{
		StepEntries: pick(pb.MaxStepEntries, op.StepEntries, DefaultMaxStepEntries, playbook.LimitMaxStepEntries),
		Events:      pick(pb.MaxEvents, op.Events, DefaultMaxEvents, playbook.LimitMaxEvents),
	}
}

// CodeLimitExceeded is the error code of an execution failed by one of its limits.
const CodeLimitExceeded = "limit_exceeded"

// checkEntry fails the execution instead of entering step name for the epoch-th time when
// that is over the step's limit of entries, or when the log already holds the execution's
// limit of events.
func (d *decider) checkEntry(name string, epoch int32) error {
	if l := d.limits.StepEntries; int64(epoch) > l.Max {
		return &Error{Step: name, Code: CodeLimitExceeded, Msg: fmt.Sprintf("would be entered %d times, over the limit of %d (%s)", epoch, l.Max, l.Source)}
	}
	return d.checkEvents(name, "entering it")
}

// checkEvents fails the execution instead of adding work to step name (what says what)
// once its log, with the events of this decision so far, holds its limit of events. The
// events of commands already running are still committed, so the log ends a few events
// past the limit.
func (d *decider) checkEvents(name, what string) error {
	n := d.st.GetSeq() + int64(len(d.out))
	if l := d.limits.Events; n >= l.Max {
		return &Error{Step: name, Code: CodeLimitExceeded, Msg: fmt.Sprintf("the execution has %d events, at the limit of %d (%s); not %s", n, l.Max, l.Source, what)}
	}
	return nil
}

// checkHeld fails the execution once a step of it dropped events it could not hold until
// their command was issued (domain.MaxHeldEvents, domain.MaxHeldBytes; StepState.HeldDropped):
// the step may then wait for a completion the state no longer has, so the execution ends
// saying so instead of hanging. Only a lost tail of the log, with more of a step's commands
// completing before the next decision than the bounds hold, comes here.
func (d *decider) checkHeld() error {
	for _, name := range d.active.names {
		if s := d.st.GetSteps()[name]; s.GetHeldDropped() > 0 {
			return &Error{Step: name, Code: CodeLimitExceeded, Msg: fmt.Sprintf(
				"%d events of its commands arrived before the log showed those commands issued (the tail of the log was lost) and were dropped: a step holds at most %d such events, %d bytes; the execution cannot finish reliably",
				s.GetHeldDropped(), domain.MaxHeldEvents, domain.MaxHeldBytes)}
		}
	}
	return nil
}
