// Package connlimit bounds the client connections of a listener and gives their memory
// back once they close. Invariant: a Listener hands its server at most its maximum of
// connections open at once; past it, Accept closes the connection idle the longest (when
// the http.Server reports idle connections through ConnState) or waits until one ends or
// goes idle. Reclaim returns the memory of a flood of closed connections to the operating
// system.
package connlimit

import (
	"container/list"
	"context"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Listener bounds the connections of a listener: at most max are open at once. While max
// are open, Accept closes the connection idle the longest (a keep-alive connection between
// requests, which holds a goroutine and its buffers and serves no one) to make room, or,
// with none idle, waits until one ends or goes idle. Its ConnState method, set as the
// http.Server's ConnState, tells it which connections are idle; without it (the gRPC
// listener) no connection is idle and Accept waits.
type Listener struct {
	net.Listener
	slots chan struct{}
	// wentIdle is signalled when a connection goes idle, for an Accept waiting for room.
	wentIdle chan struct{}
	done     chan struct{}
	close    sync.Once
	// conns is how many connections are open; highWater the most open at once since
	// resetHighWater.
	conns, highWater atomic.Int64

	mu   sync.Mutex
	idle list.List // of *limitedConn, idle the longest at the back
}

// New returns l bounded to max connections open at once.
func New(l net.Listener, max int) *Listener {
	return &Listener{Listener: l, slots: make(chan struct{}, max), wentIdle: make(chan struct{}, 1), done: make(chan struct{})}
}

// Accept implements net.Listener. It makes room once a connection has come (so that an
// idle connection is closed only for a client that is there), holding that one connection
// while it waits.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if err := l.room(); err != nil {
		_ = c.Close()
		return nil, err
	}
	for n := l.conns.Add(1); ; {
		hw := l.highWater.Load()
		if n <= hw || l.highWater.CompareAndSwap(hw, n) {
			break
		}
	}
	return &limitedConn{Conn: c, l: l}, nil
}

// open returns how many connections are open.
func (l *Listener) open() int { return int(l.conns.Load()) }

// highWaterMark returns the most connections open at once since resetHighWater.
func (l *Listener) highWaterMark() int { return int(l.highWater.Load()) }

// resetHighWater starts the high-water mark again from the connections open now.
func (l *Listener) resetHighWater() { l.highWater.Store(l.conns.Load()) }

// Close implements net.Listener.
func (l *Listener) Close() error {
	l.close.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// room takes a slot for the next connection: a free one, or the slot of the connection
// idle the longest, closed for it, or the first that frees up or whose connection goes idle.
func (l *Listener) room() error {
	for {
		select {
		case l.slots <- struct{}{}:
			return nil
		default:
		}
		if l.shedIdle() {
			continue // its slot is free now
		}
		select {
		case l.slots <- struct{}{}:
			return nil
		case <-l.wentIdle:
		case <-l.done:
			return net.ErrClosed
		}
	}
}

// shedIdle closes the connection idle the longest; false when none is idle.
func (l *Listener) shedIdle() bool {
	l.mu.Lock()
	e := l.idle.Back()
	var c *limitedConn
	if e != nil {
		c = l.idle.Remove(e).(*limitedConn)
		c.idle = nil
	}
	l.mu.Unlock()
	if c == nil {
		return false
	}
	_ = c.Close()
	return true
}

// ConnState tracks the idle connections (http.Server.ConnState).
func (l *Listener) ConnState(nc net.Conn, state http.ConnState) {
	c, ok := nc.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.idle != nil {
		l.idle.Remove(c.idle)
		c.idle = nil
	}
	if state == http.StateIdle {
		c.idle = l.idle.PushFront(c)
		select {
		case l.wentIdle <- struct{}{}:
		default:
		}
	}
}

// limitedConn gives its slot back when closed.
type limitedConn struct {
	net.Conn
	l       *Listener
	release sync.Once
	idle    *list.Element // in l.idle while idle; guarded by l.mu
}

// Close implements net.Conn.
func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.release.Do(func() {
		c.l.mu.Lock()
		if c.idle != nil {
			c.l.idle.Remove(c.idle)
			c.idle = nil
		}
		c.l.mu.Unlock()
		c.l.conns.Add(-1)
		<-c.l.slots
	})
	return err
}

// Reclaiming the memory of closed connections: reclaim looks every reclaimEvery, and acts
// once reclaimConns connections (about 40 MiB) have closed since the most that were open.
const (
	reclaimEvery = 10 * time.Second
	reclaimConns = 512
)

// Reclaim returns the memory of closed connections of the listeners ls until ctx ends
// (reclaim every reclaimEvery, once reclaimConns have closed).
func Reclaim(ctx context.Context, log *slog.Logger, ls ...*Listener) {
	reclaim(ctx, reclaimEvery, reclaimConns, log, ls...)
}

// reclaim looks at the listeners every period until ctx ends: once the connections open
// are at least minClosed fewer than the most that were open at once since it last acted (a
// flood of clients went away), it collects twice (the second time for what the first put
// in the victim caches of sync.Pools, such as the buffers of the closed connections) and
// returns the memory to the operating system (debug.FreeOSMemory), rather than leaving it
// to the runtime's next periodic collection, minutes later.
func reclaim(ctx context.Context, period time.Duration, minClosed int, log *slog.Logger, ls ...*Listener) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		high, open := 0, 0
		for _, l := range ls {
			high += l.highWaterMark()
			open += l.open()
		}
		if high-open < minClosed {
			continue
		}
		for _, l := range ls {
			l.resetHighWater()
		}
		runtime.GC()
		debug.FreeOSMemory()
		log.Info("memory of closed client connections returned", slog.Int("closed", high-open), slog.Int("open", open))
	}
}
