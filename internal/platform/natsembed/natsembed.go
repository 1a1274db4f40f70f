// Package natsembed runs a NATS server with JetStream inside the current
// process, for tests and for `noetl dev`.
package natsembed

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// readyTimeout bounds the wait for the server to accept connections.
const readyTimeout = 10 * time.Second

// Options configures Start.
type Options struct {
	// StoreDir is the JetStream storage directory. If empty, a temporary
	// directory is created and removed again by Shutdown.
	StoreDir string
	// Host is the client listen address. Empty means 127.0.0.1.
	Host string
	// Port is the client port. Zero picks a random free port.
	Port int
	// Logger receives the server's log (notices at Info). Nil discards it.
	Logger *slog.Logger
	// Sync is how the JetStream file store reaches the disk, in the syntax of the NATS
	// server's jetstream.sync_interval (see ParseSync): "always" to fsync every write
	// before it is acknowledged, a period such as "2m" to fsync in the background that
	// often, or empty for the server's default (SyncDefault). With a period, an OS crash
	// or a power loss can lose messages acknowledged within the last period; a crash of
	// the process alone loses nothing (the data is in the OS's page cache).
	Sync string
}

// SyncAlways is the Sync value that fsyncs every JetStream write before it is
// acknowledged.
const SyncAlways = "always"

// SyncDefault is the NATS server's own sync interval, which an empty Sync keeps.
const SyncDefault = 2 * time.Minute

// ParseSync parses a jetstream.sync_interval value: "always" (any case) returns always
// true, a positive duration (a number with a unit: 500ms, 10s, 2m) returns that interval,
// and the empty string returns neither (the server's default, SyncDefault). Anything else
// is an error saying what is accepted, without naming the setting.
func ParseSync(s string) (always bool, interval time.Duration, err error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return false, 0, nil
	case strings.EqualFold(s, SyncAlways):
		return true, 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return false, 0, errors.New(`want "always" or a positive duration with a unit (1s, 2m)`)
	}
	return false, d, nil
}

// CheckSync reports whether s is a valid Sync value; it is the check a configuration
// setting that holds one runs (config.Env.String, config.FlagSet.String).
func CheckSync(s string) error {
	_, _, err := ParseSync(s)
	return err
}

// Server is a running embedded NATS server.
type Server struct {
	ns     *server.Server
	tmpDir string // StoreDir created by Start, removed by Shutdown
	once   sync.Once
}

// Start starts a NATS server with JetStream enabled, no signal handlers, the default
// 1 MiB max payload and opt.Sync's fsync policy, and waits up to 10 s until it accepts
// connections.
func Start(opt Options) (*Server, error) {
	always, interval, err := ParseSync(opt.Sync)
	if err != nil {
		return nil, fmt.Errorf("natsembed: sync %q: %w", opt.Sync, err)
	}
	s := &Server{}
	storeDir := opt.StoreDir
	if storeDir == "" {
		d, err := os.MkdirTemp("", "natsembed-")
		if err != nil {
			return nil, fmt.Errorf("natsembed: %w", err)
		}
		storeDir, s.tmpDir = d, d
	}
	host := opt.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := opt.Port
	if port == 0 {
		port = server.RANDOM_PORT // 0 would mean the default port 4222
	}
	sopts := &server.Options{
		ServerName: "noetl-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   storeDir,
		NoSigs:     true,
		MaxPayload: server.MAX_PAYLOAD_SIZE,
		// Zero keeps the server's default interval (SyncInterval is also the period of
		// the background sync that runs beside SyncAlways).
		SyncAlways:   always,
		SyncInterval: interval,
	}
	ns, err := server.NewServer(sopts)
	if err != nil {
		s.removeTmp()
		return nil, fmt.Errorf("natsembed: %w", err)
	}
	logger := opt.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	adapter := &slogAdapter{l: logger}
	ns.SetLoggerV2(adapter, false, false, false)
	s.ns = ns
	ns.Start()
	// Poll in short steps so that a fatal start error (such as a busy
	// port) is reported at once instead of after the full timeout.
	deadline := time.Now().Add(readyTimeout)
	for !ns.ReadyForConnections(25 * time.Millisecond) {
		if msg := adapter.fatal.Load(); msg != nil {
			s.Shutdown()
			return nil, fmt.Errorf("natsembed: %s", *msg)
		}
		if time.Now().After(deadline) {
			s.Shutdown()
			return nil, errors.New("natsembed: server not ready for connections within 10s")
		}
	}
	if !ns.JetStreamEnabled() {
		s.Shutdown()
		return nil, errors.New("natsembed: JetStream failed to start")
	}
	return s, nil
}

// ClientURL returns the URL clients connect to, such as
// nats://127.0.0.1:4222.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// NATS returns the underlying server, for tests that need more control.
func (s *Server) NATS() *server.Server { return s.ns }

// Shutdown stops the server and waits until it has shut down. It is safe to
// call more than once.
func (s *Server) Shutdown() {
	s.once.Do(func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
		s.removeTmp()
	})
}

func (s *Server) removeTmp() {
	if s.tmpDir != "" {
		_ = os.RemoveAll(s.tmpDir)
		s.tmpDir = ""
	}
}

// slogAdapter routes nats-server log lines to a slog.Logger. Fatalf is
// logged as an error and remembered: an embedded server must not exit the
// process, and Start reports the message instead.
type slogAdapter struct {
	l     *slog.Logger
	fatal atomic.Pointer[string]
}

func (a *slogAdapter) Noticef(format string, v ...any) { a.l.Info(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Errorf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Debugf(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Tracef(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }

func (a *slogAdapter) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	a.fatal.CompareAndSwap(nil, &msg)
	a.l.Error(msg)
}
