package chaos

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// echoServer is the secret playbook's remote system, on 127.0.0.1: it answers every
// request with the request's headers, the Authorization header (the sentinel token)
// included, as a careless API would, and counts the requests that carried the sentinel.
type echoServer struct {
	srv      *http.Server
	ln       net.Listener
	sentinel string
	// withSentinel counts requests whose Authorization carried the sentinel; requests all
	// of them.
	withSentinel, requests atomic.Int64
}

func newEchoServer(sentinel string) (*echoServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &echoServer{ln: ln, sentinel: sentinel}
	e.srv = &http.Server{Handler: http.HandlerFunc(e.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = e.srv.Serve(ln) }()
	return e, nil
}

// URL is the server's base URL.
func (e *echoServer) URL() string { return "http://" + e.ln.Addr().String() }

func (e *echoServer) serve(w http.ResponseWriter, r *http.Request) {
	e.requests.Add(1)
	if strings.Contains(r.Header.Get("Authorization"), e.sentinel) {
		e.withSentinel.Add(1)
	}
	headers := map[string]string{}
	for k, v := range r.Header {
		headers[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Path, "headers": headers})
}

func (e *echoServer) Close() { _ = e.srv.Close() }
