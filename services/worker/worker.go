// Package worker is the NoETL worker service: it claims commands of its pool from
// NOETL_COMMANDS, renders their templates, runs the tools and publishes the outcome as
// events. A command is acked only after its outcome is published.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/app"
	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// Config is the worker's configuration.
type Config struct {
	AdminAddr   string
	NATSURL     string
	Pool        string
	Concurrency int
	Partitions  int
	Python      string
	ID          string
	// OrchestratorAddr is where credentials are resolved (CredentialService).
	OrchestratorAddr string
	// AllowPrivateHTTP lets the http tool reach loopback and private addresses (dev, tests).
	AllowPrivateHTTP bool

	// AdminListener, when set, is used instead of AdminAddr.
	AdminListener net.Listener `json:"-"`
}

// Flags binds the configuration to flags and NOETL_* env vars.
func (c *Config) Flags(fs *config.FlagSet) {
	fs.String(&c.AdminAddr, "admin", "NOETL_WORKER_ADMIN", "127.0.0.1:9064", "admin HTTP listen address (/livez, /readyz, /metrics)")
	fs.String(&c.NATSURL, "nats", "NOETL_NATS_URL", "nats://127.0.0.1:4222", "NATS URL")
	fs.String(&c.Pool, "pool", "NOETL_WORKER_POOL", "shared", "worker pool whose commands this worker runs")
	fs.Int(&c.Concurrency, "concurrency", "NOETL_WORKER_CONCURRENCY", 64, "commands run at once")
	fs.Int(&c.Partitions, "partitions", "NOETL_PARTITIONS", natsx.DefaultPartitions, "execution partitions")
	fs.String(&c.Python, "python", "NOETL_PYTHON", "python3", "python interpreter for kind: python")
	fs.String(&c.ID, "id", "NOETL_WORKER_ID", "", "worker id reported in events (default: host name)")
	fs.String(&c.OrchestratorAddr, "orchestrator", "NOETL_ORCHESTRATOR_ADDR", "127.0.0.1:50061", "orchestrator gRPC address (credential resolution)")
	fs.Bool(&c.AllowPrivateHTTP, "allow-private-http", "NOETL_HTTP_ALLOW_PRIVATE", false, "let the http tool reach loopback and private addresses")
}

// Run runs the worker until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if cfg.Pool == "" {
		cfg.Pool = "shared"
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 64
	}
	log = log.With(slog.String("service", "worker"), slog.String("pool", cfg.Pool))
	nc, js, err := natsx.Connect(cfg.NATSURL, "worker-"+cfg.Pool)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := natsx.EnsureStreams(ctx, js, natsx.StreamConfig{}); err != nil {
		return err
	}
	adminLis, err := app.Listen(cfg.AdminListener, cfg.AdminAddr)
	if err != nil {
		return err
	}
	srv := app.NewServer("worker", log, nil, adminLis)
	srv.AddCheck("nats", natsx.Check(nc))
	w := &Worker{
		cfg:      cfg,
		log:      log,
		js:       js,
		renderer: playbook.NewRenderer(),
		tools:    tools.Registry{"noop": tools.Noop{}, "python": &tools.Python{Interpreter: cfg.Python}},
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "noetl_worker_commands_total", Help: "Commands run, by pool, tool and outcome."},
			[]string{"pool", "tool", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "noetl_worker_tool_seconds", Help: "Tool run time.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 12)}, []string{"tool"}),
	}
	srv.Registry.MustRegister(w.runs, w.duration)
	log.Info("worker consuming", slog.String("admin", srv.AdminAddr()))
	return srv.Run(ctx, 30*time.Second, w.consume)
}

// Worker runs commands.
type Worker struct {
	cfg      Config
	log      *slog.Logger
	js       jetstream.JetStream
	renderer *playbook.Renderer
	tools    tools.Registry
	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func (w *Worker) consume(ctx context.Context) error {
	cons, err := w.js.CreateOrUpdateConsumer(ctx, natsx.StreamCommands, jetstream.ConsumerConfig{
		Durable:       "worker-" + w.cfg.Pool,
		FilterSubject: natsx.PoolSubjects(w.cfg.Pool),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       60 * time.Second,
		MaxDeliver:    -1,
		MaxAckPending: 8 * w.cfg.Concurrency,
	})
	if err != nil {
		return fmt.Errorf("commands consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(w.cfg.Concurrency))
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		it.Stop()
	}()
	sem := make(chan struct{}, w.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			w.log.Warn("command consumer", slog.String("error", err.Error()))
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			w.handle(ctx, m)
		}()
	}
}

func (w *Worker) handle(ctx context.Context, m jetstream.Msg) {
	cmd := &eventv1.Command{}
	if err := proto.Unmarshal(m.Data(), cmd); err != nil {
		w.log.Error("dropping malformed command", slog.String("error", err.Error()))
		_ = m.Term()
		return
	}
	// Keep the claim alive while a long tool runs.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(20 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	events := w.Execute(ctx, cmd)
	if err := w.publish(ctx, events); err != nil {
		if ctx.Err() == nil {
			w.log.Warn("publish outcome failed; command will be redelivered", slog.String("execution_id", cmd.GetExecutionId()), slog.String("error", err.Error()))
		}
		_ = m.NakWithDelay(500 * time.Millisecond)
		return
	}
	_ = m.Ack()
}

func (w *Worker) publish(ctx context.Context, events []*eventv1.Event) error {
	msgs := make([]natsx.Message, 0, len(events))
	for _, ev := range events {
		b, err := proto.Marshal(ev)
		if err != nil {
			return err
		}
		msgs = append(msgs, natsx.Message{Subject: natsx.EventSubject(ev.GetExecutionId(), w.cfg.Partitions), MsgID: ev.GetEventId(), Data: b})
	}
	return natsx.PublishAll(ctx, w.js, msgs)
}

// Execute renders and runs a command and returns its events: command.started, then
// call.done and command.completed, or call.error and command.failed.
func (w *Worker) Execute(ctx context.Context, cmd *eventv1.Command) []*eventv1.Event {
	mk := func(typ string) *eventv1.Event {
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
	started := mk(domain.EventCommandStarted)
	fail := func(info *eventv1.ErrorInfo) []*eventv1.Event {
		callErr := mk(domain.EventCallError)
		callErr.Error = info
		failed := mk(domain.EventCommandFailed)
		failed.Error = info
		return []*eventv1.Event{started, callErr, failed}
	}
	kind := "noop"
	if len(cmd.GetTools()) > 0 {
		kind = cmd.GetTools()[0].GetKind()
	}
	begin := time.Now()
	result, err := w.run(ctx, cmd)
	w.duration.WithLabelValues(kind).Observe(time.Since(begin).Seconds())
	if err != nil {
		w.runs.WithLabelValues(w.cfg.Pool, kind, "error").Inc()
		info := &eventv1.ErrorInfo{Code: "tool_error", Message: err.Error()}
		var te *tools.Error
		if errors.As(err, &te) {
			info.Retryable = te.Retryable
		}
		var re *renderError
		if errors.As(err, &re) {
			info.Code = "template_error"
		}
		return fail(info)
	}
	w.runs.WithLabelValues(w.cfg.Pool, kind, "ok").Inc()
	done := mk(domain.EventCallDone)
	b, merr := json.Marshal(result)
	if merr != nil {
		info := &eventv1.ErrorInfo{Code: "tool_error", Message: "result is not JSON-encodable: " + merr.Error()}
		return fail(info)
	}
	if len(b) > inlineMax {
		info := &eventv1.ErrorInfo{Code: "result_too_large", Message: fmt.Sprintf("step %s: result of %d bytes exceeds the inline budget of %d bytes", cmd.GetStep(), len(b), inlineMax)}
		return fail(info)
	}
	done.ResultJson = b
	return []*eventv1.Event{started, done, mk(domain.EventCommandCompleted)}
}

// inlineMax is the largest result carried inline in call.done.
const inlineMax = 64 << 10

type renderError struct{ err error }

func (e *renderError) Error() string { return e.err.Error() }
func (e *renderError) Unwrap() error { return e.err }

// run renders the command's tools and runs them in order; later tools of a pipeline see
// earlier results by label, and the step result is the last tool's result (a map of
// results by label for pipelines).
func (w *Worker) run(ctx context.Context, cmd *eventv1.Command) (any, error) {
	var scope domain.Scope
	if len(cmd.GetContextJson()) > 0 {
		if err := json.Unmarshal(cmd.GetContextJson(), &scope); err != nil {
			return nil, fmt.Errorf("command context: %w", err)
		}
	}
	vars := scope.Vars()
	vars["command_id"] = cmd.GetCommandId()
	var stepInput map[string]any
	if len(cmd.GetInputJson()) > 0 && string(cmd.GetInputJson()) != "null" {
		if err := json.Unmarshal(cmd.GetInputJson(), &stepInput); err != nil {
			return nil, fmt.Errorf("command input: %w", err)
		}
	}
	renderedInput := map[string]any{}
	if len(stepInput) > 0 {
		v, err := w.renderer.Render(stepInput, vars)
		if err != nil {
			return nil, &renderError{fmt.Errorf("step %s: input: %w", cmd.GetStep(), err)}
		}
		renderedInput, _ = v.(map[string]any)
	}
	var last any
	byLabel := map[string]any{}
	for i, tc := range cmd.GetTools() {
		var cfg map[string]any
		if err := json.Unmarshal(tc.GetConfigJson(), &cfg); err != nil {
			return nil, fmt.Errorf("tool config: %w", err)
		}
		where := fmt.Sprintf("step %s: tool %s", cmd.GetStep(), tc.GetKind())
		if tc.GetLabel() != "" {
			where = fmt.Sprintf("step %s: tool %s (%s)", cmd.GetStep(), tc.GetLabel(), tc.GetKind())
		}
		// Code is data for the interpreter, not a template.
		code, hasCode := cfg["code"]
		delete(cfg, "code")
		rc, err := w.renderer.Render(cfg, vars)
		if err != nil {
			return nil, &renderError{fmt.Errorf("%s: %w", where, err)}
		}
		rendered, _ := rc.(map[string]any)
		if rendered == nil {
			rendered = map[string]any{}
		}
		if hasCode {
			rendered["code"] = code
		}
		input := make(map[string]any, len(renderedInput))
		for k, v := range renderedInput {
			input[k] = v
		}
		for _, key := range []string{"args", "input"} {
			if m, ok := rendered[key].(map[string]any); ok {
				for k, v := range m {
					input[k] = v
				}
			}
		}
		res, err := w.tools.Run(ctx, &tools.Call{Kind: tc.GetKind(), Config: rendered, Input: input, CommandID: cmd.GetCommandId(), Step: cmd.GetStep()})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		last = res
		label := tc.GetLabel()
		if label == "" {
			label = fmt.Sprintf("task_%d", i)
		}
		byLabel[label] = res
		vars[label] = res
		vars["_prev"] = res
	}
	if len(cmd.GetTools()) > 1 {
		return byLabel, nil
	}
	return last, nil
}
