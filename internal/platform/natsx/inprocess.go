package natsx

import (
	"net"
	"net/url"
	"sync"

	"github.com/nats-io/nats.go"
)

// In-process connections. A service that runs in the same process as an embedded NATS
// server (noetl dev, the in-process bench mesh, tests) connects to it through an in-memory
// pipe instead of loopback TCP: no socket, no syscall per write and read, no TCP stack
// between a publish and the server. The server registers the URL it listens on
// (ServeInProcess); Connect to that URL then dials in memory. The dial is looked up again
// at every reconnect, so a client outlives its server's restart at the same URL (the new
// server registers itself), and a URL no server of this process serves any more is
// dialled over TCP, as any other.

// inProcess holds the servers of this process by client URL.
var inProcess sync.Map // string -> nats.InProcessConnProvider

// ServeInProcess makes Connect to url dial p in memory until the returned function is
// called.
func ServeInProcess(url string, p nats.InProcessConnProvider) (stop func()) {
	inProcess.Store(url, p)
	return func() { inProcess.CompareAndDelete(url, p) }
}

// inProcessDialer dials the in-process server of a URL, or its host over TCP when the
// process serves it no more.
type inProcessDialer struct{ url string }

// InProcessConn implements nats.InProcessConnProvider.
func (d inProcessDialer) InProcessConn() (net.Conn, error) {
	if p, ok := inProcess.Load(d.url); ok {
		return p.(nats.InProcessConnProvider).InProcessConn()
	}
	u, err := url.Parse(d.url)
	if err != nil {
		return nil, err
	}
	return net.Dial("tcp", u.Host)
}

// inProcessOption is the option that dials url in memory when this process serves it.
func inProcessOption(url string) nats.Option {
	if _, ok := inProcess.Load(url); !ok {
		return func(*nats.Options) error { return nil }
	}
	return nats.InProcessServer(inProcessDialer{url: url})
}
