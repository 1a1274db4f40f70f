package materializer

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/testkit"
	"github.com/noetl/noetl/services/materializer/internal/lease"
)

// idOf is the default replica id a process of pid and start time would choose on this host.
func idOf(t *testing.T, pid int, start uint64) string {
	t.Helper()
	host, err := os.Hostname()
	require.NoError(t, err)
	_, ns := selfIncarnation()
	return fmt.Sprintf("%s-%d-abcdef.%d.%d", host, pid, start, ns)
}

func TestReplicaIncarnation(t *testing.T) {
	if _, ns := selfIncarnation(); ns == 0 {
		t.Skip("this system does not expose process start times and pid namespaces (/proc)")
	}
	id := defaultReplicaID()
	inc, ok := parseIncarnation(id)
	require.True(t, ok, id)
	require.Equal(t, os.Getpid(), inc.pid)
	require.False(t, predecessorGone(id), "this process is alive")

	// A child that has exited is gone; a live one is not, unless its pid was reused (another
	// start time); another host's or an explicit id can never be proven gone.
	live := exec.Command("cat")
	stdin, err := live.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, live.Start())
	start, alive := processStart(live.Process.Pid)
	require.True(t, alive)
	require.False(t, predecessorGone(idOf(t, live.Process.Pid, start)))
	require.True(t, predecessorGone(idOf(t, live.Process.Pid, start+1)), "a reused pid")
	require.NoError(t, stdin.Close())
	require.NoError(t, live.Wait())
	require.True(t, predecessorGone(idOf(t, live.Process.Pid, start)), "an exited process")

	require.False(t, predecessorGone(strings.Replace(idOf(t, live.Process.Pid, start), mustHost(t), "elsewhere", 1)))
	require.False(t, predecessorGone("materializer-0"))
	_, ok = parseIncarnation("materializer-0")
	require.False(t, ok)
}

func mustHost(t *testing.T) string {
	h, err := os.Hostname()
	require.NoError(t, err)
	return h
}

// TestRestartedReplicaTakesItsPartitionsBackAtOnce: a replica killed -9 leaves leases that
// last another ten minutes; its successor on the same host (a new default id) proves it
// gone and owns every partition at once, and is not ready until it holds a lease.
func TestRestartedReplicaTakesItsPartitionsBackAtOnce(t *testing.T) {
	if _, ns := selfIncarnation(); ns == 0 {
		t.Skip("this system does not expose process start times and pid namespaces (/proc)")
	}
	t.Parallel()
	e := newEnv(t)
	const parts, ttl = 8, 10 * time.Minute
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	ghostID := idOf(t, dead.Process.Pid, 1)
	ghost := &lease.Table{DB: e.db, Group: "materializer", Replica: ghostID, Partitions: parts, TTL: ttl}
	require.NoError(t, ghost.Init(context.Background()))
	_, _, err := ghost.Renew(context.Background())
	require.NoError(t, err)
	got, err := ghost.Acquire(context.Background(), parts)
	require.NoError(t, err)
	require.Len(t, got, parts)

	r := e.start(t, Config{Partitions: parts, LeaseTTL: ttl, LagPoll: 50 * time.Millisecond})
	testkit.WaitFor(t, 30*time.Second, func() error {
		owners := e.owners(t, "materializer")
		if len(owners) != 1 || owners[ghostID] != 0 {
			return fmt.Errorf("owners %v", owners)
		}
		for id, n := range owners {
			if n != parts || id == ghostID {
				return fmt.Errorf("owners %v", owners)
			}
		}
		return nil
	})
	testkit.WaitFor(t, 30*time.Second, func() error { return ready(r) })
	pub := newPublisher(t, e.js, parts)
	pub.executions(t, "after-restart", 8, 5)
	waitCommitted(t, e, pub.count)
}

// TestNotReadyWithoutALease: a replica whose group's partitions are all leased by a live
// replica answers /readyz 503, naming the reason, until one is released to it.
func TestNotReadyWithoutALease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const parts, ttl = 4, time.Second
	ctx := context.Background()
	holder := &lease.Table{DB: e.db, Group: "materializer", Replica: "holder", Partitions: parts, TTL: ttl}
	require.NoError(t, holder.Init(ctx))
	_, _, err := holder.Renew(ctx)
	require.NoError(t, err)
	_, err = holder.Acquire(ctx, parts)
	require.NoError(t, err)

	r := e.start(t, Config{Partitions: parts, ReplicaID: "waiting", LeaseTTL: ttl, LagPoll: 50 * time.Millisecond})
	// The holder keeps renewing (it is alive); the waiting replica has heartbeated, so it
	// has tried, and it holds nothing and is not ready.
	beats := map[time.Time]bool{}
	testkit.WaitFor(t, 30*time.Second, func() error {
		_, _, err := holder.Renew(ctx)
		require.NoError(t, err)
		var until time.Time
		if err := e.db.QueryRow(ctx, `SELECT expires_at FROM noetl.materializer_replica WHERE consumer = 'materializer' AND replica = 'waiting'`).Scan(&until); err != nil {
			return fmt.Errorf("waiting has not heartbeated yet: %v", err)
		}
		beats[until] = true
		if _, ok := e.owners(t, "materializer")["waiting"]; ok {
			t.Fatalf("waiting took a lease the live holder renews")
		}
		if !strings.Contains(readyzBody(t, r), "leases: holds no partition lease yet") {
			t.Fatalf("readyz does not say why: %s", readyzBody(t, r))
		}
		if len(beats) < 3 { // it has renewed, and tried to acquire, several times
			return fmt.Errorf("%d heartbeats seen", len(beats))
		}
		return nil
	})
	require.NoError(t, holder.Leave(ctx))
	testkit.WaitFor(t, 30*time.Second, func() error { return ready(r) })
}

func ready(r *replica) error {
	resp, err := http.Get(r.admin + "/readyz")
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz %d", resp.StatusCode)
	}
	return nil
}

func readyzBody(t *testing.T, r *replica) string {
	t.Helper()
	resp, err := http.Get(r.admin + "/readyz")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
