//go:build unix

package pgxext

import (
	"errors"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
)

// polling is c with its reads polling up to tries times (pollConn), or c itself when it
// has no file descriptor to try.
func polling(c net.Conn, tries int) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	return &pollConn{Conn: c, raw: raw, tries: tries}
}

// isPolling reports whether c's reads poll.
func isPolling(c net.Conn) bool {
	_, ok := c.(*pollConn)
	return ok
}

// pollConn is a socket whose reads poll (see above).
type pollConn struct {
	net.Conn
	raw   syscall.RawConn
	tries int
	// deadline is the read deadline (Unix nanoseconds, 0 for none), set from any goroutine.
	deadline atomic.Int64
}

// SetDeadline implements net.Conn.
func (c *pollConn) SetDeadline(t time.Time) error {
	c.deadline.Store(unixNano(t))
	return c.Conn.SetDeadline(t)
}

// SetReadDeadline implements net.Conn.
func (c *pollConn) SetReadDeadline(t time.Time) error {
	c.deadline.Store(unixNano(t))
	return c.Conn.SetReadDeadline(t)
}

// unixNano is t in Unix nanoseconds, 0 for the zero time (no deadline).
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// Read implements net.Conn: it tries the socket without waiting up to c.tries times,
// letting the other goroutines run between tries, then reads as the socket does.
func (c *pollConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return c.Conn.Read(p)
	}
	for range c.tries {
		if d := c.deadline.Load(); d != 0 && time.Now().UnixNano() >= d {
			break
		}
		var n int
		var rerr error
		if err := c.raw.Read(func(fd uintptr) bool {
			n, rerr = syscall.Read(int(fd), p)
			return true // never wait here: the runtime would wait for the poller
		}); err != nil {
			break
		}
		if n > 0 {
			return n, nil
		}
		if !errors.Is(rerr, syscall.EAGAIN) {
			break // the end of the stream or an error: the socket's Read reports it
		}
		runtime.Gosched()
	}
	return c.Conn.Read(p)
}
