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
// replica answers /readyz 503 until one is released to it.
func TestNotReadyWithoutALease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const parts = 4
	holder := &lease.Table{DB: e.db, Group: "materializer", Replica: "holder", Partitions: parts, TTL: 10 * time.Minute}
	require.NoError(t, holder.Init(context.Background()))
	_, _, err := holder.Renew(context.Background())
	require.NoError(t, err)
	_, err = holder.Acquire(context.Background(), parts)
	require.NoError(t, err)

	r := e.start(t, Config{Partitions: parts, ReplicaID: "waiting", LeaseTTL: 10 * time.Minute, LagPoll: 50 * time.Millisecond})
	testkit.WaitFor(t, 30*time.Second, func() error {
		resp, err := http.Get(r.admin + "/readyz")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		if _, ok := e.owners(t, "materializer")["waiting"]; ok {
			return fmt.Errorf("waiting holds a lease")
		}
		return nil
	})
	body := readyzBody(t, r)
	require.Contains(t, body, "leases: holds no partition lease yet")

	require.NoError(t, holder.Leave(context.Background()))
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
