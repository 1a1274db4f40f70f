package natsembed

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
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

// TestSyncReachesTheServer: the Sync option is what the running server's JetStream uses
// (its effective configuration), and a bad value stops Start before a server runs.
func TestSyncReachesTheServer(t *testing.T) {
	for _, tc := range []struct {
		sync         string
		wantAlways   bool
		wantInterval time.Duration
	}{
		{"", false, SyncDefault},
		{"always", true, SyncDefault},
		{"ALWAYS", true, SyncDefault},
		{"1s", false, time.Second},
		{" 10s ", false, 10 * time.Second},
	} {
		t.Run(fmt.Sprintf("%q", tc.sync), func(t *testing.T) {
			s, err := Start(Options{StoreDir: t.TempDir(), Sync: tc.sync})
			require.NoError(t, err)
			defer s.Shutdown()
			cfg := s.NATS().JetStreamConfig()
			require.NotNil(t, cfg)
			require.Equal(t, tc.wantAlways, cfg.SyncAlways)
			require.Equal(t, tc.wantInterval, cfg.SyncInterval)
		})
	}
	for _, bad := range []string{"sometimes", "0", "0s", "-1s", "5"} {
		t.Run("bad "+bad, func(t *testing.T) {
			require.Error(t, CheckSync(bad))
			_, err := Start(Options{StoreDir: t.TempDir(), Sync: bad})
			require.ErrorContains(t, err, fmt.Sprintf("natsembed: sync %q: want \"always\" or a positive duration", bad))
		})
	}
}

// TestLostTailReusesSequences shows what a store that loses its unsynced tail (an OS crash
// or power loss with a sync period) does to a stream: the server comes back at the last
// sequence on disk and gives the next message a sequence an acknowledged, lost message had.
// A reader that remembers stream sequences (the materializer's partition cursor) is then
// ahead of the stream. docs/operations.md ("NATS durability") relies on this test. The
// loss is simulated by restoring the store directory as it was after message 100, once 200
// were acknowledged.
func TestLostTailReusesSequences(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	store, at100 := filepath.Join(dir, "store"), filepath.Join(dir, "at100")
	publish := func(js jetstream.JetStream, from, to int) uint64 {
		var seq uint64
		for i := from; i <= to; i++ {
			ack, err := js.Publish(ctx, "e.x", fmt.Appendf(nil, "m%d", i))
			require.NoError(t, err)
			seq = ack.Sequence
		}
		return seq
	}

	s, err := Start(Options{StoreDir: store})
	require.NoError(t, err)
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "E", Subjects: []string{"e.>"}, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	require.EqualValues(t, 100, publish(js, 1, 100))
	require.NoError(t, copyDir(store, at100))
	require.EqualValues(t, 200, publish(js, 101, 200))
	nc.Close()
	s.Shutdown()

	require.NoError(t, os.RemoveAll(store))
	require.NoError(t, os.Rename(at100, store))
	s, err = Start(Options{StoreDir: store})
	require.NoError(t, err)
	defer s.Shutdown()
	nc, err = nats.Connect(s.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err = jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(ctx, "E")
	require.NoError(t, err)
	require.EqualValues(t, 100, st.CachedInfo().State.LastSeq, "messages 101-200 were acknowledged and are gone")
	ack, err := js.Publish(ctx, "e.x", []byte("new"))
	require.NoError(t, err)
	require.EqualValues(t, 101, ack.Sequence, "the next message reuses a lost message's sequence")
}

// copyDir copies the regular files and directories under src to dst.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
}
