// Package testkit holds helpers for tests that need real infrastructure:
// a PostgreSQL database, a NATS JetStream server, polling and free ports.
// Everything a helper starts is cleaned up with t.Cleanup, except the shared
// PostgreSQL cluster, which Main stops when the test binary is done.
//
// A package whose tests call StartPostgres must run them through Main:
//
//	func TestMain(m *testing.M) { testkit.Main(m) }
package testkit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noetl/noetl/internal/platform/natsembed"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/platform/pgembed"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/schema"
)

// EnvPGURL names the environment variable that points StartPostgres at an
// existing server instead of a throwaway cluster. Its URL must allow
// CREATE DATABASE; each call still gets a fresh database on that server.
const EnvPGURL = "NOETL_PG_URL"

// pgStartTimeout bounds initdb plus the first start of the shared cluster.
const pgStartTimeout = 3 * time.Minute

var (
	mainCalled atomic.Bool
	dbSeq      atomic.Int64

	pgOnce    sync.Once
	pgAdmin   string           // admin URL of the server databases are created on
	pgCluster *pgembed.Cluster // nil when EnvPGURL is used
	pgDir     string           // directory of pgCluster
	pgErr     error
)

// Main runs the tests of a package and then stops the PostgreSQL cluster
// that StartPostgres may have started, and exits with the tests' code. Call
// it from TestMain in every package that uses StartPostgres.
func Main(m *testing.M) {
	mainCalled.Store(true)
	code := m.Run()
	stopPostgres()
	os.Exit(code)
}

func stopPostgres() {
	if pgCluster != nil {
		if err := pgCluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "testkit: stop postgres:", err)
		}
		pgCluster = nil
	}
	if pgDir != "" {
		_ = os.RemoveAll(pgDir)
		pgDir = ""
	}
}

// StartPostgres returns the URL of a new, empty database, dropped again when
// the test ends. All calls in one test binary share one throwaway cluster
// under os.TempDir (started on first use, so initdb runs once per package)
// unless NOETL_PG_URL names a server to use instead.
//
// Without PostgreSQL binaries the test is skipped, or fails when the CI
// environment variable is set.
func StartPostgres(t testing.TB) string {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatal("testkit.StartPostgres needs the package's TestMain to call testkit.Main(m), which stops the shared cluster")
	}
	pgOnce.Do(initPostgres)
	if pgErr != nil {
		if errors.Is(pgErr, pgembed.ErrNotFound) && os.Getenv("CI") == "" {
			t.Skip("testkit: skipping:", pgErr)
		}
		t.Fatal("testkit:", pgErr)
	}

	name := dbName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, pgAdmin)
	if err != nil {
		t.Fatalf("testkit: connect to postgres: %v", err)
	}
	defer func() { _ = admin.Close(context.Background()) }()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("testkit: create database %s: %v", name, err)
	}
	t.Cleanup(func() { dropDatabase(t, name) })

	u, err := withDatabase(pgAdmin, name)
	if err != nil {
		t.Fatal("testkit:", err)
	}
	return u
}

// StartMigratedPostgres is StartPostgres with NoETL's schema migrated in the new database,
// as the deployment's migrate step does (schema.Migrate). Its URL connects as the
// superuser, for tests of a store that read and write the tables directly; a service
// started through its Run connects as its own login role (schema.Setup), and all but the
// materializer refuse the superuser.
func StartMigratedPostgres(t testing.TB) string {
	t.Helper()
	u := StartPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := pgxext.Open(ctx, u, 2)
	if err != nil {
		t.Fatal("testkit:", err)
	}
	defer db.Close()
	if err := schema.Migrate(ctx, db, nil); err != nil {
		t.Fatal("testkit: migrate:", err)
	}
	return u
}

func initPostgres() {
	if u := os.Getenv(EnvPGURL); u != "" {
		pgAdmin = u
		return
	}
	dir, err := os.MkdirTemp("", "noetl-testpg-")
	if err != nil {
		pgErr = err
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgStartTimeout)
	defer cancel()
	c, err := pgembed.Start(ctx, pgembed.Options{Dir: dir, Fast: true})
	if err != nil {
		_ = os.RemoveAll(dir)
		pgErr = err
		return
	}
	pgCluster, pgDir, pgAdmin = c, dir, c.URL()
}

// dropDatabase removes a test database, closing connections the test left
// open.
func dropDatabase(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgAdmin)
	if err != nil {
		t.Logf("testkit: drop database %s: %v", name, err)
		return
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Logf("testkit: drop database %s: %v", name, err)
	}
}

// dbName derives a unique database name (at most 63 bytes) from a test name.
func dbName(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	base := b.String()
	if len(base) > 40 {
		base = base[:40]
	}
	return fmt.Sprintf("t_%s_%d_%d", base, os.Getpid(), dbSeq.Add(1))
}

// withDatabase returns the postgres URL u with its database replaced by db.
func withDatabase(u, db string) (string, error) {
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "postgres" && pu.Scheme != "postgresql") {
		return "", fmt.Errorf("%s must be a postgres:// URL, got %q", EnvPGURL, u)
	}
	pu.Path, pu.RawPath = "/"+db, ""
	return pu.String(), nil
}

// StartNATS starts a fresh embedded NATS JetStream server, stored in a
// t.TempDir, and returns its client URL. It is shut down when the test ends.
func StartNATS(t testing.TB) string {
	t.Helper()
	s, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal("testkit:", err)
	}
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

// StartJetStream starts a NATS server as StartNATS does, connects to it and declares the
// mesh's streams (natsx.EnsureStreams, one replica): what a test of a publisher or a
// consumer of those streams needs. The connection closes when the test ends.
func StartJetStream(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, js, err := natsx.Connect(StartNATS(t), t.Name())
	if err != nil {
		t.Fatal("testkit:", err)
	}
	t.Cleanup(nc.Close)
	if err := natsx.EnsureStreams(context.Background(), js, natsx.StreamConfig{}); err != nil {
		t.Fatal("testkit:", err)
	}
	return nc, js
}

// WaitFor calls cond until it returns nil, backing off from 1 ms to 100 ms
// between calls. If cond still fails when timeout has passed, the test fails
// with cond's last error.
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("WaitFor: condition not met within %v: %v", timeout, err)
		}
		time.Sleep(min(wait, left))
		wait = min(wait*2, 100*time.Millisecond)
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for a process the
// test starts to listen on. It is drawn below the kernel's ephemeral range (from which
// every outgoing connection takes its local port, so a port the kernel handed out there
// could be taken by a connection before the process bound it), at random so that test
// processes running at once rarely draw alike, and never twice in one test process.
func FreePort(t testing.TB) int {
	t.Helper()
	lo, hi := freePortLow, ephemeralLow()
	for range 1000 {
		p := lo + rand.IntN(hi-lo)
		if _, taken := handedOut.LoadOrStore(p, true); taken {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		_ = l.Close()
		return p
	}
	t.Fatal("testkit: no free port below the ephemeral range")
	return 0
}

// freePortLow is the lowest port FreePort draws.
const freePortLow = 15000

// handedOut holds the ports FreePort returned in this process.
var handedOut sync.Map

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range; 32768 where it cannot be read or leaves too little below it).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		var lo, hi int
		if _, err := fmt.Sscan(string(b), &lo, &hi); err == nil && lo > freePortLow+1000 {
			return lo
		}
	}
	return 32768
}
