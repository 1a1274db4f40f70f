// Package natsx declares NoETL's JetStream streams and subjects and wraps the publish and
// consume patterns every service shares.
package natsx

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/noetl/noetl/internal/platform/telemetry"
)

// Stream names.
const (
	StreamEvents    = "NOETL_EVENTS"
	StreamCommands  = "NOETL_COMMANDS"
	StreamCommitted = "NOETL_COMMITTED"
)

// DefaultPartitions is the default number of partitions executions are hashed into.
const DefaultPartitions = 16

// MaxMessageBytes is the largest event or command NoETL publishes; anything larger is a bug
// (large values travel by reference through the resultstore).
const MaxMessageBytes = 256 << 10

// ErrMessageTooLarge is returned when a message exceeds MaxMessageBytes.
var ErrMessageTooLarge = errors.New("message exceeds 256 KiB")

// RefusedTooLarge counts messages PublishAll refused for exceeding MaxMessageBytes. Every
// service registers it (app.NewServer); one collector may sit in several registries.
var RefusedTooLarge = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "noetl_publish_refused_too_large_total",
	Help: "Events and commands refused at publish for exceeding 256 KiB.",
})

// GroupMsgID is the deduplication id (Nats-Msg-Id) of a message that carries several
// items: kind, their count and a digest of their ids in order. The same items in the same
// order get the same id, so such a message published again is dropped by its stream;
// other items, or the same ones grouped otherwise, get another.
func GroupMsgID(kind string, ids []string) string {
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{0})
	}
	return fmt.Sprintf("%s:%d:%s", kind, len(ids), hex.EncodeToString(h.Sum(nil)[:16]))
}

// Partition maps an execution id to its partition in [0, n).
func Partition(executionID string, n int) int {
	if n <= 0 {
		n = DefaultPartitions
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(executionID))
	return int(h.Sum32() % uint32(n))
}

// The subject prefixes of the mesh. Every subject is built by a function of this file: no
// other package spells one (an architecture test holds the tree to it).
const (
	prefixEvents    = "noetl.events."
	prefixCommands  = "noetl.commands."
	prefixCommitted = "noetl.committed."
	prefixAdvanced  = "noetl.advanced."
	prefixCancel    = "noetl.cancel."
)

// SubjectPrefixes are the prefixes of every subject the mesh publishes on, for code that
// must recognise one (a public error message must never name a subject).
func SubjectPrefixes() []string {
	return []string{prefixEvents, prefixCommands, prefixCommitted, prefixAdvanced, prefixCancel}
}

// EventSubject is the subject an execution's events are published on.
func EventSubject(executionID string, partitions int) string {
	return PartitionEventSubject(Partition(executionID, partitions))
}

// PartitionEventSubject is the subject of the events of partition p. Every event a
// service publishes names one, so the subjects of the first partitions are made once.
func PartitionEventSubject(p int) string {
	if p >= 0 && p < len(eventSubjects) {
		return eventSubjects[p]
	}
	return prefixEvents + strconv.Itoa(p)
}

// eventSubjects are the subjects of partitions 0 to 255 (a mesh has 16 by default).
var eventSubjects = func() (s [256]string) {
	for p := range s {
		s[p] = prefixEvents + strconv.Itoa(p)
	}
	return s
}()

// CommittedAll matches every commit notice.
const CommittedAll = prefixCommitted + ">"

// CommandSubject is the subject a command for pool is published on:
// noetl.commands.<pool>.<partition>.<command id>. The command id as the last token lets
// the reconciler ask the stream whether it still holds one command (CommandQueued).
func CommandSubject(pool, executionID, commandID string, partitions int) string {
	return prefixCommands + pool + "." + strconv.Itoa(Partition(executionID, partitions)) + "." + commandID
}

// KeepSubject is the subject of NOETL_COMMANDS's keeper: an empty message no pool's
// consumer matches (a pool's filter, PoolSubjects, needs a token after the pool), which
// the materializer publishes again every KeepEvery while it forwards commands, the stream
// keeping only the latest (one message per subject). The file store deletes a work
// queue's last block file and creates a new one every time its last message is
// acknowledged; a queue that a chain of steps empties after every command did that once
// per step (a third of the NATS server's CPU). With the keeper in the last block the
// block never empties.
const KeepSubject = prefixCommands + "keep"

// KeepEvery is how often the materializer publishes the keeper of NOETL_COMMANDS.
const KeepEvery = time.Second

// CommandQueued reports whether the commands stream still holds the message of a
// command: queued for its pool, or delivered to a worker that has not acked it (the
// stream removes a command when its worker acks it, after the worker has published the
// command's outcome). The subject is CommandSubject's, so one lookup answers.
func CommandQueued(ctx context.Context, commands jetstream.Stream, subject string) (bool, error) {
	_, err := commands.GetLastMsgForSubject(ctx, subject)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	default:
		return false, err
	}
}

// CommittedSubject is the subject commit notices of an execution are published on. The
// execution id is the last token so that a caller can wait for one execution's commits
// with a core subscription.
func CommittedSubject(executionID string, partitions int) string {
	return prefixCommitted + strconv.Itoa(Partition(executionID, partitions)) + "." + executionID
}

// AdvancedSubject is the core NATS subject, outside every stream, on which the
// materializer announces a commit that asks nothing of the orchestrator: the decision it
// caused was taken inside it and committed with it, so the orchestrator, which answered
// it, already holds that state. Its notice is for an execution's waiters and watchers
// only, and costs no stream write, delivery or acknowledgement. The execution id is the
// last token, as in CommittedSubject.
func AdvancedSubject(executionID string, partitions int) string {
	return prefixAdvanced + strconv.Itoa(Partition(executionID, partitions)) + "." + executionID
}

// NoticeWildcard matches the commit notices of one execution, on CommittedSubject and
// AdvancedSubject, on any partition: the mesh's subjects of four tokens that end with an
// execution id are exactly those two (an event's subject has three tokens, a command's
// five, a cancellation's three).
func NoticeWildcard(executionID string) string {
	return meshSubjectRoot + ".*.*." + executionID
}

// CommittedWildcard matches the notices of one execution on NOETL_COMMITTED, on any
// partition: its start's, those of the commits that ask the orchestrator for a decision,
// and its terminal one (the materializer sends every terminal notice there), but not the
// notice of each step decided inside its commit (AdvancedSubject). A wait for an
// execution's start or end reads only these.
func CommittedWildcard(executionID string) string {
	return prefixCommitted + "*." + executionID
}

// CancelSubject is the core NATS subject on which the materializer announces that an
// execution's cancellation is committed, so workers stop its running commands.
func CancelSubject(executionID string) string { return prefixCancel + executionID }

// CancelAll matches the cancellation announcements of every execution; the execution id
// is the subject's last token.
const CancelAll = prefixCancel + "*"

// CancelledExecution returns the execution id of a cancellation announcement's subject.
func CancelledExecution(subject string) string { return strings.TrimPrefix(subject, prefixCancel) }

// PoolSubjects is the filter subject of a pool's command consumer.
func PoolSubjects(pool string) string { return prefixCommands + pool + ".>" }

// StreamConfig holds the tunables of the stream declarations.
type StreamConfig struct {
	// Replicas is the JetStream replication factor (1 for a single server).
	Replicas int
	// EventsMaxAge bounds how long transported events stay in NOETL_EVENTS.
	EventsMaxAge time.Duration
	// CommittedMaxAge bounds how long commit notices stay in NOETL_COMMITTED.
	CommittedMaxAge time.Duration
	// CommittedMaxBytes bounds NOETL_COMMITTED's size (zero: DefaultCommittedMaxBytes). A
	// notice carries up to 64 KiB of events; past the bound the oldest notices go first,
	// as a notice lost, which the reconciler covers.
	CommittedMaxBytes int64
	// DeclareWithin bounds how long EnsureStreams retries a JetStream that answers late or
	// not yet (zero: DefaultDeclareWithin).
	DeclareWithin time.Duration
}

// DefaultDeclareWithin is how long EnsureStreams retries by default: long enough for a
// loaded server or a cluster electing its leader, short enough that a service whose
// JetStream is truly missing stops at start-up and says so.
const DefaultDeclareWithin = time.Minute

// declareAttempt bounds one declaration's calls, as the JetStream client's default does.
const declareAttempt = 5 * time.Second

// DefaultCommittedMaxBytes is NOETL_COMMITTED's default size bound.
const DefaultCommittedMaxBytes = 1 << 30

// EnsureStreams declares the three streams idempotently.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) error {
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
		// A clustered JetStream replicates the streams: NOETL_STREAM_REPLICAS (e.g. 3)
		// applies to every service that declares them.
		if n, err := strconv.Atoi(os.Getenv("NOETL_STREAM_REPLICAS")); err == nil && n > 0 {
			cfg.Replicas = n
		}
	}
	if cfg.EventsMaxAge <= 0 {
		cfg.EventsMaxAge = 24 * time.Hour
	}
	if cfg.CommittedMaxAge <= 0 {
		cfg.CommittedMaxAge = 10 * time.Minute
	}
	if cfg.CommittedMaxBytes <= 0 {
		cfg.CommittedMaxBytes = DefaultCommittedMaxBytes
	}
	streams := []jetstream.StreamConfig{
		{
			Name:        StreamEvents,
			Description: "NoETL events in transport to the materializer",
			Subjects:    []string{prefixEvents + ">"},
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      cfg.EventsMaxAge,
			Duplicates:  2 * time.Minute,
			Replicas:    cfg.Replicas,
			MaxMsgSize:  MaxMessageBytes + 4096,
		},
		{
			Name:        StreamCommands,
			Description: "NoETL committed commands for worker pools",
			Subjects:    []string{prefixCommands + ">"},
			Retention:   jetstream.WorkQueuePolicy,
			// One message per subject: a command's subject ends with its id, so this
			// bounds only the keeper (KeepSubject).
			MaxMsgsPerSubject: 1,
			Duplicates:        2 * time.Minute,
			Replicas:          cfg.Replicas,
			MaxMsgSize:        MaxMessageBytes + 4096,
		},
		{
			Name:        StreamCommitted,
			Description: "NoETL commit notices for the orchestrator",
			Subjects:    []string{CommittedAll},
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      cfg.CommittedMaxAge,
			MaxBytes:    cfg.CommittedMaxBytes,
			Discard:     jetstream.DiscardOld,
			Duplicates:  time.Minute,
			Replicas:    cfg.Replicas,
		},
	}
	if cfg.DeclareWithin <= 0 {
		cfg.DeclareWithin = DefaultDeclareWithin
	}
	for _, sc := range streams {
		if err := declare(ctx, cfg.DeclareWithin, func(ctx context.Context) error { return ensureStream(ctx, js, sc) }); err != nil {
			return fmt.Errorf("declare stream %s: %w", sc.Name, err)
		}
	}
	return nil
}

// Declare runs a start-up declaration against JetStream (a durable consumer, as
// EnsureStreams does for the streams), retrying an answer that comes late or not yet for up
// to DefaultDeclareWithin; see declare.
func Declare(ctx context.Context, op func(context.Context) error) error {
	return declare(ctx, DefaultDeclareWithin, op)
}

// declare runs op until it succeeds, fails for good, or within has passed, with
// exponential backoff and jitter between attempts (cenkalti/backoff, which the worker
// already uses for the same job). Each attempt has declareAttempt to answer. A JetStream
// that does not answer in time, has no responders yet, or is electing its leader is
// transient: on a loaded machine or a starting cluster a single five-second call may miss,
// and a service should not stop for it. Anything else (a conflicting configuration, a
// refused permission) is returned at once.
func declare(ctx context.Context, within time.Duration, op func(context.Context) error) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = 2 * time.Second
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		actx, cancel := context.WithTimeout(ctx, declareAttempt)
		defer cancel()
		err := op(actx)
		if err != nil && (ctx.Err() != nil || !transient(err)) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(within))
	if err != nil && ctx.Err() == nil && transient(err) {
		return fmt.Errorf("JetStream did not answer within %s (is JetStream enabled and its cluster up?): %w", within, err)
	}
	return err
}

// transient reports whether a JetStream API error may pass by itself: no answer in time,
// nobody answering yet (the client reports that as JetStream not enabled), or the server's
// 503 (a cluster without a leader).
func transient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.Code == 503 {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabled)
}

// ensureStream creates a stream, or updates it only when its configuration differs:
// services start together, and needless updates racing consumer creation are avoided.
func ensureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	s, err := js.Stream(ctx, sc.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, sc)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil // another service created it meanwhile
		}
		return err
	}
	if err != nil {
		return err
	}
	cur := s.CachedInfo().Config
	// The server reports unset limits as -1: compare them as "unset".
	sameLimit := func(a, b int32) bool { return a == b || (a <= 0 && b <= 0) }
	if slices.Equal(cur.Subjects, sc.Subjects) && cur.Retention == sc.Retention && cur.MaxAge == sc.MaxAge &&
		cur.Duplicates == sc.Duplicates && cur.Replicas == sc.Replicas && sameLimit(cur.MaxMsgSize, sc.MaxMsgSize) &&
		(cur.MaxMsgsPerSubject == sc.MaxMsgsPerSubject || cur.MaxMsgsPerSubject <= 0 && sc.MaxMsgsPerSubject <= 0) &&
		(cur.MaxBytes == sc.MaxBytes || cur.MaxBytes <= 0 && sc.MaxBytes <= 0) && cur.Discard == sc.Discard {
		return nil
	}
	_, err = js.UpdateStream(ctx, sc)
	return err
}

// Connect dials NATS with reconnects enabled and returns the connection and a JetStream
// handle; opts follow its own (InProcess, for a server embedded in the same process).
func Connect(url, name string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
	}, opts...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to nats %s: %w", url, err)
	}
	js, err := NewJetStream(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

// PublishAckTimeout bounds the wait for a JetStream publish's acknowledgement on a handle
// made by NewJetStream (and so Connect). An ack can be lost without the connection
// dropping: a publish reaches a server whose stream leader dies before it answers, and
// the client, still connected to a live server, is never told. Unbounded, that publish
// would wait forever and hold what waits on it (a worker's claimed command, a partition's
// commit). Bounded, it fails with jetstream.ErrAsyncPublishTimeout and its caller
// publishes again under the same message id, which the stream deduplicates. Ten seconds
// is past a leader election (in the chaos runs, commits stall 3-5 s when a NATS node is
// killed) and far past an ack under load (milliseconds). Tests may shorten it before
// connecting.
var PublishAckTimeout = 10 * time.Second

// NewJetStream returns the JetStream handle of nc with publishes bounded by
// PublishAckTimeout.
func NewJetStream(nc *nats.Conn) (jetstream.JetStream, error) {
	return jetstream.New(nc, jetstream.WithPublishAsyncTimeout(PublishAckTimeout))
}

// InProcess is the option of Connect that connects to srv without a socket, none for nil.
func InProcess(srv nats.InProcessConnProvider) []nats.Option {
	if srv == nil {
		return nil
	}
	return []nats.Option{nats.InProcessServer(srv)}
}

// Message is one message to publish with its deduplication id.
type Message struct {
	Subject string
	MsgID   string
	Data    []byte
	// Header is sent with the message. A message whose header carries no trace context
	// gets PublishAll's (see Inject for a message caused by another span).
	Header nats.Header
}

// PublishAll publishes msgs asynchronously in order and waits for every ack. It refuses a
// message larger than MaxMessageBytes before publishing anything. The trace context of
// ctx travels in the header of every message that does not carry one already, so the
// consumer's span continues the publisher's trace.
func PublishAll(ctx context.Context, js jetstream.JetStream, msgs []Message) error {
	_, err := publishAll(ctx, js, msgs, 0)
	return err
}

// PublishWindowed publishes msgs as PublishAll does, with at most window of them
// unacknowledged at once: each message past the first window is sent as soon as the ack of
// the one window places before it arrives, so the acknowledgements flow while the
// messages do (publishing a window and waiting for all of its acks before the next drained
// the pipeline once per window). window bounds what one caller adds to the client's
// unacknowledged async publishes (4,000 at most, past which a publish fails as stalled).
func PublishWindowed(ctx context.Context, js jetstream.JetStream, msgs []Message, window int) error {
	_, err := publishAll(ctx, js, msgs, max(window, 1))
	return err
}

// PublishNew publishes one message as PublishAll does and reports whether the stream
// already held a message of its id within its duplicate window, in which case JetStream
// added nothing (and no consumer will see it again).
func PublishNew(ctx context.Context, js jetstream.JetStream, m Message) (duplicate bool, err error) {
	acks, err := publishAll(ctx, js, []Message{m}, 0)
	if err != nil {
		return false, err
	}
	return acks[0].Duplicate, nil
}

// CheckSize refuses a message larger than MaxMessageBytes (counted in RefusedTooLarge),
// as a publish would: ErrMessageTooLarge, naming its subject and id.
func CheckSize(m Message) error {
	if len(m.Data) > MaxMessageBytes {
		RefusedTooLarge.Inc()
		return fmt.Errorf("publish %s (%s): %d bytes: %w", m.Subject, m.MsgID, len(m.Data), ErrMessageTooLarge)
	}
	return nil
}

// publishAll is PublishAll, returning the acks in the order of msgs, with at most window
// unacknowledged at once (zero: no bound).
func publishAll(ctx context.Context, js jetstream.JetStream, msgs []Message, window int) ([]*jetstream.PubAck, error) {
	for _, m := range msgs {
		if err := CheckSize(m); err != nil {
			return nil, err
		}
	}
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	acks := make([]*jetstream.PubAck, 0, len(msgs))
	// await takes the ack of the oldest message not acknowledged yet.
	await := func() error {
		f := futures[len(acks)]
		select {
		case ack := <-f.Ok():
			acks = append(acks, ack)
			return nil
		case err := <-f.Err():
			return fmt.Errorf("publish %s: %w", f.Msg().Subject, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	traced := trace.SpanContextFromContext(ctx).IsValid()
	for _, m := range msgs {
		if window > 0 && len(futures)-len(acks) >= window {
			if err := await(); err != nil {
				return nil, err
			}
		}
		h := m.Header
		if traced && (h == nil || headerGet(h, "traceparent") == "") {
			h = Inject(ctx, h)
		}
		nm := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: h}
		f, err := js.PublishMsgAsync(nm, jetstream.WithMsgID(m.MsgID))
		if err != nil {
			return nil, fmt.Errorf("publish %s: %w", m.Subject, err)
		}
		futures = append(futures, f)
	}
	for len(acks) < len(futures) {
		if err := await(); err != nil {
			return nil, err
		}
	}
	return acks, nil
}

// Check is a readiness check of a NATS connection.
func Check(nc *nats.Conn) func(context.Context) error {
	return func(context.Context) error {
		if !nc.IsConnected() {
			return fmt.Errorf("nats not connected (%s)", nc.Status())
		}
		return nil
	}
}

// Inject returns h (a new header when nil) with the trace context of ctx added: how a
// message caused by a span other than the publisher's carries its own trace.
func Inject(ctx context.Context, h nats.Header) nats.Header {
	if h == nil {
		h = nats.Header{}
	}
	telemetry.Propagator.Inject(ctx, headerCarrier(h))
	return h
}

// Extract returns ctx carrying the trace context of a received message's header, if any:
// the parent of the consumer's span.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return telemetry.Propagator.Extract(ctx, headerCarrier(h))
}

// Remote is the trace context and baggage a received message's header carries, extracted
// once (Extracted) for a message whose several commands each start a span under it (Into).
type Remote struct {
	span    trace.SpanContext
	baggage baggage.Baggage
}

// Extracted is what Extract puts into a context from h.
func Extracted(h nats.Header) Remote {
	ctx := Extract(context.Background(), h)
	return Remote{span: trace.SpanContextFromContext(ctx), baggage: baggage.FromContext(ctx)}
}

// Into returns ctx carrying r, as Extract(ctx, h) returns it for the h r was extracted from.
func (r Remote) Into(ctx context.Context) context.Context {
	if r.span.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, r.span)
	}
	if r.baggage.Len() > 0 {
		ctx = baggage.ContextWithBaggage(ctx, r.baggage)
	}
	return ctx
}

// headerCarrier adapts a NATS header (case-sensitive keys) to a propagation carrier:
// it writes the lower-case W3C names and reads them in any case.
type headerCarrier nats.Header

var _ propagation.TextMapCarrier = headerCarrier(nil)

// Get implements propagation.TextMapCarrier.
func (c headerCarrier) Get(key string) string { return headerGet(nats.Header(c), key) }

// Set implements propagation.TextMapCarrier.
func (c headerCarrier) Set(key, value string) { c[key] = []string{value} }

// Keys implements propagation.TextMapCarrier.
func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

func headerGet(h nats.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// The platform's names on a NATS server that tenant code (a playbook's nats tool) must not
// reach: streams named NOETL_*, KV and object-store buckets and consumers named noetl* (in
// any case; reserved for the platform), and subjects under the mesh's prefixes, NATS's own $
// subjects and reply inboxes.
const (
	reservedStreamPrefix = "NOETL_"
	reservedBucketPrefix = "noetl"
	meshSubjectRoot      = "noetl"
)

// ReservedStream reports whether a JetStream stream belongs to the platform: NOETL_*, or
// the stream behind a reserved KV (KV_<bucket>) or object-store (OBJ_<bucket>) bucket.
func ReservedStream(name string) bool {
	if hasPrefixFold(name, reservedStreamPrefix) {
		return true
	}
	for _, p := range []string{"KV_", "OBJ_"} {
		if hasPrefixFold(name, p) && ReservedBucket(name[len(p):]) {
			return true
		}
	}
	return false
}

// ReservedBucket reports whether a KV or object-store bucket name is reserved for the
// platform (noetl*, in any case).
func ReservedBucket(name string) bool { return hasPrefixFold(name, reservedBucketPrefix) }

// ReservedConsumer reports whether a JetStream consumer name is reserved for the platform
// (noetl*, in any case: the durable consumers of NATS triggers live on tenants' streams).
func ReservedConsumer(name string) bool { return hasPrefixFold(name, reservedBucketPrefix) }

// ReservedSubject reports whether tenant code may not publish on subject: the mesh's
// subjects (every subject whose first token is noetl, whatever the case, which covers
// SubjectPrefixes and any the mesh adds later), NATS's $ subjects (the JetStream, KV and
// object-store APIs, $SYS) and reply inboxes (_INBOX.).
func ReservedSubject(subject string) bool {
	first, _, _ := strings.Cut(subject, ".")
	return strings.EqualFold(first, meshSubjectRoot) || strings.HasPrefix(subject, "$") || strings.HasPrefix(subject, "_INBOX.")
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
