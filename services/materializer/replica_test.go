package materializer

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/testkit"
	"github.com/noetl/noetl/services/materializer/internal/lease"
	"github.com/noetl/noetl/services/materializer/internal/replica"
)

// TestRestartedReplicaTakesItsPartitionsBackAtOnce: a replica killed -9 leaves leases that
// last another ten minutes; its successor on the same host (a new default id) proves it
// gone and owns every partition at once, and is not ready until it holds a lease.
func TestRestartedReplicaTakesItsPartitionsBackAtOnce(t *testing.T) {
	if !replica.Supported() {
		t.Skip("this system does not expose process start times and pid namespaces (/proc)")
	}
	t.Parallel()
	e := newEnv(t)
	const parts, ttl = 8, 10 * time.Minute
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	ghostID := replica.Of(dead.Process.Pid, 1)
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

func ready(r *running) error {
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

func readyzBody(t *testing.T, r *running) string {
	t.Helper()
	resp, err := http.Get(r.admin + "/readyz")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
