package pgxext

import (
	"context"
	"net"
	"sync/atomic"
)

// Reads that poll, for a process that runs its Go scheduler on one processor.
//
// A goroutine waiting for Postgres's reply parks until the runtime's network poller reports
// the socket readable. The runtime polls the network when a processor runs out of runnable
// goroutines, or from its monitor thread at most every 10 ms. On a mesh that runs on one
// processor beside its own Postgres (noetl dev, the bench's in-process mesh: see
// mesh.LeaveCoreToPostgres) and has goroutines always runnable, as a wide fan-out's workers
// keep them, a reply that Postgres sent in a fraction of a millisecond therefore waited
// 2-10 ms to be noticed, on every round trip of every commit. With polling reads, a
// connection whose reply is not there yet tries the socket again after letting the other
// goroutines run (runtime.Gosched), up to PollReads times, before it waits for the poller
// as usual: the reply is noticed within one round of the run queue. On an idle processor
// the tries are the wait itself, about a microsecond each, on the core Postgres does not
// use. Measured on the 2-core development machine (bench, interleaved runs, medians): a
// 1,000-wide fan-out 14,137 -> 17,823 tasks/s (10 runs each), its commits of a few hundred
// outcomes 9-11 ms -> 3-5 ms.
//
// What holds: a read returns what the socket's own Read would have returned, bytes or an
// error (for anything but "nothing yet" the connection's own Read is called); a deadline
// (pgconn's cancellation of a query sets one in the past) ends the polling at once; writes,
// and every other method, are the socket's. Reads poll on Unix systems (pollread_unix.go);
// elsewhere a connection is the dialer's own.

// pollReads is how many times a connection opened from now on tries a read before it waits
// for the network poller (SetPollReads); 0 turns polling off.
var pollReads atomic.Int64

// SetPollReads makes the connections of the pools opened from now on poll their reads up to
// n times before they wait for the network poller (0: not at all, the default). It is for a
// process that runs its Go scheduler on one processor beside its own Postgres.
func SetPollReads(n int) { pollReads.Store(int64(max(n, 0))) }

// PollReads is the count SetPollReads set last (0: reads do not poll).
func PollReads() int { return int(pollReads.Load()) }

// pollingDial wraps dial so that the connections it makes poll their reads up to n times
// (where the system allows it, polling).
func pollingDial(dial func(context.Context, string, string) (net.Conn, error), n int) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return polling(c, n), nil
	}
}
