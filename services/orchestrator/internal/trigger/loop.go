package trigger

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Loop consumes the subjects of a database's NATS triggers. Any number of loops (one per
// orchestrator replica) may run: they share each trigger's durable consumer, so JetStream
// hands a message to one of them at a time. A message is acknowledged only once its
// execution's start is committed (or refused for good); one that is not is redelivered
// after AckWait, to any replica, and its idempotency key (the trigger's id and the
// message's Nats-Msg-Id, or its stream sequence) makes the second start answer the first
// one's execution. Delivery is at least once, the start exactly once.
type Loop struct {
	// DB is the orchestrator's pool.
	DB *pgxpool.Pool
	// JS is the JetStream the triggers' streams live in.
	JS jetstream.JetStream
	// Start starts a delivery's execution.
	Start Starter
	// Every is how often the triggers are listed, and a lost consumer looked for again
	// (zero: two seconds).
	Every time.Duration
	// Log receives the failures.
	Log *slog.Logger

	mu      sync.Mutex
	running map[string]context.CancelFunc
}

// natsTrigger is what the loop needs of a NATS trigger.
type natsTrigger struct {
	Tenant, Name, ID, Path, Subject, Stream string
	Version                                 int64
	Workload                                []byte
}

func (l *Loop) every() time.Duration {
	if l.Every > 0 {
		return l.Every
	}
	return 2 * time.Second
}

// Run lists the NATS triggers every Every, consumes each new one in a goroutine and stops
// those deleted, until ctx ends.
func (l *Loop) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	l.mu.Lock()
	l.running = map[string]context.CancelFunc{}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		for _, cancel := range l.running {
			cancel()
		}
		l.mu.Unlock()
	}()
	t := time.NewTicker(l.every())
	defer t.Stop()
	for {
		ts, err := l.list(ctx)
		if err != nil && ctx.Err() == nil && l.Log != nil {
			l.Log.Warn("listing NATS triggers failed", slog.Any("error", err))
		}
		if err == nil {
			seen := map[string]bool{}
			l.mu.Lock()
			for _, tr := range ts {
				seen[tr.ID] = true
				if _, ok := l.running[tr.ID]; ok {
					continue
				}
				cctx, cancel := context.WithCancel(ctx)
				l.running[tr.ID] = cancel
				wg.Add(1)
				go func() {
					defer wg.Done()
					l.consume(cctx, tr)
				}()
			}
			for id, cancel := range l.running {
				if !seen[id] {
					cancel()
					delete(l.running, id)
				}
			}
			l.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (l *Loop) list(ctx context.Context) ([]natsTrigger, error) {
	rows, err := l.DB.Query(ctx, `SELECT tenant, name, id, path, version, workload, subject, stream FROM noetl.trigger WHERE kind = 'nats'`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []natsTrigger
	for rows.Next() {
		var t natsTrigger
		if err := rows.Scan(&t.Tenant, &t.Name, &t.ID, &t.Path, &t.Version, &t.Workload, &t.Subject, &t.Stream); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// exists reports whether trigger id is still stored.
func (l *Loop) exists(ctx context.Context, id string) (bool, error) {
	var ok bool
	err := l.DB.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM noetl.trigger WHERE id = $1)`, id).Scan(&ok)
	return ok, err
}

// consume consumes trigger t's durable consumer until ctx ends; a consumer found gone
// (deleted by hand, its stream recreated) is declared again while the trigger exists.
func (l *Loop) consume(ctx context.Context, t natsTrigger) {
	for ctx.Err() == nil {
		err := l.consumeOnce(ctx, t)
		if err != nil && ctx.Err() == nil && l.Log != nil {
			l.Log.Warn("NATS trigger consumer stopped; retrying", slog.String("tenant", t.Tenant), slog.String("trigger", t.Name), slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(l.every()):
		}
	}
}

func (l *Loop) consumeOnce(ctx context.Context, t natsTrigger) error {
	c, err := l.JS.Consumer(ctx, t.Stream, Durable(t.ID))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		ok, xerr := l.exists(ctx, t.ID)
		if xerr != nil {
			return xerr
		}
		if !ok {
			<-ctx.Done() // deleted: the next listing stops this goroutine
			return nil
		}
		c, err = l.JS.CreateOrUpdateConsumer(ctx, t.Stream, consumerConfig(t.ID, t.Subject))
	}
	if err != nil {
		return err
	}
	lost := make(chan error, 1)
	cc, err := c.Consume(func(m jetstream.Msg) { l.handle(ctx, t, m) },
		jetstream.PullMaxMessages(MaxInFlight),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
				select {
				case lost <- err:
				default:
				}
			}
		}))
	if err != nil {
		return err
	}
	defer cc.Stop()
	select {
	case <-ctx.Done():
		return nil
	case err := <-lost:
		return err
	}
}

// handle starts one message's execution and acknowledges it once the start is committed;
// a message that can never start (not a JSON object, the playbook gone) is terminated, one
// whose start failed otherwise is redelivered later.
func (l *Loop) handle(ctx context.Context, t natsTrigger, m jetstream.Msg) {
	delivery := m.Headers().Get(jetstream.MsgIDHeader)
	if delivery == "" {
		if meta, err := m.Metadata(); err == nil {
			delivery = "seq:" + strconv.FormatUint(meta.Sequence.Stream, 10)
		}
	}
	log := l.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With(slog.String("tenant", t.Tenant), slog.String("trigger", t.Name), slog.String("delivery_id", delivery))
	refuse := func(err error) {
		log.Error("NATS trigger message refused", slog.String("error", status.Convert(err).Message()))
		_ = m.Term()
	}
	if err := CheckDeliveryID("Nats-Msg-Id", delivery); err != nil {
		refuse(err)
		return
	}
	workload, err := MergeWorkload(t.Workload, m.Data(), "message")
	if err != nil {
		refuse(err)
		return
	}
	id, err := l.Start(ctx, Fire{Tenant: t.Tenant, Name: t.Name, ID: t.ID, Path: t.Path, Version: t.Version, Workload: workload, Key: Key(t.ID, delivery)})
	if err != nil {
		if permanent(err) {
			refuse(err)
			return
		}
		log.Warn("NATS trigger start failed; redelivering", slog.Any("error", err))
		_ = m.NakWithDelay(l.every())
		return
	}
	if err := Fired(ctx, l.DB, t.ID, id); err != nil {
		log.Warn("recording a NATS trigger's execution failed", slog.String("execution_id", id), slog.Any("error", err))
	}
	// DoubleAck waits for the server to confirm the ack; one lost is a redelivery, which
	// the idempotency key answers with this execution.
	if err := m.DoubleAck(ctx); err != nil && ctx.Err() == nil {
		log.Warn("acknowledging a NATS trigger message failed", slog.String("execution_id", id), slog.Any("error", err))
	}
}

func permanent(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.FailedPrecondition, codes.ResourceExhausted:
		return true
	}
	return false
}
