package chaos

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// balancer is a TCP load balancer on 127.0.0.1 in front of the replicas of one service,
// as a Kubernetes Service is: each accepted connection goes to the next backend that
// accepts a connection, round robin. The gateway and the workers reach the two
// orchestrators through it (they take one address each).
type balancer struct {
	ln       net.Listener
	backends []string
	next     atomic.Uint64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	closed   bool
}

// newBalancer listens on 127.0.0.1 and serves until Close.
func newBalancer(backends []string) (*balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &balancer{ln: ln, backends: backends, conns: map[net.Conn]struct{}{}}
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

// Addr is the address clients dial.
func (b *balancer) Addr() string { return b.ln.Addr().String() }

func (b *balancer) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		if !b.track(c) {
			_ = c.Close()
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer b.untrack(c)
			b.pipe(c)
		}()
	}
}

func (b *balancer) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.conns[c] = struct{}{}
	return true
}

func (b *balancer) untrack(c net.Conn) {
	b.mu.Lock()
	delete(b.conns, c)
	b.mu.Unlock()
	_ = c.Close()
}

// pipe connects c to a backend and copies both ways until either side closes.
func (b *balancer) pipe(c net.Conn) {
	start := b.next.Add(1)
	var up net.Conn
	for i := range len(b.backends) {
		addr := b.backends[(int(start)+i)%len(b.backends)]
		d, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			up = d
			break
		}
	}
	if up == nil {
		return
	}
	if !b.track(up) {
		_ = up.Close()
		return
	}
	defer b.untrack(up)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// Close stops accepting, closes every connection and waits for the copies to end.
func (b *balancer) Close() {
	b.mu.Lock()
	b.closed = true
	for c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	_ = b.ln.Close()
	b.wg.Wait()
}
