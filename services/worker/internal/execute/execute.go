// Package execute runs one command: it loads the command's context and keychain,
// renders each tool's configuration, runs the tools in order under their policies
// (continue, retry, jump, break, fail, set) and turns what happened into the command's
// one outcome event, with its result (inline or by reference), its step logs and every
// resolved secret masked.
package execute

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/internal/playbook/template"
	"github.com/noetl/noetl/services/worker/internal/results"
	"github.com/noetl/noetl/services/worker/internal/scrub"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// Executor runs commands for one worker.
type Executor struct {
	// Pool is the worker's pool: admit refuses the commands of another pool's playbooks.
	Pool string
	// Renderer renders the tools' templates.
	Renderer *template.Renderer
	// Tools runs the tools by kind.
	Tools tools.Registry
	// Keychain resolves the keychain entries commands carry (nil: a command with
	// keychain entries fails).
	Keychain *tools.Keychain
	// Results stores results over the inline budget and loads referenced ones.
	Results *results.Store
	// Log receives what the executor reports on the side (logs it could not store).
	Log *slog.Logger
	// Tracer starts a span per tool call.
	Tracer trace.Tracer
	// Metrics counts the runs.
	Metrics Metrics

	// plans keeps what is read from each tool configuration before rendering (plan.go).
	plans planCache
}

// Metrics are the executor's collectors.
type Metrics struct {
	// Runs counts commands by pool, tool and outcome (noetl_worker_commands_total).
	Runs *prometheus.CounterVec
	// Duration is the tools' run time (noetl_worker_tool_seconds).
	Duration *prometheus.HistogramVec
	// Scrubbed counts the secrets masked (noetl_worker_secrets_scrubbed_total).
	Scrubbed prometheus.Counter
}

// NewMetrics returns the executor's collectors for a worker of pool.
func NewMetrics(pool string) Metrics {
	return Metrics{
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "noetl_worker_commands_total", Help: "Commands run, by pool, tool and outcome."},
			[]string{"pool", "tool", "outcome"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "noetl_worker_tool_seconds", Help: "Tool run time.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 12)}, []string{"tool"}),
		Scrubbed: prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_worker_secrets_scrubbed_total",
			Help:        "Occurrences of a credential's secret (raw or encoded) the worker masked in a command's result, events, errors and logs.",
			ConstLabels: prometheus.Labels{"pool": pool}}),
	}
}

// Collectors lists the collectors, for registration.
func (m Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Runs, m.Duration, m.Scrubbed}
}

// Execute renders and runs a command and returns its outcome: one command.completed
// carrying the result, or one command.failed carrying the error. The secrets of the
// credentials resolved while it runs are masked in the result (before it is measured, so
// a result stored by reference is masked too) and in every event. What the tools wrote
// (stdout, stderr, diagnostics) travels as the step's logs in the outcome event
// (attachLogs).
func (e *Executor) Execute(ctx context.Context, cmd *eventv1.Command) []*eventv1.Event {
	sc := scrub.FromContext(ctx)
	if sc == nil {
		sc = e.NewScrubber()
		ctx = scrub.NewContext(ctx, sc)
	}
	ctx, logs := withLogs(ctx)
	return ScrubEvents(sc, e.attachLogs(ctx, cmd, e.execute(ctx, cmd, sc), logs, sc))
}

// CommandEvent is a worker's event of type typ for cmd, its id derived from the command.
func CommandEvent(cmd *eventv1.Command, typ string) *eventv1.Event {
	return &eventv1.Event{
		EventId:           domain.EventID(cmd.GetCommandId(), typ),
		ExecutionId:       cmd.GetExecutionId(),
		Tenant:            cmd.GetTenant(),
		Type:              typ,
		Step:              cmd.GetStep(),
		CommandId:         cmd.GetCommandId(),
		Iteration:         cmd.GetIteration(),
		Attempt:           cmd.GetAttempt(),
		ParentExecutionId: cmd.GetParentExecutionId(),
		CauseEventId:      cmd.GetIssuedEventId(),
		Producer:          "worker",
		ProduceTime:       timestamppb.Now(),
	}
}

func (e *Executor) execute(ctx context.Context, cmd *eventv1.Command, sc *scrub.Scrubber) []*eventv1.Event {
	mk := func(typ string) *eventv1.Event { return CommandEvent(cmd, typ) }
	begun := timestamppb.Now()
	// The command's one outcome event: command.completed carrying the result (what
	// call.done carried once), or command.failed carrying the error; each says when the
	// command began (command.started is published only for a long run, see package consume).
	outcomeOf := func(typ string) *eventv1.Event {
		ev := mk(typ)
		ev.StartTime = begun
		return ev
	}
	fail := func(info *eventv1.ErrorInfo) []*eventv1.Event {
		// Scrub before clipping, which could cut a secret and leave part of it.
		info.Message = clip(sc.String(info.GetMessage()))
		failed := outcomeOf(domain.EventCommandFailed)
		failed.Error = info
		return []*eventv1.Event{failed}
	}
	if err := e.admit(cmd); err != nil {
		return fail(&eventv1.ErrorInfo{Code: "refused", Message: err.Error()})
	}
	kind := "noop"
	if len(cmd.GetTools()) > 0 {
		kind = cmd.GetTools()[0].GetKind()
	}
	// The command's deadline is its execution's (spec.timeout or the start's timeout). The
	// orchestrator's timer ends the execution at it and the cancellation stops its tools;
	// this is the backstop, DeadlineGrace later, for a worker that missed the
	// cancellation: a command past it is not started, and a tool still running is stopped.
	deadline := cmd.GetDeadline()
	if deadline != nil && !time.Now().Before(deadline.AsTime().Add(DeadlineGrace)) {
		return fail(&eventv1.ErrorInfo{Code: "deadline_exceeded", Message: fmt.Sprintf("step %s: the execution's deadline (%s) passed before the command started", cmd.GetStep(), deadline.AsTime().UTC().Format(time.RFC3339Nano))})
	}
	begin := time.Now()
	runCtx, cancelRun := ctx, context.CancelFunc(func() {})
	if deadline != nil {
		runCtx, cancelRun = context.WithDeadlineCause(ctx, deadline.AsTime().Add(DeadlineGrace), errExecutionDeadline)
	}
	cancelStep := context.CancelFunc(func() {})
	if t := cmd.GetTimeout().AsDuration(); t > 0 {
		runCtx, cancelStep = context.WithTimeoutCause(runCtx, t, errStepTimeout)
	}
	out, err := e.run(runCtx, cmd)
	timedOut := errors.Is(context.Cause(runCtx), errStepTimeout)
	pastDeadline := errors.Is(context.Cause(runCtx), errExecutionDeadline)
	cancelStep()
	cancelRun()
	e.Metrics.Duration.WithLabelValues(kind).Observe(time.Since(begin).Seconds())
	if err != nil {
		e.Metrics.Runs.WithLabelValues(e.Pool, kind, "error").Inc()
		info := &eventv1.ErrorInfo{Code: "tool_error", Message: err.Error()}
		var te *tools.Error
		if errors.As(err, &te) {
			info.Retryable = te.Retryable
		}
		switch {
		case timedOut:
			// The tool was stopped at the step's bound: say so, whatever the tool made of
			// its cancelled context.
			info = &eventv1.ErrorInfo{Code: "deadline_exceeded", Retryable: true, Message: stepTimeoutMessage(cmd)}
		case pastDeadline:
			info = &eventv1.ErrorInfo{Code: "deadline_exceeded", Message: fmt.Sprintf("step %s: the execution's deadline (%s) passed and the tool was stopped", cmd.GetStep(), deadline.AsTime().UTC().Format(time.RFC3339Nano))}
		}
		var re *renderError
		if errors.As(err, &re) {
			info.Code = "template_error"
		}
		var rr *retryRequest
		if errors.As(err, &rr) {
			info.Code = "retry"
			info.Retryable = true
			evs := fail(info)
			// command.failed carries the retry request the orchestrator turns into a timer.
			evs[len(evs)-1].PayloadJson, _ = json.Marshal(domain.FailedPayload{Retry: &domain.RetryRequest{Attempts: rr.attempts, DelaySeconds: rr.delay.Seconds()}})
			return evs
		}
		return fail(info)
	}
	e.Metrics.Runs.WithLabelValues(e.Pool, kind, "ok").Inc()
	out.result = sc.Value(out.result)
	for scope, m := range out.set {
		out.set[scope], _ = sc.Value(m).(map[string]any)
	}
	done := outcomeOf(domain.EventCommandCompleted)
	if len(out.set) > 0 {
		p, err := json.Marshal(domain.CallPayload{Set: out.set})
		if err != nil {
			return fail(&eventv1.ErrorInfo{Code: "tool_error", Message: "policy set is not JSON-encodable: " + err.Error()})
		}
		done.PayloadJson = p
	}
	b, ref, serr := e.Results.Put(ctx, cmd, out.result)
	var se *results.StoreError
	switch {
	case errors.As(serr, &se):
		return fail(&eventv1.ErrorInfo{Code: "result_store_error", Message: fmt.Sprintf("step %s: store the result: %v", cmd.GetStep(), se.Unwrap()), Retryable: true})
	case serr != nil:
		return fail(&eventv1.ErrorInfo{Code: "tool_error", Message: "result is not JSON-encodable: " + serr.Error()})
	case ref != nil:
		done.ResultRef = ref
		return []*eventv1.Event{done}
	}
	done.ResultJson = b
	return []*eventv1.Event{done}
}

// errStepTimeout is the cause of a command's context past its step's spec.timeout.
var errStepTimeout = errors.New("the step's spec.timeout passed")

// DeadlineGrace is how long past a command's deadline the worker stops it itself: long
// enough for the execution's own timer (checked every second) to end the execution first
// with deadline_exceeded, so the command's failure never races it.
const DeadlineGrace = 5 * time.Second

// errExecutionDeadline is the cause of a command's context past its deadline (the
// execution's).
var errExecutionDeadline = errors.New("the execution's deadline passed")

// stepTimeoutMessage says that cmd's attempt was stopped at its timeout, naming the field
// it comes from (the step's spec.timeout unless the command says otherwise).
func stepTimeoutMessage(cmd *eventv1.Command) string {
	field := cmd.GetTimeoutField()
	if field == "" {
		field = "spec.timeout"
	}
	return fmt.Sprintf("step %s: the attempt ran past its timeout of %s (%s) and was stopped", cmd.GetStep(), cmd.GetTimeout().AsDuration(), field)
}

// maxErrorMessage bounds the message of an error carried by an event.
const maxErrorMessage = 16 << 10

// clip keeps the head and the tail of a message longer than maxErrorMessage.
func clip(msg string) string {
	if len(msg) <= maxErrorMessage {
		return msg
	}
	half := maxErrorMessage / 2
	return fmt.Sprintf("%s ... [%d bytes elided] ... %s", strings.ToValidUTF8(msg[:half], ""), len(msg)-2*half, strings.ToValidUTF8(msg[len(msg)-half:], ""))
}

// FailTooLarge replaces a command's outcome that could not be published by a
// command.failed saying so: the outcome's envelope (command, step, iteration, attempt,
// times) without what made it too large.
func FailTooLarge(events []*eventv1.Event, cause error) []*eventv1.Event {
	f := proto.Clone(events[len(events)-1]).(*eventv1.Event)
	f.Type, f.EventId = domain.EventCommandFailed, domain.EventID(f.GetCommandId(), domain.EventCommandFailed)
	f.PayloadJson, f.ResultJson, f.ResultRef = nil, nil, nil
	f.Error = &eventv1.ErrorInfo{Code: "outcome_too_large", Message: clip(fmt.Sprintf("step %s: its outcome cannot be published: %v; results travel by reference, so this is an oversized error message or policy set", f.GetStep(), cause))}
	return []*eventv1.Event{f}
}

// retryRequest ends a command asking the orchestrator to run it again after delay.
type retryRequest struct {
	attempts int32
	delay    time.Duration
	cause    error
}

func (r *retryRequest) Error() string {
	if r.cause != nil {
		return fmt.Sprintf("retry in %s: %v", r.delay, r.cause)
	}
	return fmt.Sprintf("retry in %s", r.delay)
}

type renderError struct{ err error }

func (e *renderError) Error() string { return e.err.Error() }
func (e *renderError) Unwrap() error { return e.err }

// outcome is what running a command's tools produced.
type outcome struct {
	result any
	// set holds the ctx. (and iter.) updates made by policy rules, by scope.
	set map[string]map[string]any
}

// admit re-checks a command's origin against this worker's pool: a system worker runs
// only commands of system/ playbooks, and only system workers run system_* tools, so a
// command pinned to the wrong pool is refused rather than run with the wrong privileges.
func (e *Executor) admit(cmd *eventv1.Command) error {
	system := strings.HasPrefix(cmd.GetPlaybookPath(), "system/")
	if e.Pool == "system" && !system {
		return fmt.Errorf("step %s: the system pool refuses a command of %q, which is not a system/ playbook", cmd.GetStep(), cmd.GetPlaybookPath())
	}
	if e.Pool != "system" && system {
		return fmt.Errorf("step %s: system/ playbook commands run only on the system pool, not %q", cmd.GetStep(), e.Pool)
	}
	_, override := domain.OverrideName(cmd.GetTenant(), cmd.GetPlaybookPath())
	for _, t := range cmd.GetTools() {
		// A tenant's override of a system playbook may use the tenant-safe system tools
		// on its own pool; every other system tool runs only on the system pool.
		safe := override && slices.Contains(playbook.TenantSafeToolKinds, t.GetKind())
		if strings.HasPrefix(t.GetKind(), "system_") && e.Pool != "system" && !safe {
			return fmt.Errorf("step %s: tool kind %s runs only on the system pool", cmd.GetStep(), t.GetKind())
		}
	}
	return nil
}

// NewScrubber returns an empty scrubber for one command, counted in Metrics.Scrubbed.
func (e *Executor) NewScrubber() *scrub.Scrubber {
	if e.Metrics.Scrubbed == nil {
		return scrub.New(nil)
	}
	return scrub.New(e.Metrics.Scrubbed)
}

// ScrubEvents masks the command's secrets in every field of its events that carries text
// from the tool: payloads, results, result summaries and schemas, and error messages. The
// result itself was scrubbed before it was encoded; this pass catches the rest.
func ScrubEvents(sc *scrub.Scrubber, events []*eventv1.Event) []*eventv1.Event {
	if sc.Empty() {
		return events
	}
	for _, ev := range events {
		ev.PayloadJson = sc.JSON(ev.GetPayloadJson())
		ev.ResultJson = sc.JSON(ev.GetResultJson())
		if ref := ev.GetResultRef(); ref != nil {
			ref.ExtractedJson = sc.JSON(ref.GetExtractedJson())
			ref.SchemaJson = sc.String(ref.GetSchemaJson())
		}
		if e := ev.GetError(); e != nil {
			e.Message = sc.String(e.GetMessage()) // a mask is shorter than what it replaces: no clip
		}
	}
	return events
}
