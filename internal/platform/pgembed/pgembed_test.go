//go:build unix

package pgembed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// tempDir returns a directory the postgres user can reach even when the test
// runs as root (t.TempDir's parent is mode 0700 and owned by root).
func tempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "pgembed-test-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func start(t *testing.T, opt Options) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, opt)
	if errors.Is(err, ErrNotFound) && os.Getenv("CI") == "" {
		t.Skip("postgres binaries missing outside CI:", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

func queryInt(t *testing.T, url, sql string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	var n int
	require.NoError(t, conn.QueryRow(ctx, sql).Scan(&n))
	return n
}

func execSQL(t *testing.T, url string, sqls ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	for _, s := range sqls {
		_, err := conn.Exec(ctx, s)
		require.NoError(t, err, s)
	}
}

// testWriter sends log output to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestStartCreateQueryStopRestart(t *testing.T) {
	dir := tempDir(t)
	t0 := time.Now()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	c := start(t, Options{Dir: dir, Fast: true, Logger: log})
	t.Logf("first start (initdb + start): %v", time.Since(t0))

	require.True(t, strings.HasPrefix(c.URL(), "postgres://postgres@127.0.0.1:"), c.URL())
	require.True(t, strings.HasSuffix(c.URL(), "/postgres?sslmode=disable"), c.URL())
	require.Equal(t, 200, queryInt(t, c.URL(), "SELECT current_setting('max_connections')::int"))
	require.Equal(t, 0, queryInt(t, c.URL(), "SELECT CASE WHEN current_setting('fsync')='off' THEN 0 ELSE 1 END"))
	// A client of the socket URL arrives through the unix socket (no client address), one of
	// URL through TCP.
	require.Equal(t, 1, queryInt(t, c.SocketURL(), "SELECT CASE WHEN inet_client_addr() IS NULL THEN 1 ELSE 0 END"))
	require.Equal(t, 0, queryInt(t, c.URL(), "SELECT CASE WHEN inet_client_addr() IS NULL THEN 1 ELSE 0 END"))

	url, err := c.CreateDatabase(context.Background(), "app")
	require.NoError(t, err)
	require.Contains(t, url, "/app?")
	execSQL(t, url, "CREATE TABLE t (id int)", "INSERT INTO t VALUES (1), (2), (3)")
	require.Equal(t, 3, queryInt(t, url, "SELECT count(*) FROM t"))

	_, err = c.CreateDatabase(context.Background(), "app")
	require.Error(t, err, "duplicate database must fail")

	pid := c.PID()
	require.True(t, alive(pid))
	require.NoError(t, c.Stop())
	require.False(t, alive(pid), "postmaster still alive after Stop")
	require.NoError(t, c.Stop(), "second Stop returns the first result")

	// Restart on the same Dir: data is kept, durability settings follow Fast.
	t0 = time.Now()
	c2 := start(t, Options{Dir: dir, Logger: log})
	t.Logf("restart on existing cluster: %v", time.Since(t0))
	require.Equal(t, 3, queryInt(t, c2.dbURL("app"), "SELECT count(*) FROM t"))
	require.Equal(t, 1, queryInt(t, c2.URL(), "SELECT CASE WHEN current_setting('fsync')='off' THEN 0 ELSE 1 END"))
	require.NoError(t, c2.Stop())
}

func TestRestartAfterKill9(t *testing.T) {
	dir := tempDir(t)
	// Not Fast: with synchronous_commit=off, commits acknowledged just
	// before a crash may legitimately be lost.
	c := start(t, Options{Dir: dir})
	url, err := c.CreateDatabase(context.Background(), "keep")
	require.NoError(t, err)
	execSQL(t, url, "CREATE TABLE t (id int)", "INSERT INTO t VALUES (42)")

	// Hold a backend open so that a backend outlives the postmaster for a
	// moment, like after a real crash.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()

	pid := c.PID()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	<-c.exited
	_, err = os.Stat(filepath.Join(dir, "data", "postmaster.pid"))
	require.NoError(t, err, "a crash leaves postmaster.pid behind")

	c2 := start(t, Options{Dir: dir, Fast: true})
	require.Equal(t, 42, queryInt(t, c2.dbURL("keep"), "SELECT id FROM t"))
	require.NoError(t, c2.Stop())
}

func TestStalePIDFileOfUnrelatedProcess(t *testing.T) {
	dir := tempDir(t)
	c := start(t, Options{Dir: dir, Fast: true})
	require.NoError(t, c.Stop())

	// Forge a postmaster.pid naming a live process that is not postgres
	// (this test binary), as happens when PIDs are reused after a crash.
	pidFile := filepath.Join(dir, "data", "postmaster.pid")
	require.NoError(t, os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"+filepath.Join(dir, "data")+"\n"), 0o600))
	c2 := start(t, Options{Dir: dir, Fast: true})
	require.Equal(t, 1, queryInt(t, c2.URL(), "SELECT 1"))

	// A second cluster on a directory that is in use must be refused.
	_, err := Start(context.Background(), Options{Dir: dir, Fast: true})
	require.ErrorContains(t, err, "already running")
	require.NoError(t, c2.Stop())
}

func TestLongDirUsesShortSocketDir(t *testing.T) {
	base := tempDir(t)
	require.NoError(t, os.Chmod(base, 0o755)) // let the postgres user traverse it
	dir := filepath.Join(base, strings.Repeat("d", 60), strings.Repeat("e", 60))
	c := start(t, Options{Dir: dir, Fast: true})
	require.True(t, c.tmpSock)
	require.Less(t, len(c.sockDir), maxSocketDirLen)
	require.Equal(t, 1, queryInt(t, c.URL(), "SELECT 1"))
	require.Equal(t, 1, queryInt(t, c.SocketURL(), "SELECT CASE WHEN inet_client_addr() IS NULL THEN 1 ELSE 0 END"))
	sock := c.sockDir
	require.NoError(t, c.Stop())
	_, err := os.Stat(sock)
	require.True(t, os.IsNotExist(err), "temporary socket dir removed by Stop")
}

func TestFixedPort(t *testing.T) {
	port := mustFreePort(t)
	c := start(t, Options{Dir: tempDir(t), Port: port, Fast: true})
	require.Equal(t, port, c.Port())
	require.Contains(t, c.URL(), ":"+strconv.Itoa(port)+"/")
	require.NoError(t, c.Stop())
}

func TestMissingBinaries(t *testing.T) {
	t.Setenv(EnvBinDir, "/nonexistent/pg/bin")
	_, err := Start(context.Background(), Options{Dir: tempDir(t)})
	require.ErrorIs(t, err, ErrNotFound)
	require.Contains(t, err.Error(), "apt-get install -y postgresql")
}

func TestUnreachableDirAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only meaningful as root: the postgres user cannot enter a root-only directory")
	}
	if _, err := findBinDir(); err != nil && os.Getenv("CI") == "" {
		t.Skip("postgres binaries missing outside CI:", err)
	}
	// t.TempDir's parent is 0700 root, so the postgres user cannot reach it.
	_, err := Start(context.Background(), Options{Dir: filepath.Join(t.TempDir(), "pg")})
	require.ErrorContains(t, err, "not accessible to user postgres")
	require.ErrorContains(t, err, SystemDir, "the message names the fix")
}

func TestVersionKey(t *testing.T) {
	require.Greater(t, versionKey("/usr/lib/postgresql/15/bin"), versionKey("/usr/lib/postgresql/9.6/bin"))
	require.Greater(t, versionKey("/usr/lib/postgresql/16/bin"), versionKey("/usr/lib/postgresql/15/bin"))
	require.Equal(t, -1, versionKey("/usr/lib/postgresql/x/bin"))
}

func mustFreePort(t *testing.T) int {
	t.Helper()
	p, err := freePort()
	require.NoError(t, err)
	return p
}

// TestHelperProcess is not a real test: TestCallerKilled runs the test
// binary again with PGEMBED_HELPER_DIR set, and this function then starts a
// cluster, prints the postmaster PID and blocks until it is killed.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv("PGEMBED_HELPER_DIR")
	if dir == "" {
		t.Skip("helper process only: runs when TestCallerKilled re-executes the test binary")
	}
	c, err := Start(context.Background(), Options{Dir: dir, Fast: true})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	fmt.Println("PID", c.PID())
	select {}
}

func TestCallerKilled(t *testing.T) {
	if _, err := findBinDir(); err != nil && os.Getenv("CI") == "" {
		t.Skip("postgres binaries missing outside CI:", err)
	}
	dir := tempDir(t)
	cmd := osexec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PGEMBED_HELPER_DIR="+dir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	var pid int
	_, err = fmt.Sscanf(line, "PID %d", &pid)
	require.NoError(t, err, line)
	require.True(t, alive(pid))

	// Crash the caller: the postmaster must shut itself down.
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for alive(pid) && !isZombie(pid) {
		require.True(t, time.Now().Before(deadline), "postmaster %d survived its caller", pid)
		time.Sleep(20 * time.Millisecond)
	}

	// And the cluster can be started again.
	c := start(t, Options{Dir: dir, Fast: true})
	require.Equal(t, 1, queryInt(t, c.URL(), "SELECT 1"))
	require.NoError(t, c.Stop())
}

// isZombie reports whether pid has exited but not been reaped yet (orphans
// are reaped by PID 1, which may take a moment).
func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}
