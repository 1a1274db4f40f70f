// Package replica names a materializer replica's incarnation and proves a predecessor on
// the same host gone, so a restarted replica takes its partitions back at once instead of
// after the lease TTL.
package replica

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// A replica's default id names its incarnation: host-pid-rand.start.pidns, where start is
// the process's start time (clock ticks since boot) and pidns its pid namespace. The host
// and pid are what an operator looks for; the random part keeps two replicas of one
// process apart (tests); start and pidns let a later replica on the same host prove that
// this one has exited (Gone), so a materializer restarted with a new id takes
// its partitions back at once instead of after the lease TTL.
//
// An explicit NOETL_MATERIALIZER_REPLICA_ID (the chart sets the pod name) is stable across
// restarts of the process: the restarted replica simply renews the leases held under it.

// ID returns this process's incarnation id.
func ID() string {
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = rand.Read(b[:])
	start, ns := selfIncarnation()
	return fmt.Sprintf("%s-%d-%s.%d.%d", host, os.Getpid(), hex.EncodeToString(b[:]), start, ns)
}

// incarnation is what a default replica id says of the process that chose it.
type incarnation struct {
	host       string
	pid        int
	start, pns uint64
}

// parseIncarnation reads a default replica id; ok is false for any other id.
func parseIncarnation(id string) (inc incarnation, ok bool) {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return inc, false
	}
	parts := strings.Split(id[i+1:], ".")
	if len(parts) != 3 || len(parts[0]) != 6 {
		return inc, false
	}
	var err1, err2 error
	inc.start, err1 = strconv.ParseUint(parts[1], 10, 64)
	inc.pns, err2 = strconv.ParseUint(parts[2], 10, 64)
	j := strings.LastIndexByte(id[:i], '-')
	if err1 != nil || err2 != nil || j < 0 {
		return inc, false
	}
	pid, err := strconv.Atoi(id[j+1 : i])
	if err != nil || pid <= 0 {
		return inc, false
	}
	inc.host, inc.pid = id[:j], pid
	return inc, inc.start != 0 && inc.pns != 0
}

// Of is the default id a process of pid and start time (clock ticks since boot) on this
// host and in this pid namespace would choose, with a fixed random part: what an operator
// (or a test) compares a lease holder with.
func Of(pid int, start uint64) string {
	host, _ := os.Hostname()
	_, ns := selfIncarnation()
	return fmt.Sprintf("%s-%d-abcdef.%d.%d", host, pid, start, ns)
}

// Supported reports whether this system exposes process start times and pid namespaces
// (/proc), without which no predecessor is ever proven gone.
func Supported() bool {
	_, ns := selfIncarnation()
	return ns != 0
}

// Gone reports whether the replica of id has provably exited: its id is a
// default one, of this host and this pid namespace (so its pid is comparable with ours),
// and no process with its pid and start time is alive. Anything else (another host,
// another namespace, an explicit id) cannot be proven gone, and its leases expire.
func Gone(id string) bool {
	inc, ok := parseIncarnation(id)
	if !ok {
		return false
	}
	host, _ := os.Hostname()
	_, ns := selfIncarnation()
	if inc.host != host || inc.pns != ns || ns == 0 {
		return false
	}
	start, alive := processStart(inc.pid)
	return !alive || start != inc.start
}
