package natsx_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/platform/telemetry"
	"github.com/noetl/noetl/internal/testkit"
)

func tracer(t *testing.T) trace.Tracer {
	tel, err := telemetry.Setup(context.Background(), "test", telemetry.Config{SpanExporter: tracetest.NewInMemoryExporter()})
	require.NoError(t, err)
	t.Cleanup(func() { tel.Close(nil) })
	return tel.Tracer()
}

func TestTraceContextTravelsInHeaders(t *testing.T) {
	ctx, span := tracer(t).Start(context.Background(), "publisher")
	defer span.End()
	h := natsx.Inject(ctx, nil)
	require.NotEmpty(t, h.Get("traceparent"))
	got := trace.SpanContextFromContext(natsx.Extract(context.Background(), h))
	require.True(t, got.IsRemote())
	require.Equal(t, span.SpanContext().TraceID(), got.TraceID())
	require.Equal(t, span.SpanContext().SpanID(), got.SpanID())

	// Another client may write the header in another case.
	other := nats.Header{"Traceparent": h["traceparent"]}
	require.Equal(t, span.SpanContext().TraceID(), trace.SpanContextFromContext(natsx.Extract(context.Background(), other)).TraceID())
	require.False(t, trace.SpanContextFromContext(natsx.Extract(context.Background(), nil)).IsValid())
}

// keptKey is a context value that Remote.Into must keep.
type keptKey struct{}

// TestRemoteIsWhatExtractGives: a header's trace context and baggage extracted once and
// put into several contexts give each what Extract gives it, and a header without them
// leaves a context as it was.
func TestRemoteIsWhatExtractGives(t *testing.T) {
	ctx, span := tracer(t).Start(context.Background(), "publisher")
	defer span.End()
	member, err := baggage.NewMember("tenant", "t1")
	require.NoError(t, err)
	bag, err := baggage.New(member)
	require.NoError(t, err)
	h := natsx.Inject(baggage.ContextWithBaggage(ctx, bag), nil)
	remote := natsx.Extracted(h)
	for range 2 {
		base := context.WithValue(context.Background(), keptKey{}, "kept")
		want, got := natsx.Extract(base, h), remote.Into(base)
		require.Equal(t, trace.SpanContextFromContext(want), trace.SpanContextFromContext(got))
		require.True(t, trace.SpanContextFromContext(got).IsRemote())
		require.Equal(t, span.SpanContext().SpanID(), trace.SpanContextFromContext(got).SpanID())
		require.Equal(t, baggage.FromContext(want).String(), baggage.FromContext(got).String())
		require.Equal(t, "t1", baggage.FromContext(got).Member("tenant").Value())
		require.Equal(t, "kept", got.Value(keptKey{}))
	}
	base := context.Background()
	require.Equal(t, base, natsx.Extracted(nil).Into(base), "no header: the context as it was")
}

func TestPublishAllCarriesTheTrace(t *testing.T) {
	nc, js := testkit.StartJetStream(t)
	ctx := context.Background()
	sub, err := nc.SubscribeSync("noetl.events.>")
	require.NoError(t, err)
	tr := tracer(t)
	pctx, publisher := tr.Start(ctx, "publisher")
	cctx, cause := tr.Start(ctx, "another cause")
	err = natsx.PublishAll(pctx, js, []natsx.Message{
		{Subject: "noetl.events.0", MsgID: "a", Data: []byte("a")},
		{Subject: "noetl.events.0", MsgID: "b", Data: []byte("b"), Header: natsx.Inject(cctx, nil)},
	})
	require.NoError(t, err)
	want := map[string]trace.TraceID{"a": publisher.SpanContext().TraceID(), "b": cause.SpanContext().TraceID()}
	for range 2 {
		m, err := sub.NextMsg(10 * time.Second)
		require.NoError(t, err)
		got := trace.SpanContextFromContext(natsx.Extract(ctx, m.Header))
		require.Equal(t, want[string(m.Data)], got.TraceID(), "message %s", m.Data)
	}

	// Without a trace nothing is added.
	require.NoError(t, natsx.PublishAll(ctx, js, []natsx.Message{{Subject: "noetl.events.0", MsgID: "c", Data: []byte("c")}}))
	m, err := sub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	require.Empty(t, m.Header.Get("traceparent"))
}

// TestLagMonitorReportsABacklogNobodyConsumes checks the monitor reads a consumer's state by
// itself: the backlog of a consumer no one pulls from is reported, then what a pull takes
// moves from pending to in flight.
func TestLagMonitorReportsABacklogNobodyConsumes(t *testing.T) {
	_, js := testkit.StartJetStream(t)
	ctx := context.Background()
	cons, err := js.CreateOrUpdateConsumer(ctx, natsx.StreamCommands, jetstream.ConsumerConfig{
		Durable: "worker-blue", FilterSubject: natsx.PoolSubjects("blue"), AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 64,
	})
	require.NoError(t, err)
	for i := range 10 {
		_, err := js.Publish(ctx, natsx.CommandSubject("blue", fmt.Sprint(i), "c"+fmt.Sprint(i), 4), []byte("cmd"))
		require.NoError(t, err)
	}
	reg := prometheus.NewRegistry()
	mon := natsx.NewLagMonitor(js, natsx.StreamCommands, "worker-blue", "blue", 10*time.Millisecond, reg, nil)
	polls := make(chan natsx.ConsumerLag, 1)
	mon.OnPoll = func(l natsx.ConsumerLag) {
		select {
		case polls <- l:
		default:
		}
	}
	// A second monitor on the same registry (another consumer of the service) shares the
	// metric families.
	other := natsx.NewLagMonitor(js, natsx.StreamCommands, "worker-green", "green", 10*time.Millisecond, reg, nil)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- mon.Run(rctx) }()
	go func() { done <- other.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, <-done)
	})

	testkit.WaitFor(t, 10*time.Second, func() error {
		if l := mon.Lag(); l.Pending != 10 || l.AckPending != 0 || l.MaxAckPending != 64 || l.At.IsZero() {
			return fmt.Errorf("lag %+v", l)
		}
		return nil
	})
	select {
	case <-polls:
	case <-time.After(10 * time.Second):
		t.Fatal("OnPoll was not called")
	}
	require.Equal(t, 10.0, series(t, reg, "noetl_nats_consumer_pending", "blue"))
	require.Equal(t, 64.0, series(t, reg, "noetl_nats_consumer_max_ack_pending", "blue"))

	batch, err := cons.FetchNoWait(4)
	require.NoError(t, err)
	n := 0
	for range batch.Messages() {
		n++
	}
	require.Equal(t, 4, n)
	testkit.WaitFor(t, 10*time.Second, func() error {
		if l := mon.Lag(); l.Pending != 6 || l.AckPending != 4 || l.Total() != 10 {
			return fmt.Errorf("lag %+v", l)
		}
		return nil
	})
	require.Equal(t, 4.0, series(t, reg, "noetl_nats_consumer_ack_pending", "blue"))

	// A consumer that does not exist is an error, counted, never a zero lag.
	testkit.WaitFor(t, 10*time.Second, func() error {
		if l := other.Lag(); l.Err == nil {
			return fmt.Errorf("no error yet: %+v", l)
		}
		return nil
	})
	require.Positive(t, series(t, reg, "noetl_nats_consumer_info_errors_total", "green"))
}

// series returns the value of the series of name for pool, gathered from reg.
func series(t *testing.T, reg *prometheus.Registry, name, pool string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pool" && l.GetValue() == pool {
					if m.GetCounter() != nil {
						return m.GetCounter().GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series %s{pool=%q}", name, pool)
	return 0
}

// TestUntracedServicePassesTheTraceOn: a service whose tracing is off records nothing, but
// what it publishes on behalf of a traced message still carries that message's trace.
func TestUntracedServicePassesTheTraceOn(t *testing.T) {
	ctx, span := tracer(t).Start(context.Background(), "upstream")
	defer span.End()
	in := natsx.Inject(ctx, nil)
	off := telemetry.Disabled()
	octx, own := off.Tracer().Start(natsx.Extract(context.Background(), in), "untraced")
	require.False(t, own.IsRecording())
	out := natsx.Inject(octx, nil)
	require.Equal(t, in.Get("traceparent"), out.Get("traceparent"))
}

func TestEnsureStreamsLeavesUnchangedStreamsAlone(t *testing.T) {
	nc, js := testkit.StartJetStream(t)
	ctx := context.Background()
	before := map[string]time.Time{}
	for _, name := range []string{natsx.StreamEvents, natsx.StreamCommands, natsx.StreamCommitted} {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		before[name] = s.CachedInfo().Created
	}
	// A second declaration (another service starting) must not update any stream: stream
	// updates racing consumer creation are what this avoids.
	sub, err := nc.SubscribeSync("$JS.API.STREAM.UPDATE.>")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	require.NoError(t, natsx.EnsureStreams(ctx, js, natsx.StreamConfig{}))
	require.NoError(t, nc.Flush())
	// The requests went over this connection, so after the flush any update request
	// would already be queued on the subscription.
	n, _, err := sub.Pending()
	require.NoError(t, err)
	require.Zero(t, n, "no stream update was requested")
	for name, created := range before {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		require.Equal(t, created, s.CachedInfo().Created)
	}
	// Commit notices carry events: their stream is bounded in bytes, dropping the oldest.
	committed, err := js.Stream(ctx, natsx.StreamCommitted)
	require.NoError(t, err)
	require.Equal(t, int64(natsx.DefaultCommittedMaxBytes), committed.CachedInfo().Config.MaxBytes)
	require.Equal(t, jetstream.DiscardOld, committed.CachedInfo().Config.Discard)
}

func TestOversizedMessagesAreRefusedAndCounted(t *testing.T) {
	before := testutil.ToFloat64(natsx.RefusedTooLarge)
	err := natsx.PublishAll(context.Background(), nil, []natsx.Message{{Subject: "noetl.events.0", MsgID: "m", Data: make([]byte, natsx.MaxMessageBytes+1)}})
	require.ErrorIs(t, err, natsx.ErrMessageTooLarge)
	require.Contains(t, err.Error(), "noetl.events.0")
	require.Equal(t, before+1, testutil.ToFloat64(natsx.RefusedTooLarge))
}

// TestCommandQueuedUntilItsWorkerAcks follows one command through the commands stream: held
// while queued and while a worker holds it unacked, gone once acked.
func TestCommandQueuedUntilItsWorkerAcks(t *testing.T) {
	_, js := testkit.StartJetStream(t)
	ctx := context.Background()
	cons, err := js.CreateOrUpdateConsumer(ctx, natsx.StreamCommands, jetstream.ConsumerConfig{
		Durable: "worker-amber", FilterSubject: natsx.PoolSubjects("amber"), AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	stream, err := js.Stream(ctx, natsx.StreamCommands)
	require.NoError(t, err)
	subject := natsx.CommandSubject("amber", "x1", "c1", 4)
	queued := func() bool {
		q, err := natsx.CommandQueued(ctx, stream, subject)
		require.NoError(t, err)
		return q
	}
	require.False(t, queued(), "never published")
	_, err = js.Publish(ctx, subject, []byte("cmd"))
	require.NoError(t, err)
	require.True(t, queued(), "queued for the pool")
	other, err := natsx.CommandQueued(ctx, stream, natsx.CommandSubject("amber", "x1", "c2", 4))
	require.NoError(t, err)
	require.False(t, other, "another command of the same execution")
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	m := <-batch.Messages()
	require.NotNil(t, m)
	require.True(t, queued(), "delivered, not acked: the stream redelivers it if the worker dies")
	require.NoError(t, m.DoubleAck(ctx))
	require.False(t, queued(), "acked: the work queue removed it")
}

// NOETL_COMMANDS keeps one keeper (the latest), which no pool's consumer receives, even a
// pool named like it; and a stream declared before the keeper existed is updated to keep
// one message per subject.
func TestCommandsStreamKeepsOneKeeperNoPoolReceives(t *testing.T) {
	url := testkit.StartNATS(t)
	nc, js, err := natsx.Connect(url, "t")
	require.NoError(t, err)
	defer nc.Close()
	ctx := context.Background()
	// An older declaration, without the per-subject bound.
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: natsx.StreamCommands, Subjects: []string{"noetl.commands.>"}, Retention: jetstream.WorkQueuePolicy,
		Duplicates: 2 * time.Minute, MaxMsgSize: natsx.MaxMessageBytes + 4096})
	require.NoError(t, err)
	require.NoError(t, natsx.EnsureStreams(ctx, js, natsx.StreamConfig{}))
	s, err := js.Stream(ctx, natsx.StreamCommands)
	require.NoError(t, err)
	require.Equal(t, int64(1), s.CachedInfo().Config.MaxMsgsPerSubject)

	for range 3 {
		require.NoError(t, natsx.PublishAll(ctx, js, []natsx.Message{{Subject: natsx.KeepSubject}}))
	}
	cmd := natsx.CommandSubject("keep", "x1", "c1", 16)
	require.NoError(t, natsx.PublishAll(ctx, js, []natsx.Message{{Subject: cmd, MsgID: "c1", Data: []byte("command")}}))
	cons, err := js.CreateOrUpdateConsumer(ctx, natsx.StreamCommands, jetstream.ConsumerConfig{Durable: "worker-keep", FilterSubject: natsx.PoolSubjects("keep"), AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(time.Second))
	require.NoError(t, err)
	var got []string
	for m := range batch.Messages() {
		got = append(got, m.Subject())
		require.NoError(t, m.DoubleAck(ctx))
	}
	require.NoError(t, batch.Error())
	require.Equal(t, []string{cmd}, got, "the pool receives its command and not the keeper")
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
	require.NoError(t, err)
	require.Equal(t, map[string]uint64{natsx.KeepSubject: 1}, info.State.Subjects, "the acknowledged command is gone, one keeper stays")
}

// PublishWindowed stores every message once and in order however small its window, and
// with a window of one it still gets every ack.
func TestPublishWindowedStoresAllInOrder(t *testing.T) {
	_, js := testkit.StartJetStream(t)
	ctx := context.Background()
	for _, window := range []int{1, 7, 1000} {
		var msgs []natsx.Message
		for i := range 50 {
			msgs = append(msgs, natsx.Message{Subject: "noetl.events.1", MsgID: fmt.Sprintf("w%d-%d", window, i), Data: fmt.Appendf(nil, "%d:%d", window, i)})
		}
		s, err := js.Stream(ctx, natsx.StreamEvents)
		require.NoError(t, err)
		before, err := s.Info(ctx)
		require.NoError(t, err)
		require.NoError(t, natsx.PublishWindowed(ctx, js, msgs, window))
		for i := range msgs {
			m, err := s.GetMsg(ctx, before.State.LastSeq+uint64(i)+1)
			require.NoError(t, err)
			require.Equal(t, string(msgs[i].Data), string(m.Data), "window %d, message %d", window, i)
		}
		// Published again, every one is a duplicate: nothing more is stored.
		require.NoError(t, natsx.PublishWindowed(ctx, js, msgs, window))
		after, err := s.Info(ctx)
		require.NoError(t, err)
		require.Equal(t, before.State.LastSeq+uint64(len(msgs)), after.State.LastSeq, "window %d", window)
	}
}

// A subscription to NoticeWildcard receives an execution's notices on both of their
// subjects, one to CommittedWildcard those on NOETL_COMMITTED only, whatever the
// execution's partition, and neither receives the mesh's other messages about that
// execution or another execution's notices; AdvancedSubject is in no stream.
func TestNoticeWildcardsMatchOnlyAnExecutionsNotices(t *testing.T) {
	nc, js := testkit.StartJetStream(t)
	ctx := context.Background()
	const id = "x1"
	published := []string{natsx.EventSubject(id, 16), natsx.CommandSubject("shared", id, id, 16), natsx.CancelSubject(id), natsx.KeepSubject,
		natsx.CommittedSubject("x2", 16), natsx.AdvancedSubject("x2", 16),
		natsx.CommittedSubject(id, 16), natsx.AdvancedSubject(id, 4), natsx.CommittedSubject(id, 4), natsx.AdvancedSubject(id, 16)}
	// received subscribes to wildcard, publishes every subject of published and then a
	// marker it matches, and returns the subjects that arrived before the marker.
	received := func(wildcard, marker string) []string {
		t.Helper()
		got := make(chan string, len(published)+1)
		sub, err := nc.Subscribe(wildcard, func(m *nats.Msg) { got <- m.Subject + string(m.Data) })
		require.NoError(t, err)
		defer func() { _ = sub.Unsubscribe() }()
		require.NoError(t, nc.Flush())
		for _, s := range published {
			require.NoError(t, nc.Publish(s, nil))
		}
		require.NoError(t, nc.Publish(marker, []byte("|marker")))
		require.NoError(t, nc.Flush())
		var out []string
		for {
			select {
			case g := <-got:
				if g == marker+"|marker" {
					return out
				}
				out = append(out, g)
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: no marker; received %v", wildcard, out)
			}
		}
	}
	require.Equal(t, []string{natsx.CommittedSubject(id, 16), natsx.AdvancedSubject(id, 4), natsx.CommittedSubject(id, 4), natsx.AdvancedSubject(id, 16)},
		received(natsx.NoticeWildcard(id), natsx.CommittedSubject(id, 16)), "the execution's notices on both subjects, in order")
	require.Equal(t, []string{natsx.CommittedSubject(id, 16), natsx.CommittedSubject(id, 4)},
		received(natsx.CommittedWildcard(id), natsx.CommittedSubject(id, 16)), "the execution's notices on NOETL_COMMITTED only, in order")
	_, err := js.StreamNameBySubject(ctx, natsx.AdvancedSubject(id, 16))
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "announcements of advanced logs are not stored")
}

// TestEnsureStreamsWaitsForALateJetStream declares the streams on a server whose JetStream
// is off, as a cluster's is before it elects a leader: the first attempt finds nobody to
// answer, and the declaration goes on until JetStream is enabled rather than stopping the
// service that asked.
func TestEnsureStreamsWaitsForALateJetStream(t *testing.T) {
	s, js := withoutJetStream(t)
	before := inMsgs(t, s)

	done := make(chan error, 1)
	go func() {
		done <- natsx.EnsureStreams(context.Background(), js, natsx.StreamConfig{DeclareWithin: time.Minute})
	}()
	// The first attempt's request reached a server with no JetStream to answer it.
	testkit.WaitFor(t, 10*time.Second, func() error {
		if n := inMsgs(t, s); n == before {
			return fmt.Errorf("no JetStream request yet (%d messages in)", n)
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("the declaration ended before JetStream was there: %v", err)
	default:
	}
	require.NoError(t, s.EnableJetStream(&server.JetStreamConfig{StoreDir: t.TempDir()}))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the declaration did not finish once JetStream was enabled")
	}
	for _, name := range []string{natsx.StreamEvents, natsx.StreamCommands, natsx.StreamCommitted} {
		_, err := js.Stream(context.Background(), name)
		require.NoError(t, err, name)
	}
}

// TestEnsureStreamsGivesUpWithinItsBound stops, naming the stream and the cause, when
// JetStream never answers within the declaration's bound.
func TestEnsureStreamsGivesUpWithinItsBound(t *testing.T) {
	s, js := withoutJetStream(t)
	before := inMsgs(t, s)
	err := natsx.EnsureStreams(context.Background(), js, natsx.StreamConfig{DeclareWithin: 500 * time.Millisecond})
	require.ErrorIs(t, err, nats.ErrNoResponders)
	require.ErrorContains(t, err, "declare stream "+natsx.StreamEvents+": JetStream did not answer within 500ms")
	require.Greater(t, inMsgs(t, s)-before, int64(1), "it tried more than once")
}

// TestEnsureStreamsStopsAtOnceOnAConflict returns a configuration the server refuses at
// once: retrying would not change the answer.
func TestEnsureStreamsStopsAtOnceOnAConflict(t *testing.T) {
	nc, js := testkit.StartJetStream(t)
	// Another stream already holds the events' subjects.
	require.NoError(t, js.DeleteStream(context.Background(), natsx.StreamEvents))
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "SQUATTER", Subjects: []string{"noetl.events.>"}})
	require.NoError(t, err)
	creates, err := nc.SubscribeSync("$JS.API.STREAM.CREATE." + natsx.StreamEvents)
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	err = natsx.EnsureStreams(context.Background(), js, natsx.StreamConfig{DeclareWithin: time.Hour})
	require.ErrorContains(t, err, "declare stream "+natsx.StreamEvents)
	// A round trip to the server after the requests: their copies to this subscription
	// were queued before its answer, so they are all counted now.
	require.NoError(t, nc.Flush())
	n, _, err := creates.Pending()
	require.NoError(t, err)
	require.Equal(t, 1, n, "a refused configuration is asked for once, not retried")
}

// withoutJetStream starts a NATS server with JetStream off and connects to it.
func withoutJetStream(t *testing.T) (*server.Server, jetstream.JetStream) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true})
	require.NoError(t, err)
	s.Start()
	t.Cleanup(s.Shutdown)
	require.True(t, s.ReadyForConnections(10*time.Second))
	nc, js, err := natsx.Connect(s.ClientURL(), t.Name())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return s, js
}

// inMsgs is the number of messages the server has received.
func inMsgs(t *testing.T, s *server.Server) int64 {
	t.Helper()
	v, err := s.Varz(nil)
	require.NoError(t, err)
	return v.InMsgs
}

// A publish whose acknowledgement never comes fails at PublishAckTimeout rather than
// waiting forever: here the subject's one listener is a plain subscriber that never
// answers, as a stream leader that died after the message reached it never does.
func TestAPublishWhoseAckIsLostFailsAtTheBound(t *testing.T) {
	defer func(d time.Duration) { natsx.PublishAckTimeout = d }(natsx.PublishAckTimeout)
	natsx.PublishAckTimeout = 200 * time.Millisecond
	nc, js, err := natsx.Connect(testkit.StartNATS(t), t.Name())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	got := make(chan struct{}, 1)
	sub, err := nc.Subscribe("lost.ack", func(*nats.Msg) { got <- struct{}{} })
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	defer func() { _ = sub.Unsubscribe() }()

	done := make(chan error, 1)
	go func() {
		done <- natsx.PublishAll(context.Background(), js, []natsx.Message{{Subject: "lost.ack", MsgID: "m1", Data: []byte("x")}})
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, jetstream.ErrAsyncPublishTimeout)
	case <-time.After(30 * time.Second):
		t.Fatal("a publish whose ack was lost still waits")
	}
	require.Len(t, got, 1, "the message reached its listener, which never answered")
}

// The subject builders spell what the streams and consumers match: prefix, partition and
// id, dot-separated, for partitions inside and outside the table of event subjects.
func TestSubjectBuildersSpellPrefixPartitionAndID(t *testing.T) {
	for _, p := range []int{0, 3, 15, 255, 256, 1000} {
		require.Equal(t, fmt.Sprintf("noetl.events.%d", p), natsx.PartitionEventSubject(p))
	}
	p := natsx.Partition("x1", 16)
	require.Equal(t, fmt.Sprintf("noetl.events.%d", p), natsx.EventSubject("x1", 16))
	require.Equal(t, fmt.Sprintf("noetl.commands.blue.%d.c1", p), natsx.CommandSubject("blue", "x1", "c1", 16))
	require.Equal(t, fmt.Sprintf("noetl.committed.%d.x1", p), natsx.CommittedSubject("x1", 16))
	require.True(t, strings.HasSuffix(natsx.AdvancedSubject("x1", 16), fmt.Sprintf(".%d.x1", p)))
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = natsx.PartitionEventSubject(7) }), "an event's subject is not built per publish")
}
