package materializer

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/eventbus"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/testkit"
	"github.com/noetl/noetl/services/materializer/internal/lease"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// env is a Postgres database and a NATS server for materializers under test.
type env struct {
	pg, nats string
	db       *pgxpool.Pool
	js       jetstream.JetStream
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{pg: testkit.StartMigratedPostgres(t), nats: testkit.StartNATS(t)}
	db, err := pgxext.Open(context.Background(), e.pg, 4)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	e.db = db
	nc, js, err := natsx.Connect(e.nats, "test")
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	require.NoError(t, natsx.EnsureStreams(context.Background(), js, natsx.StreamConfig{}))
	e.js = js
	return e
}

// running is a running materializer replica.
type running struct {
	admin  string
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs a materializer with cfg (Postgres, NATS and admin address filled in) until
// the test ends or stop is called.
func (e *env) start(t *testing.T, cfg Config) *running {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg.PostgresURL, cfg.NATSURL, cfg.AdminListener = e.pg, e.nats, lis
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{admin: "http://" + lis.Addr().String(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		if err := Run(ctx, cfg, slog.New(slog.DiscardHandler)); err != nil && ctx.Err() == nil {
			t.Errorf("materializer %s stopped: %v", cfg.ReplicaID, err)
		}
	}()
	t.Cleanup(r.stop)
	return r
}

// stop stops the replica gracefully and waits for it.
func (r *running) stop() {
	r.cancel()
	<-r.done
}

// metric reads an unlabelled metric from the replica's /metrics.
func (r *running) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get(r.admin + "/metrics")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// owners returns how many partitions each replica of group holds a live lease on.
func (e *env) owners(t *testing.T, group string) map[string]int {
	t.Helper()
	rows, err := e.db.Query(context.Background(), `SELECT owner, count(*) FROM noetl.materializer_partition
		WHERE consumer = $1 AND owner <> '' AND expires_at > now() GROUP BY owner`, group)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var o string
		var n int
		require.NoError(t, rows.Scan(&o, &n))
		out[o] = n
	}
	require.NoError(t, rows.Err())
	return out
}

func waitOwners(t *testing.T, e *env, group string, want map[string]int) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, func() error {
		if got := e.owners(t, group); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("owners %v, want %v", got, want)
		}
		return nil
	})
}

// TestLeasesBalanceAndTakeOver runs replicas of one group: a single replica owns every
// partition; a second one gets half once the first releases its surplus; a replica that
// stops hands its partitions back at once; and the partitions of a replica that died
// (its leases left to expire) are taken over after the TTL. Events published meanwhile
// are all committed.
func TestLeasesBalanceAndTakeOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const parts, ttl = 8, time.Second
	cfg := func(id string) Config {
		return Config{Partitions: parts, ReplicaID: id, LeaseTTL: ttl, LagPoll: 50 * time.Millisecond}
	}
	a := e.start(t, cfg("a"))
	waitOwners(t, e, "materializer", map[string]int{"a": parts})
	testkit.WaitFor(t, 10*time.Second, func() error {
		if n := a.metric(t, "noetl_materializer_partitions_owned"); n != parts {
			return fmt.Errorf("a owns %g partitions", n)
		}
		return nil
	})

	b := e.start(t, cfg("b"))
	waitOwners(t, e, "materializer", map[string]int{"a": parts / 2, "b": parts / 2})
	require.Positive(t, a.metric(t, "noetl_materializer_lease_released_total"))
	require.Positive(t, b.metric(t, "noetl_materializer_lease_acquired_total"))
	pub := newPublisher(t, e.js, parts)
	pub.executions(t, "balanced", 8, 5)
	waitCommitted(t, e, pub.count)

	// A replica that stops hands its leases back: the other takes them without waiting
	// for them to expire.
	b.stop()
	waitOwners(t, e, "materializer", map[string]int{"a": parts})
	pub.executions(t, "after-stop", 8, 5)
	waitCommitted(t, e, pub.count)

	// A replica that dies leaves its leases to expire: here a ghost that took half the
	// partitions (a released them to it) and never renews. a takes them over after the TTL.
	ghost := &lease.Table{DB: e.db, Group: "materializer", Replica: "ghost", Partitions: parts, TTL: ttl}
	testkit.WaitFor(t, 30*time.Second, func() error {
		_, _, err := ghost.Renew(context.Background())
		require.NoError(t, err)
		got, err := ghost.Acquire(context.Background(), parts/2)
		require.NoError(t, err)
		if owners := e.owners(t, "materializer"); owners["ghost"] < parts/2 {
			return fmt.Errorf("ghost holds %v (took %v)", owners, got)
		}
		return nil
	})
	pub.executions(t, "dead-owner", 8, 5)
	waitOwners(t, e, "materializer", map[string]int{"a": parts})
	require.Positive(t, a.metric(t, "noetl_materializer_lease_acquired_total"))
	waitCommitted(t, e, pub.count)
}

// TestCursorsReachTheLastEvent checks that once a replica has committed and forwarded
// everything, each partition's cursor is at the partition's last event (a batch's cursor
// is written by the next batch's transaction, or on its own when none follows).
func TestCursorsReachTheLastEvent(t *testing.T) {
	t.Parallel()
	const parts = 4
	e := newEnv(t)
	e.start(t, Config{Partitions: parts, ReplicaID: "a", BatchSize: 8})
	pub := newPublisher(t, e.js, parts)
	pub.executions(t, "cursor", 8, 20)
	waitCommitted(t, e, pub.count)
	ctx := context.Background()
	stream, err := e.js.Stream(ctx, natsx.StreamEvents)
	require.NoError(t, err)
	testkit.WaitFor(t, 10*time.Second, func() error {
		for p := range parts {
			last, err := stream.GetLastMsgForSubject(ctx, natsx.PartitionEventSubject(p))
			require.NoError(t, err)
			var seq int64
			require.NoError(t, e.db.QueryRow(ctx, `SELECT stream_seq FROM noetl.materializer_partition WHERE consumer = 'materializer' AND partition = $1`, p).Scan(&seq))
			if uint64(seq) != last.Sequence {
				return fmt.Errorf("partition %d: cursor %d, last event %d", p, seq, last.Sequence)
			}
		}
		return nil
	})
}

// TestCommittedEventsArePurged checks that NOETL_EVENTS keeps only what some group has not
// committed: with a second group's cursor at zero nothing is purged; once every group is
// past the events, each partition keeps only its last committed event.
func TestCommittedEventsArePurged(t *testing.T) {
	t.Parallel()
	const parts = 4
	e := newEnv(t)
	ctx := context.Background()
	// A second group that has committed nothing yet holds the floor at zero.
	for p := range parts {
		_, err := e.db.Exec(ctx, `INSERT INTO noetl.materializer_partition (consumer, partition, stream_seq) VALUES ('other', $1, 0)`, p)
		require.NoError(t, err)
	}
	e.start(t, Config{Partitions: parts, ReplicaID: "a", BatchSize: 8, PurgeEvery: 50 * time.Millisecond})
	pub := newPublisher(t, e.js, parts)
	pub.executions(t, "purge", 8, 20)
	waitCommitted(t, e, pub.count)
	stream, err := e.js.Stream(ctx, natsx.StreamEvents)
	require.NoError(t, err)
	held := func() map[string]uint64 {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter("noetl.events.>"))
		require.NoError(t, err)
		return info.State.Subjects
	}
	// The cursors reach the last events; the purger runs many times meanwhile.
	cursor := func(group string, p int) uint64 {
		var seq int64
		require.NoError(t, e.db.QueryRow(ctx, `SELECT stream_seq FROM noetl.materializer_partition WHERE consumer = $1 AND partition = $2`, group, p).Scan(&seq))
		return uint64(seq)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		for p := range parts {
			last, err := stream.GetLastMsgForSubject(ctx, natsx.PartitionEventSubject(p))
			require.NoError(t, err)
			if c := cursor("materializer", p); c != last.Sequence {
				return fmt.Errorf("partition %d: cursor %d, last event %d", p, c, last.Sequence)
			}
		}
		return nil
	})
	var total uint64
	for _, n := range held() {
		total += n
	}
	require.Equal(t, uint64(8*(20+4)), total, "nothing purged while a group is at zero (each execution's events and its two late ones)")

	// The other group catches up: each partition keeps only its last committed event.
	_, err = e.db.Exec(ctx, `UPDATE noetl.materializer_partition o SET stream_seq = m.stream_seq FROM noetl.materializer_partition m
		WHERE o.consumer = 'other' AND m.consumer = 'materializer' AND m.partition = o.partition`)
	require.NoError(t, err)
	testkit.WaitFor(t, 10*time.Second, func() error {
		h := held()
		for p := range parts {
			if n := h[natsx.PartitionEventSubject(p)]; n != 1 {
				return fmt.Errorf("partition %d holds %d events, want its last one", p, n)
			}
		}
		return nil
	})
	// The log is untouched, and the replica goes on committing after a purge.
	waitCommitted(t, e, pub.count)
	pub.executions(t, "after", 2, 3)
	waitCommitted(t, e, pub.count)
}

// TestTwoOwnersOfOnePartitionKeepTheLogIdentical makes two replicas of one group consume
// every partition at once (as if both believed they held the leases) while every event
// is published twice, duplicates arriving late and executions interleaved; some events
// come after their execution's terminal event. The log must be gap-free, duplicate-free and
// identical, event by event, to a clean run of one replica fed each event once.
func TestTwoOwnersOfOnePartitionKeepTheLogIdentical(t *testing.T) {
	t.Parallel()
	const parts, execs, steps = 4, 12, 30
	all := []int{0, 1, 2, 3}

	evs, want := cleanLog(t, parts, execs, steps)

	dual := newEnv(t)
	a := dual.start(t, Config{Partitions: parts, ReplicaID: "a", OwnPartitions: all, BatchSize: 16})
	b := dual.start(t, Config{Partitions: parts, ReplicaID: "b", OwnPartitions: all, BatchSize: 7})
	// The replicas share the group's cursors: one that starts reading a partition after the
	// other committed some of it starts past those events. Both read every event only when
	// both consume every partition (the cursor read, the consumer created) before the
	// first is published.
	stream, err := dual.js.Stream(context.Background(), natsx.StreamEvents)
	require.NoError(t, err)
	testkit.WaitFor(t, 30*time.Second, func() error {
		info, err := stream.Info(context.Background())
		require.NoError(t, err)
		if n := info.State.Consumers; n < 2*parts {
			return fmt.Errorf("%d consumers of %d", n, 2*parts)
		}
		return nil
	})
	dp := newPublisher(t, dual.js, parts)
	// Each event is published once, and once more as a duplicate (another message id, so
	// JetStream keeps it) at a random later point.
	rng := rand.New(rand.NewPCG(1, 2))
	var late []*eventv1.Event
	for _, ev := range evs {
		dp.publish(t, ev, "")
		late = append(late, ev)
		for len(late) > 0 && rng.IntN(3) == 0 {
			i := rng.IntN(len(late))
			dp.publish(t, late[i], "-dup")
			late = append(late[:i], late[i+1:]...)
		}
	}
	for _, ev := range late {
		dp.publish(t, ev, "-dup")
	}
	got := waitLog(t, dual, execs, steps)
	require.Equal(t, want, got, "the log of two owners differs from the clean run's")

	// Both replicas read every message: each accounts for all of them.
	for name, r := range map[string]*running{"a": a, "b": b} {
		testkit.WaitFor(t, 30*time.Second, func() error {
			n := r.metric(t, "noetl_materializer_events_committed_total") + r.metric(t, "noetl_materializer_dedupe_hits_total") +
				r.metric(t, "noetl_materializer_rejected_total")
			if n != float64(2*len(evs)) {
				return fmt.Errorf("replica %s accounted for %g of %d messages", name, n, 2*len(evs))
			}
			return nil
		})
	}
	require.Positive(t, a.metric(t, "noetl_materializer_events_committed_total")+b.metric(t, "noetl_materializer_events_committed_total"))
}

// publisher publishes events to NOETL_EVENTS.
type publisher struct {
	js    jetstream.JetStream
	parts int
	mu    sync.Mutex
	// count is the number of events that must be in the log.
	count int
}

func newPublisher(t *testing.T, js jetstream.JetStream, parts int) *publisher {
	return &publisher{js: js, parts: parts}
}

// build returns the events of execs executions of steps events each after
// playbook.started, ending with playbook.completed and followed by two late events that
// the log must refuse, interleaved across executions.
func (p *publisher) build(t *testing.T, prefix string, execs, steps int) []*eventv1.Event {
	t.Helper()
	types := []string{domain.EventStepEnter, domain.EventCommandStarted, domain.EventCallDone, domain.EventCommandCompleted, domain.EventStepExit}
	var out []*eventv1.Event
	for i := range steps + 4 {
		for x := range execs {
			exec := fmt.Sprintf("%s-%d", prefix, x)
			ev := &eventv1.Event{ExecutionId: exec, Tenant: "t1", EventId: fmt.Sprintf("%s/%d", exec, i)}
			switch {
			case i == 0:
				ev.Type, ev.PayloadJson = domain.EventPlaybookStarted, []byte(`{"path":"p","version":1,"workload":{}}`)
			case i <= steps:
				ev.Type, ev.Step = types[i%len(types)], fmt.Sprintf("s%d", i/len(types))
			case i == steps+1:
				ev.Type = domain.EventPlaybookCompleted
			default:
				ev.Type = domain.EventStepEnter // after the terminal event: refused
			}
			out = append(out, ev)
		}
	}
	return out
}

// executions publishes the events of execs new executions and counts those to be logged.
func (p *publisher) executions(t *testing.T, prefix string, execs, steps int) {
	t.Helper()
	for _, ev := range p.build(t, prefix, execs, steps) {
		p.publish(t, ev, "")
	}
	p.mu.Lock()
	p.count += execs * (steps + 2)
	p.mu.Unlock()
}

func (p *publisher) publish(t *testing.T, ev *eventv1.Event, idSuffix string) {
	t.Helper()
	b, err := proto.Marshal(ev)
	require.NoError(t, err)
	_, err = p.js.Publish(context.Background(), natsx.EventSubject(ev.GetExecutionId(), p.parts), b, jetstream.WithMsgID(ev.GetEventId()+idSuffix))
	require.NoError(t, err)
}

// waitCommitted waits until the log holds n events.
func waitCommitted(t *testing.T, e *env, n int) {
	t.Helper()
	testkit.WaitFor(t, 60*time.Second, func() error {
		var got int
		require.NoError(t, e.db.QueryRow(context.Background(), `SELECT count(*) FROM noetl.event`).Scan(&got))
		if got != n {
			return fmt.Errorf("%d events in the log, want %d", got, n)
		}
		return nil
	})
}

// waitLog waits for every execution's log to be complete and returns the logs as
// "execution seq event_id" lines, checking that seq runs 1..n without a gap.
func waitLog(t *testing.T, e *env, execs, steps int) []string {
	t.Helper()
	waitCommitted(t, e, execs*(steps+2))
	rows, err := e.db.Query(context.Background(), `SELECT execution_id, seq, event_id FROM noetl.event ORDER BY execution_id, seq`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	next := map[string]int64{}
	for rows.Next() {
		var exec, id string
		var seq int64
		require.NoError(t, rows.Scan(&exec, &seq, &id))
		next[exec]++
		require.Equal(t, next[exec], seq, "gap in the log of %s", exec)
		out = append(out, fmt.Sprintf("%s %d %s", exec, seq, id))
	}
	require.NoError(t, rows.Err())
	require.Len(t, next, execs)
	var status []int16
	srows, err := e.db.Query(context.Background(), `SELECT status FROM noetl.execution ORDER BY execution_id`)
	require.NoError(t, err)
	defer srows.Close()
	for srows.Next() {
		var s int16
		require.NoError(t, srows.Scan(&s))
		status = append(status, s)
	}
	for _, s := range status {
		require.Equal(t, int16(eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED), s)
	}
	return out
}

// TestBatchedEventsCommitLikeSingleOnes checks that events published in batch messages
// (eventbus.Batcher's EventBatch, several events per message) are committed as the same
// events published one per message are: the same logs, seq for seq. The batches are larger
// than half the replica's batch size, so a batch that would pass it opens the next one,
// and every batch is published a second time regrouped (two batches of one), whose events
// the writer drops as duplicates.
func TestBatchedEventsCommitLikeSingleOnes(t *testing.T) {
	t.Parallel()
	const parts, execs, steps = 4, 6, 20
	evs, want := cleanLog(t, parts, execs, steps)

	batched := newEnv(t)
	batched.start(t, Config{Partitions: parts, ReplicaID: "batched", BatchSize: 8})
	// Consecutive events of a partition, five to a message, as a batcher groups them.
	bySubject := map[string][]*eventv1.Event{}
	var subjects []string
	flush := func(subject string) {
		group := bySubject[subject]
		if len(group) == 0 {
			return
		}
		bySubject[subject] = nil
		publishBatch(t, batched.js, subject, group, "")
		if len(group) > 1 { // the regrouped copy: duplicates for the writer
			publishBatch(t, batched.js, subject, group[:1], "again")
			publishBatch(t, batched.js, subject, group[1:], "again")
		}
	}
	for _, ev := range evs {
		s := natsx.EventSubject(ev.GetExecutionId(), parts)
		if bySubject[s] == nil {
			subjects = append(subjects, s)
		}
		bySubject[s] = append(bySubject[s], ev)
		if len(bySubject[s]) == 5 {
			flush(s)
		}
	}
	for _, s := range subjects {
		flush(s)
	}
	require.Equal(t, want, waitLog(t, batched, execs, steps))
}

// cleanLog runs one replica on its own over the events of execs executions of steps
// events (publisher.build, prefix "x"), one message each, and returns the events and the
// logs it committed (waitLog): what a run under test must commit too.
func cleanLog(t *testing.T, parts, execs, steps int) ([]*eventv1.Event, []string) {
	t.Helper()
	clean := newEnv(t)
	clean.start(t, Config{Partitions: parts, ReplicaID: "clean"})
	cp := newPublisher(t, clean.js, parts)
	evs := cp.build(t, "x", execs, steps)
	for _, ev := range evs {
		cp.publish(t, ev, "")
	}
	return evs, waitLog(t, clean, execs, steps)
}

// publishBatch publishes evs as one message on subject: an EventBatch with the batch
// header, or the plain event when there is one.
func publishBatch(t *testing.T, js jetstream.JetStream, subject string, evs []*eventv1.Event, idSuffix string) {
	t.Helper()
	bodies := make([][]byte, len(evs))
	ids := ""
	for i, ev := range evs {
		b, err := proto.Marshal(ev)
		require.NoError(t, err)
		bodies[i], ids = b, ids+ev.GetEventId()+","
	}
	m := &nats.Msg{Subject: subject, Header: nats.Header{}}
	if len(evs) == 1 {
		m.Data = bodies[0]
	} else {
		data, err := proto.Marshal(&eventv1.EventBatch{Events: bodies})
		require.NoError(t, err)
		m.Data = data
		m.Header.Set(eventbus.BatchHeader, strconv.Itoa(len(evs)))
	}
	_, err := js.PublishMsg(context.Background(), m, jetstream.WithMsgID(ids+idSuffix))
	require.NoError(t, err)
}
