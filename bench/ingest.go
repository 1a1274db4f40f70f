package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/eventbus"
	"github.com/noetl/noetl/internal/platform/natsembed"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/platform/pgembed"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/services/materializer"
)

var (
	ingestEvents = flag.Int("ingest-events", 100000, "events of the ingest workload")
	ingestExecs  = flag.Int("ingest-executions", 1000, "executions the ingest workload's events belong to")
	ingestBatch  = flag.Int("ingest-batch", materializer.DefaultBatchSize, "materializer batch size of the ingest workload")
	ingestPub    = flag.String("ingest-publish", "packed", "how the ingest workload's events reach NOETL_EVENTS: packed (as the services publish, eventbus.Publish: a partition's events share batch messages) or single (one message per event)")
)

// runIngest measures the materializer alone: executions are started, then ingest-events
// events of them (a step's life: step.enter, command.issued, command.started, call.done,
// command.completed, step.exit) are published to NOETL_EVENTS while the materializer is
// held, and the clock runs from its release until the last one is committed. In the same
// run, the committed rows are copied with one plain COPY into a table like noetl.event
// (same columns, indexes and constraints): the raw rate the materializer is compared to.
func runIngest(ctx context.Context) error {
	if *ingestPub != "packed" && *ingestPub != "single" {
		return fmt.Errorf("--ingest-publish %q: packed or single", *ingestPub)
	}
	dir, err := os.MkdirTemp("", "noetl-ingest-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := os.Chmod(dir, 0o755); err != nil { // the private Postgres runs as postgres when we are root
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	pgURL := os.Getenv("NOETL_PG_URL")
	if pgURL == "" {
		pg, err := pgembed.Start(ctx, pgembed.Options{Dir: filepath.Join(dir, "postgres"), Fast: true, Logger: log})
		if err != nil {
			return err
		}
		defer func() { _ = pg.Stop() }()
		pgURL = pg.URL()
	}
	ns, err := natsembed.Start(natsembed.Options{StoreDir: filepath.Join(dir, "nats"), Logger: log})
	if err != nil {
		return err
	}
	defer ns.Shutdown()
	urls, err := mesh.PrepareDatabase(ctx, pgURL, log)
	if err != nil {
		return err
	}
	db, err := pgxext.Open(ctx, pgURL, 4)
	if err != nil {
		return err
	}
	defer db.Close()
	nc, js, err := natsx.Connect(ns.ClientURL(), "bench")
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := natsx.EnsureStreams(ctx, js, natsx.StreamConfig{}); err != nil {
		return err
	}

	g := &ingestGate{open: make(chan struct{})}
	mctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := materializer.Run(mctx, materializer.Config{PostgresURL: urls.Materializer, NATSURL: ns.ClientURL(), AdminAddr: "127.0.0.1:0",
			BatchSize: *ingestBatch, Gate: g.wait}, log); err != nil && mctx.Err() == nil {
			log.Error("materializer stopped", slog.String("error", err.Error()))
		}
	}()
	defer func() { stop(); wg.Wait() }()

	started, events := ingestWorkload(*ingestExecs, *ingestEvents)
	// Set up: the executions exist before the measured events arrive.
	g.release()
	if err := publishEvents(ctx, js, started); err != nil {
		return err
	}
	if err := waitLogged(ctx, db, int64(len(started))); err != nil {
		return err
	}
	g.hold()
	if err := publishEvents(ctx, js, events); err != nil {
		return err
	}
	want := int64(len(started) + len(events))
	stopProfile, err := startCPUProfile(profile)
	if err != nil {
		return err
	}
	defer stopProfile()
	cpu := startCPU(ctx, db)
	begin := time.Now()
	g.release()
	if err := waitLogged(ctx, db, want); err != nil {
		return err
	}
	wall := time.Since(begin)
	goCPU, pgCPU := cpu.since(ctx, db)
	stopProfile()
	stop()
	wg.Wait()

	cpu = startCPU(ctx, db)
	copyWall, rows, err := rawCopy(ctx, db)
	if err != nil {
		return err
	}
	copyGoCPU, copyPGCPU := cpu.since(ctx, db)
	eps := float64(len(events)) / wall.Seconds()
	cps := float64(rows) / copyWall.Seconds()
	perEvent := func(d time.Duration, n int64) float64 { return float64(d.Microseconds()) / float64(n) }
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"workload":            "ingest",
		"events":              len(events),
		"executions":          len(started),
		"batch_size":          *ingestBatch,
		"publish":             *ingestPub,
		"partitions":          natsx.DefaultPartitions,
		"wall_ms":             float64(wall.Microseconds()) / 1000,
		"events_per_s":        eps,
		"raw_copy_rows":       rows,
		"raw_copy_ms":         float64(copyWall.Microseconds()) / 1000,
		"raw_copy_rows_per_s": cps,
		"ratio":               eps / cps,
		// CPU per event, which a loaded machine disturbs less than the rates: this process
		// (the materializer, and NATS and the bench beside it) and Postgres's processes.
		"cpu_us_per_event_go":        perEvent(goCPU, int64(len(events))),
		"cpu_us_per_event_pg":        perEvent(pgCPU, int64(len(events))),
		"raw_copy_cpu_us_per_row_go": perEvent(copyGoCPU, rows),
		"raw_copy_cpu_us_per_row_pg": perEvent(copyPGCPU, rows),
		"steps_reason":               "ingest publishes events straight to the materializer: no execution runs a step, so there is no step latency and no CPU per 1,000 steps; cpu_us_per_event_go (this process: the materializer, embedded NATS and the publisher) and cpu_us_per_event_pg (Postgres) are its CPU",
	})
}

// cpuMark is the CPU time used so far by this process and by each Postgres process.
type cpuMark struct {
	self time.Duration
	pg   map[int]time.Duration
}

// startCPU marks the CPU time used so far (Postgres's processes read from /proc: zero
// where there is none).
func startCPU(ctx context.Context, db *pgxpool.Pool) cpuMark {
	return cpuMark{self: selfCPU(), pg: postgresCPU(ctx, db)}
}

// since returns the CPU time used since m by this process and by Postgres's processes
// (those that ended meanwhile are not counted).
func (m cpuMark) since(ctx context.Context, db *pgxpool.Pool) (self, pg time.Duration) {
	for pid, d := range postgresCPU(ctx, db) {
		pg += d - m.pg[pid]
	}
	return selfCPU() - m.self, pg
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// postgresCPU reads the user and system time of every Postgres process from
// /proc/<pid>/stat (in clock ticks, taken as the usual 100 a second).
func postgresCPU(ctx context.Context, db *pgxpool.Pool) map[int]time.Duration {
	out := map[int]time.Duration{}
	rows, err := db.Query(ctx, `SELECT pid FROM pg_stat_activity`)
	if err != nil {
		return out
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return out
	}
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command (which may hold spaces) start after its ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		out[int(pid)] = time.Duration(utime+stime) * 10 * time.Millisecond
	}
	return out
}

// ingestWorkload builds the playbook.started events of execs executions and n more
// events of them, interleaved across executions as concurrent runs publish them.
func ingestWorkload(execs, n int) (started, events []*eventv1.Event) {
	types := []string{domain.EventStepEnter, domain.EventCommandIssued, domain.EventCommandStarted, domain.EventCallDone, domain.EventCommandCompleted, domain.EventStepExit}
	for x := range execs {
		exec := fmt.Sprintf("ingest-%06d", x)
		started = append(started, &eventv1.Event{ExecutionId: exec, Tenant: "default", Type: domain.EventPlaybookStarted, Producer: "orchestrator",
			EventId: domain.EventID(exec, domain.EventPlaybookStarted), PayloadJson: []byte(`{"path":"bench/ingest","version":1,"workload":{"n":1}}`)})
	}
	for i := range n {
		x, k := i%execs, i/execs
		exec := started[x].GetExecutionId()
		step := fmt.Sprintf("step_%d", k/len(types))
		typ := types[k%len(types)]
		cmd := domain.CommandID(exec, step, 0, 0, 1)
		ev := &eventv1.Event{ExecutionId: exec, Tenant: "default", Type: typ, Step: step, CommandId: cmd, Producer: "worker",
			EventId: domain.EventID(cmd, typ), CauseEventId: domain.EventID(cmd, "cause")}
		switch typ {
		case domain.EventCommandIssued:
			ev.Command = &eventv1.Command{CommandId: cmd, ExecutionId: exec, Tenant: "default", Pool: "shared", Step: step, IssuedEventId: ev.GetEventId()}
		case domain.EventCallDone:
			ev.ResultJson = []byte(`{"status":"ok","rows":3,"values":[1,2,3]}`)
		}
		events = append(events, ev)
	}
	return started, events
}

// publishEvents publishes evs to NOETL_EVENTS and waits for the stream's acks.
func publishEvents(ctx context.Context, js jetstream.JetStream, evs []*eventv1.Event) error {
	// Below the JetStream client's 4,000 unacknowledged async publishes, past which a
	// loaded machine makes PublishMsgAsync fail with "stalled".
	const window = 1000
	for len(evs) > 0 {
		chunk := evs[:min(window, len(evs))]
		evs = evs[len(chunk):]
		if *ingestPub == "packed" {
			if err := eventbus.Publish(ctx, js, natsx.DefaultPartitions, chunk); err != nil {
				return err
			}
			continue
		}
		msgs := make([]natsx.Message, 0, len(chunk))
		for _, ev := range chunk {
			b, err := proto.Marshal(ev)
			if err != nil {
				return err
			}
			msgs = append(msgs, natsx.Message{Subject: natsx.EventSubject(ev.GetExecutionId(), natsx.DefaultPartitions), MsgID: ev.GetEventId(), Data: b})
		}
		if err := natsx.PublishAll(ctx, js, msgs); err != nil {
			return err
		}
	}
	return nil
}

// waitLogged waits until the log holds n events.
func waitLogged(ctx context.Context, db *pgxpool.Pool, n int64) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var got int64
		if err := db.QueryRow(ctx, `SELECT coalesce(sum(last_seq), 0) FROM noetl.execution`).Scan(&got); err != nil {
			return err
		}
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d events logged after 10 minutes", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rawCopy copies every row of noetl.event with one COPY into a new table like it and
// returns how long the COPY took.
func rawCopy(ctx context.Context, db *pgxpool.Pool) (time.Duration, int64, error) {
	cols := []string{"execution_id", "seq", "event_id", "tenant", "type", "step", "command_id", "committed_at", "body"}
	if _, err := db.Exec(ctx, `CREATE TABLE noetl.bench_event_copy (LIKE noetl.event INCLUDING ALL)`); err != nil {
		return 0, 0, err
	}
	rows, err := db.Query(ctx, `SELECT execution_id, seq, event_id, tenant, type, step, command_id, committed_at, body FROM noetl.event ORDER BY committed_at, execution_id, seq`)
	if err != nil {
		return 0, 0, err
	}
	var data [][]any
	for rows.Next() {
		var exec, id, tenant, typ, step, cmd string
		var seq int64
		var at time.Time
		var body []byte
		if err := rows.Scan(&exec, &seq, &id, &tenant, &typ, &step, &cmd, &at, &body); err != nil {
			rows.Close()
			return 0, 0, err
		}
		data = append(data, []any{exec, seq, id, tenant, typ, step, cmd, at, body})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	begin := time.Now()
	n, err := db.CopyFrom(ctx, pgx.Identifier{"noetl", "bench_event_copy"}, cols, pgx.CopyFromRows(data))
	return time.Since(begin), n, err
}

// ingestGate holds the materializer's commits while closed.
type ingestGate struct {
	mu   sync.Mutex
	open chan struct{} // closed while the gate is open
}

func (g *ingestGate) wait(ctx context.Context) error {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *ingestGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *ingestGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
}
