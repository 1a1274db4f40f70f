//go:build unix

package pgxext

import (
	"context"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pollingPair is a polling client socket (tries tries) and the server's end of it.
func pollingPair(t *testing.T, tries int) (client net.Conn, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	var d net.Dialer
	client, err = pollingDial(d.DialContext, tries)(context.Background(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	require.True(t, isPolling(client), "a TCP socket polls")
	server = <-accepted
	require.NotNil(t, server)
	t.Cleanup(func() { _ = server.Close() })
	return client, server
}

// TestPollingReadsGiveWhatTheSocketGives: a polling socket reads the bytes sent before the
// read and while it waits, whether they come while it polls (many tries) or once it waits
// for the poller (one try), the end of the stream as io.EOF, and a deadline, set before
// the read or while it waits, as the socket's own timeout error.
func TestPollingReadsGiveWhatTheSocketGives(t *testing.T) {
	for _, tries := range []int{1, 1_000_000} {
		client, server := pollingPair(t, tries)
		buf := make([]byte, 16)

		_, err := server.Write([]byte("ready"))
		require.NoError(t, err)
		n, err := io.ReadFull(client, buf[:5])
		require.NoError(t, err)
		require.Equal(t, "ready", string(buf[:n]), "tries %d", tries)

		got := make(chan string, 1)
		go func() {
			n, err := client.Read(buf)
			if err != nil {
				got <- err.Error()
				return
			}
			got <- string(buf[:n])
		}()
		_, err = server.Write([]byte("later"))
		require.NoError(t, err)
		require.Equal(t, "later", <-got, "tries %d", tries)

		// A deadline set while the read waits ends it with the socket's timeout error.
		failed := make(chan error, 1)
		go func() {
			_, err := client.Read(buf)
			failed <- err
		}()
		require.NoError(t, client.SetReadDeadline(time.Now().Add(-time.Second)))
		err = <-failed
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, "tries %d", tries)
		_, err = client.Read(buf)
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, "a deadline set before the read")

		require.NoError(t, client.SetDeadline(time.Time{}))
		require.NoError(t, server.Close())
		_, err = client.Read(buf)
		require.ErrorIs(t, err, io.EOF, "tries %d", tries)
	}
}
