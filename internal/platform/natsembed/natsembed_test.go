package natsembed

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestPublishConsume(t *testing.T) {
	s, err := Start(Options{StoreDir: t.TempDir()})
	require.NoError(t, err)
	defer s.Shutdown()
	require.True(t, strings.HasPrefix(s.ClientURL(), "nats://127.0.0.1:"), s.ClientURL())

	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	require.EqualValues(t, 1<<20, nc.MaxPayload())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}})
	require.NoError(t, err)
	for i := range 3 {
		_, err := js.Publish(ctx, "events.run.1", fmt.Appendf(nil, "e%d", i))
		require.NoError(t, err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "EVENTS", jetstream.ConsumerConfig{Durable: "c1", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	batch, err := cons.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var got []string
	for msg := range batch.Messages() {
		got = append(got, string(msg.Data()))
		require.NoError(t, msg.Ack())
	}
	require.NoError(t, batch.Error())
	require.Equal(t, []string{"e0", "e1", "e2"}, got)

	nc.Close()
	s.Shutdown()
	s.Shutdown() // idempotent
}

func TestStoreDirSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s, err := Start(Options{StoreDir: dir})
	require.NoError(t, err)
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "s.x", []byte("kept"))
	require.NoError(t, err)
	nc.Close()
	s.Shutdown()

	s, err = Start(Options{StoreDir: dir})
	require.NoError(t, err)
	defer s.Shutdown()
	nc, err = nats.Connect(s.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err = jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(ctx, "S")
	require.NoError(t, err)
	msg, err := st.GetLastMsgForSubject(ctx, "s.x")
	require.NoError(t, err)
	require.Equal(t, "kept", string(msg.Data))
}

func TestTempStoreDirAndLogger(t *testing.T) {
	var mu sync.Mutex
	var buf strings.Builder
	h := slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil)
	s, err := Start(Options{Logger: slog.New(h)})
	require.NoError(t, err)
	dir := s.tmpDir
	require.DirExists(t, dir)
	s.Shutdown()
	_, err = os.Stat(dir)
	require.True(t, os.IsNotExist(err), "temporary StoreDir removed")
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, buf.String(), "Starting nats-server")
}

func TestFixedPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	s, err := Start(Options{StoreDir: t.TempDir(), Port: port})
	require.NoError(t, err)
	defer s.Shutdown()
	require.Equal(t, fmt.Sprintf("nats://127.0.0.1:%d", port), s.ClientURL())

	t0 := time.Now()
	_, err = Start(Options{StoreDir: t.TempDir(), Port: port})
	require.Error(t, err, "port already in use")
	t.Logf("second server on a busy port failed after %v: %v", time.Since(t0), err)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
