package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noetl/noetl/internal/platform/natsx"
)

// partitions is the services' NOETL_PARTITIONS (their default).
const partitions = 16

// backlog describes what is still in flight after the faults: executions the log has not
// ended, and messages the consumers have not taken or acknowledged.
type backlog struct {
	running     int // noetl.execution rows not terminal
	commands    int // pending + unacknowledged on the worker consumers
	notices     int // pending + unacknowledged on the orchestrator's consumers
	events      int // partitions of NOETL_EVENTS whose cursor is behind the stream
	clientsBusy int // load executions the client still waits for
}

func (b backlog) zero() bool {
	return b.running == 0 && b.commands == 0 && b.notices == 0 && b.events == 0 && b.clientsBusy == 0
}

func (b backlog) String() string {
	return fmt.Sprintf("running=%d commands=%d notices=%d event_partitions_behind=%d clients_waiting=%d", b.running, b.commands, b.notices, b.events, b.clientsBusy)
}

// measureBacklog reads the backlog from Postgres and JetStream.
func measureBacklog(ctx context.Context, db *pgxpool.Pool, js jetstream.JetStream, clientsBusy int) (backlog, error) {
	b := backlog{clientsBusy: clientsBusy}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.QueryRow(ctx, `SELECT count(*) FROM noetl.execution WHERE status NOT IN (2, 3, 4)`).Scan(&b.running); err != nil {
		return b, err
	}
	for _, sc := range []struct {
		stream string
		n      *int
	}{{"NOETL_COMMANDS", &b.commands}, {"NOETL_COMMITTED", &b.notices}} {
		s, err := js.Stream(ctx, sc.stream)
		if err != nil {
			return b, err
		}
		lister := s.ListConsumers(ctx)
		for ci := range lister.Info() {
			if ci.Config.Durable == "" {
				continue
			}
			*sc.n += int(ci.NumPending) + ci.NumAckPending
		}
		if err := lister.Err(); err != nil {
			return b, err
		}
	}
	cursors := map[int]uint64{}
	rows, err := db.Query(ctx, `SELECT partition, stream_seq FROM noetl.materializer_partition WHERE consumer = 'materializer'`)
	if err != nil {
		return b, err
	}
	for rows.Next() {
		var p int
		var seq int64
		if err := rows.Scan(&p, &seq); err != nil {
			rows.Close()
			return b, err
		}
		cursors[p] = uint64(seq)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return b, err
	}
	s, err := js.Stream(ctx, "NOETL_EVENTS")
	if err != nil {
		return b, err
	}
	for p := range partitions {
		m, err := s.GetLastMsgForSubject(ctx, natsx.PartitionEventSubject(p))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return b, err
		}
		if cursors[p] < m.Sequence {
			b.events++
		}
	}
	return b, nil
}

// connectNATS is the harness's own connection to the cluster (reading consumer states,
// stream contents).
func connectNATS(url string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.Name("chaos-harness"), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// usage is one process's resources at one moment.
type usage struct {
	RSSMB      float64 `json:"rss_mb"`
	Threads    int     `json:"threads"`
	FDs        int     `json:"fds"`
	Goroutines int     `json:"goroutines,omitempty"`
	PID        int     `json:"pid"`
}

// measureUsage reads VmRSS and Threads from /proc/<pid>/status, the open files from
// /proc/<pid>/fd and, for a service, go_goroutines from its /metrics.
func measureUsage(p *proc) (usage, bool) {
	pid := p.pid()
	if pid == 0 {
		return usage{}, false
	}
	u := usage{PID: pid}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, false
	}
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			u.RSSMB = round2(kb / 1024)
		}
		if rest, ok := strings.CutPrefix(line, "Threads:"); ok {
			u.Threads, _ = strconv.Atoi(strings.TrimSpace(rest))
		}
	}
	_ = f.Close()
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		u.FDs = len(ents)
	}
	if p.kind != kindNATS {
		u.Goroutines = int(metricValue(p.admin, "go_goroutines"))
	}
	return u, true
}

// metricValue is the value of an unlabelled metric on an admin address's /metrics (0 when
// it cannot be read).
func metricValue(admin, name string) float64 {
	client := &http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0
	}
	defer func() { _ = resp.Body.Close() }()
	s := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), name+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return 0
}

// measureAll is every process's usage by name.
func measureAll(c *cluster) map[string]usage {
	out := map[string]usage{}
	for _, p := range c.procs("") {
		if u, ok := measureUsage(p); ok {
			out[p.name] = u
		}
	}
	return out
}
