package connlimit

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/testkit"
)

// TestConnLimitShedsTheLongestIdleConnection fills a listener of two connections with an
// idle keep-alive connection and a new one: a third connection closes the idle one and is
// served; the new one, not idle, is left alone.
// limitedServer serves "ok" on a listener of at most max connections, and returns it with
// a function that dials it and one that sends a request on a connection.
func limitedServer(t *testing.T, max int) (l *Listener, dial func() net.Conn, get func(net.Conn)) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l = New(lis, max)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), ConnState: l.ConnState, ReadHeaderTimeout: time.Minute}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		require.ErrorIs(t, <-done, http.ErrServerClosed)
	})
	get = func(c net.Conn) {
		t.Helper()
		_, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	dial = func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", lis.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	return l, dial, get
}

func TestConnLimitShedsTheLongestIdleConnection(t *testing.T) {
	l, dial, get := limitedServer(t, 2)
	idle := dial()
	get(idle)
	testkit.WaitFor(t, 10*time.Second, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.idle.Len() != 1 {
			return errors.New("the first connection is not idle yet")
		}
		return nil
	})
	fresh := dial() // connected, no request yet: not idle
	testkit.WaitFor(t, 10*time.Second, func() error {
		if len(l.slots) != 2 {
			return errors.New("the second connection is not accepted yet")
		}
		return nil
	})
	third := dial()
	get(third)
	require.NoError(t, idle.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err := idle.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the idle connection was closed to make room")
	get(fresh)
	require.Equal(t, 2, l.open())
	require.Equal(t, 2, l.highWaterMark())
	l.resetHighWater()
	require.Equal(t, 2, l.highWaterMark())
}

// TestReclaimReturnsMemoryOnceConnectionsClose closes a connection of a listener that
// reclaim watches: at its next look it returns the memory (and logs it).
func TestReclaimReturnsMemoryOnceConnectionsClose(t *testing.T) {
	l, dial, get := limitedServer(t, 4)
	c := dial()
	get(c)
	logs := &strings.Builder{}
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		reclaim(ctx, 10*time.Millisecond, 1, log, l)
	}()
	t.Cleanup(func() { cancel(); <-done })
	require.NoError(t, c.Close())
	testkit.WaitFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if !strings.Contains(logs.String(), "memory of closed client connections returned") {
			return errors.New("not reclaimed yet")
		}
		return nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestConnLimitAdmitsAWaitingConnectionWhenOneGoesIdle fills a listener of one connection
// with a connection that has sent nothing: a second connection waits, and is accepted as
// soon as the first goes idle after a request (which closes it).
func TestConnLimitAdmitsAWaitingConnectionWhenOneGoesIdle(t *testing.T) {
	l, dial, get := limitedServer(t, 1)
	first := dial()
	testkit.WaitFor(t, 10*time.Second, func() error {
		if len(l.slots) != 1 {
			return errors.New("the first connection is not accepted yet")
		}
		return nil
	})
	second := dial() // in the backlog: no room
	served := make(chan error, 1)
	go func() {
		if _, err := io.WriteString(second, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			served <- err
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(second), nil)
		if err == nil {
			_ = resp.Body.Close()
		}
		served <- err
	}()
	get(first) // goes idle: shed for the second
	require.NoError(t, <-served)
	require.NoError(t, first.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err := first.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
}
