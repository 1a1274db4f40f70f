//go:build unix

// Package pgembed runs a private PostgreSQL cluster from the PostgreSQL
// binaries installed on the machine. It is meant for tests and for
// `noetl dev`: the cluster listens only on 127.0.0.1, trusts every local
// connection and keeps its data under a directory chosen by the caller.
//
// The binaries are located in this order: $NOETL_PG_BIN, the highest version
// under /usr/lib/postgresql/*/bin, then initdb and postgres on $PATH.
//
// When the calling process runs as root, initdb and postgres run as the
// "postgres" system user (PostgreSQL refuses to run as root), and the
// cluster directory is chowned to that user.
//
// The postmaster is started directly (not through pg_ctl), in its own process
// group, and on Linux is told to shut down when the process that started it
// dies, so a crashed caller does not leave an orphan server behind (on macOS
// the next Start finds the server still running and says so).
//
// The package runs on Unix systems (Linux and macOS); it does not build on
// Windows, where a caller uses an existing server instead.
//
// DirFor chooses where the cluster of a state directory lives: beside the
// state when the server user can reach it, else (running as root with a
// state directory under a private home such as /root) under SystemDir.
package pgembed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNotFound is returned (wrapped) by Start when the PostgreSQL server
// binaries cannot be found. Test helpers use it to decide whether to skip.
var ErrNotFound = errors.New("postgres binaries not found: install postgresql (apt-get install -y postgresql) or set NOETL_PG_URL")

// EnvBinDir names the environment variable that, when set, points at the
// directory holding initdb and postgres.
const EnvBinDir = "NOETL_PG_BIN"

// superuser is the name of the cluster's bootstrap superuser.
const superuser = "postgres"

// maxSocketDirLen bounds the unix socket directory length: the socket path
// "<dir>/.s.PGSQL.<port>" must fit in sockaddr_un.sun_path (108 bytes with
// the terminating NUL), and postgres also creates a ".lock" file next to it.
const maxSocketDirLen = 107 - len("/.s.PGSQL.65535.lock")

// stopTimeout bounds how long Stop waits for a fast shutdown before it
// sends SIGKILL to the postmaster's process group.
const stopTimeout = 30 * time.Second

// defaultReadyTimeout bounds the wait for readiness when the context passed
// to Start has no deadline.
const defaultReadyTimeout = 60 * time.Second

// Options configures Start.
type Options struct {
	// Dir holds the cluster: data lives in Dir/data and the server log in
	// Dir/postgres.log. Dir is created if missing. An existing initialised
	// cluster in Dir/data is reused, so data survives restarts.
	Dir string
	// Port is the TCP port on 127.0.0.1. Zero picks a free port.
	Port int
	// Fast turns off fsync and full_page_writes and makes initdb skip
	// its final sync: an OS crash or power loss can lose the last commits,
	// while a crash of the server or of its caller loses nothing, since
	// synchronous_commit stays on. Use it for tests and local development
	// only.
	Fast bool
	// Logger receives progress messages. Nil discards them.
	Logger *slog.Logger
}

// Cluster is a running PostgreSQL server started by Start.
type Cluster struct {
	dir     string
	dataDir string
	logPath string
	sockDir string
	tmpSock bool // sockDir was created by Start and is removed by Stop
	port    int
	pid     int
	log     *slog.Logger

	exited   chan struct{} // closed when the postmaster has been reaped
	waitErr  error         // result of cmd.Wait, valid after exited is closed
	stopOnce sync.Once
	stopErr  error
}

// Start initialises the cluster in opt.Dir if needed, starts the postmaster
// and waits until it accepts connections (bounded by ctx, or by one minute
// when ctx has no deadline).
func Start(ctx context.Context, opt Options) (*Cluster, error) {
	log := opt.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opt.Dir == "" {
		return nil, errors.New("pgembed: Options.Dir is required")
	}
	if opt.Port < 0 || opt.Port > 65535 {
		return nil, fmt.Errorf("pgembed: invalid port %d", opt.Port)
	}
	dir, err := filepath.Abs(opt.Dir)
	if err != nil {
		return nil, fmt.Errorf("pgembed: %w", err)
	}
	bin, err := findBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	if err := prepareDir(dir, cred); err != nil {
		return nil, err
	}

	dataDir := filepath.Join(dir, "data")
	if err := initCluster(ctx, bin, dir, dataDir, cred, opt.Fast, log); err != nil {
		return nil, err
	}
	if err := clearStalePIDFile(dataDir, log); err != nil {
		return nil, err
	}

	c := &Cluster{
		dir:     dir,
		dataDir: dataDir,
		logPath: filepath.Join(dir, "postgres.log"),
		sockDir: dir,
		log:     log,
	}
	if len(dir) > maxSocketDirLen {
		s, err := os.MkdirTemp("/tmp", "pgs")
		if err != nil {
			return nil, fmt.Errorf("pgembed: socket dir: %w", err)
		}
		c.sockDir, c.tmpSock = s, true
		if err := chownTree(s, cred); err != nil {
			_ = os.RemoveAll(s)
			return nil, err
		}
	}

	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultReadyTimeout)
		defer cancel()
	}

	// Retry two kinds of startup failure: with an automatically chosen port
	// another process may grab the port between our probe and the
	// postmaster's bind; and after a crash (kill -9 of the postmaster) its
	// orphaned children hold the old shared memory for a moment.
	bindRetries := 0
	for {
		c.port = opt.Port
		if c.port == 0 {
			if c.port, err = freePort(); err != nil {
				c.cleanupSock()
				return nil, err
			}
		}
		err = c.launch(ctx, bin, cred, opt.Fast)
		if err == nil {
			return c, nil
		}
		var le *launchError
		if !errors.As(err, &le) {
			c.cleanupSock()
			return nil, err
		}
		switch {
		case opt.Port == 0 && bindRetries < 3 && strings.Contains(le.log, "could not bind"):
			bindRetries++
			log.Warn("postgres could not bind port, retrying", "port", c.port)
		case strings.Contains(le.log, "pre-existing shared memory block"):
			log.Warn("processes of a previous postgres still hold its shared memory, retrying", "data", dataDir)
			select {
			case <-ctx.Done():
				c.cleanupSock()
				return nil, err
			case <-time.After(100 * time.Millisecond):
			}
		default:
			c.cleanupSock()
			return nil, err
		}
	}
}

// launchError reports a postmaster that exited during startup, with the log
// it wrote.
type launchError struct {
	err     error
	logPath string
	log     string
}

func (e *launchError) Error() string {
	return fmt.Sprintf("pgembed: postgres exited during startup (%v); log %s:\n%s", e.err, e.logPath, tail(e.log, 20))
}

// URL returns the connection URL of the cluster's "postgres" database,
// connecting as the superuser over TCP on 127.0.0.1.
func (c *Cluster) URL() string {
	return c.dbURL(superuser)
}

// SocketURL returns the connection URL of the cluster's "postgres" database, connecting as
// the superuser through the cluster's unix socket. A client on the same machine should use
// it: a round trip through the socket took a third of one through loopback TCP here (48 us
// against 150 us, a pooled SELECT 1), and a step's commit is a round trip.
func (c *Cluster) SocketURL() string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(superuser),
		Path:     "/" + superuser,
		RawQuery: url.Values{"host": {c.sockDir}, "port": {strconv.Itoa(c.port)}, "sslmode": {"disable"}}.Encode(),
	}
	return u.String()
}

// PID returns the process id of the postmaster.
func (c *Cluster) PID() int { return c.pid }

// Port returns the TCP port the cluster listens on.
func (c *Cluster) Port() int { return c.port }

// CreateDatabase creates a database called name and returns its URL.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) (string, error) {
	if name == "" {
		return "", errors.New("pgembed: empty database name")
	}
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return "", fmt.Errorf("pgembed: connect: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgembed: create database %q: %w", name, err)
	}
	return c.dbURL(name), nil
}

// Stop shuts the cluster down with a fast shutdown (SIGINT to the
// postmaster) and waits until the postmaster is gone. If it is still running
// after 30 seconds, its whole process group is killed with SIGKILL. Stop is
// safe to call more than once; later calls return the first result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.stopErr = c.stop()
		c.cleanupSock()
	})
	return c.stopErr
}

func (c *Cluster) stop() error {
	select {
	case <-c.exited:
		return fmt.Errorf("pgembed: postgres (pid %d) had already exited: %v", c.pid, c.waitErr)
	default:
	}
	start := time.Now()
	if err := syscall.Kill(c.pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("pgembed: signal postgres (pid %d): %w", c.pid, err)
	}
	select {
	case <-c.exited:
		c.log.Info("postgres stopped", "pid", c.pid, "elapsed", time.Since(start))
		return nil
	case <-time.After(stopTimeout):
	}
	c.log.Warn("postgres did not stop in time, killing", "pid", c.pid)
	_ = syscall.Kill(-c.pid, syscall.SIGKILL)
	<-c.exited
	return fmt.Errorf("pgembed: postgres (pid %d) did not shut down within %v and was killed", c.pid, stopTimeout)
}

func (c *Cluster) cleanupSock() {
	if c.tmpSock {
		_ = os.RemoveAll(c.sockDir)
		c.tmpSock = false
	}
}

func (c *Cluster) dbURL(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// launch starts the postmaster and waits for readiness. On failure the
// postmaster, if it was started, has exited when launch returns.
func (c *Cluster) launch(ctx context.Context, bin string, cred *syscall.Credential, fast bool) error {
	logf, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pgembed: open log: %w", err)
	}
	defer func() { _ = logf.Close() }() // the child keeps its own descriptor
	var logStart int64
	if fi, err := logf.Stat(); err == nil {
		logStart = fi.Size()
	}
	if cred != nil {
		if err := os.Chown(c.logPath, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("pgembed: chown log: %w", err)
		}
	}

	onOff := "on"
	if fast {
		onOff = "off"
	}
	args := []string{
		"-D", c.dataDir,
		"-p", strconv.Itoa(c.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + quoteListItem(c.sockDir),
		"-c", "max_connections=200",
		"-c", "fsync=" + onOff,
		"-c", "synchronous_commit=on",
		"-c", "full_page_writes=" + onOff,
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.Dir = c.dir
	cmd.Env = childEnv()
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: cred,
		Setpgid:    true,
	}
	// Shut down (fast) if the process that started us dies (Linux). The
	// signal is tied to the forking OS thread, which is why the goroutine
	// below stays locked to its thread until the postmaster has exited.
	setParentDeathSignal(cmd.SysProcAttr)

	c.exited = make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			close(c.exited)
			return
		}
		started <- nil
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("pgembed: start postgres: %w", err)
	}
	c.pid = cmd.Process.Pid

	t0 := time.Now()
	if err := c.waitReady(ctx, logStart); err != nil {
		select {
		case <-c.exited:
		default:
			_ = syscall.Kill(-c.pid, syscall.SIGKILL)
			<-c.exited
		}
		return err
	}
	c.log.Info("postgres ready", "pid", c.pid, "port", c.port, "dir", c.dir, "elapsed", time.Since(t0))
	return nil
}

// waitReady polls the server with real connections until one succeeds, the
// postmaster exits, or ctx ends.
func (c *Cluster) waitReady(ctx context.Context, logStart int64) error {
	backoff := 10 * time.Millisecond
	var last error
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(attempt, c.URL())
		if err == nil {
			err = conn.Ping(attempt)
			_ = conn.Close(attempt)
		}
		cancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-c.exited:
			return &launchError{err: c.waitErr, logPath: c.logPath, log: c.logSince(logStart)}
		case <-ctx.Done():
			return fmt.Errorf("pgembed: postgres not ready: %w (last error: %v); log %s:\n%s", ctx.Err(), last, c.logPath, tail(c.logSince(logStart), 20))
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 200*time.Millisecond)
	}
}

// logSince returns what the server log holds after byte offset off.
func (c *Cluster) logSince(off int64) string {
	f, err := os.Open(c.logPath)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// findBinDir returns the directory that holds initdb and postgres.
func findBinDir() (string, error) {
	has := func(dir string) bool {
		for _, name := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if dir := os.Getenv(EnvBinDir); dir != "" {
		if has(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("%w (%s=%s has no initdb/postgres)", ErrNotFound, EnvBinDir, dir)
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(matches, func(i, j int) bool { // highest version first
		return versionKey(matches[i]) > versionKey(matches[j])
	})
	for _, dir := range matches {
		if has(dir) {
			return dir, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		// Debian symlinks initdb into /usr/local/bin or /usr/bin; the
		// real directory also holds postgres.
		if real, err := filepath.EvalSymlinks(p); err == nil && has(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
		if has(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	return "", ErrNotFound
}

// versionKey turns /usr/lib/postgresql/<v>/bin into a sortable number
// (9.6 -> 9006, 15 -> 15000).
func versionKey(binDir string) int {
	v := filepath.Base(filepath.Dir(binDir))
	major, minor, _ := strings.Cut(v, ".")
	a, err := strconv.Atoi(major)
	if err != nil {
		return -1
	}
	b, _ := strconv.Atoi(minor)
	return a*1000 + b
}

// runAs returns the credential for the server processes: the "postgres"
// system user when running as root, nil (the current user) otherwise.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgembed: running as root needs a %q system user to run PostgreSQL: %w", "postgres", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("pgembed: bad uid/gid %q/%q for user postgres", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// prepareDir creates dir (parents 0755, dir itself 0700), checks that the
// server user can reach it and hands the tree to that user.
func prepareDir(dir string, cred *syscall.Credential) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("pgembed: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("pgembed: %w", err)
	}
	if cred == nil {
		return nil
	}
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("pgembed: %w", err)
		}
		if !searchable(fi, cred) {
			return fmt.Errorf("pgembed: directory %s (mode %v) is not accessible to user postgres, which runs the server when the caller is root; put the cluster under a directory that user can reach (DirFor chooses one under %s), or use an existing server (NOETL_PG_URL)", p, fi.Mode().Perm(), SystemDir)
		}
		if p == filepath.Dir(p) {
			break
		}
	}
	return chownTree(dir, cred)
}

// searchable reports whether the user in cred may traverse the directory.
func searchable(fi fs.FileInfo, cred *syscall.Credential) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	perm := fi.Mode().Perm()
	switch {
	case st.Uid == cred.Uid:
		return perm&0o100 != 0
	case st.Gid == cred.Gid:
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// chownTree gives dir and everything below it to the user in cred.
func chownTree(dir string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	uid, gid := int(cred.Uid), int(cred.Gid)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == gid {
			return nil
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		return fmt.Errorf("pgembed: chown %s: %w", dir, err)
	}
	return nil
}

// initCluster runs initdb unless dataDir already holds a cluster.
func initCluster(ctx context.Context, bin, dir, dataDir string, cred *syscall.Credential, fast bool, log *slog.Logger) error {
	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); err == nil {
		log.Info("reusing postgres cluster", "data", dataDir)
		return nil
	}
	if entries, err := os.ReadDir(dataDir); err == nil && len(entries) > 0 {
		return fmt.Errorf("pgembed: %s is not empty but holds no PostgreSQL cluster (no PG_VERSION)", dataDir)
	}
	args := []string{"-D", dataDir, "-U", superuser, "--auth=trust", "-E", "UTF8", "--no-locale"}
	if fast {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), args...)
	cmd.Dir = dir
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgembed: initdb %s: %w\n%s", dataDir, err, out)
	}
	log.Info("initdb done", "data", dataDir, "elapsed", time.Since(t0))
	return nil
}

// clearStalePIDFile removes postmaster.pid when the process it names is
// gone or is not a postgres process (a reused PID after a crash, common in
// containers), and fails when a postgres process still owns the cluster.
func clearStalePIDFile(dataDir string, log *slog.Logger) error {
	path := filepath.Join(dataDir, "postmaster.pid")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pgembed: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err == nil && pid > 0 && processAlive(pid) {
		name, known := processName(pid)
		if (!known && processAlive(pid)) || name == "postgres" || name == "postmaster" {
			return fmt.Errorf("pgembed: cluster in %s is already running (postgres pid %d)", dataDir, pid)
		}
	}
	log.Warn("removing stale postmaster.pid", "data", dataDir, "pid", first)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pgembed: %w", err)
	}
	return nil
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// childEnv is the environment of initdb and postgres: ours minus PG*
// variables, which could redirect them elsewhere.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return append(env, "LC_ALL=C")
}

// quoteListItem double-quotes a path for a comma-separated GUC list when it
// contains characters that the list parser would split or trim on.
func quoteListItem(s string) string {
	if !strings.ContainsAny(s, ", \t\"") {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgembed: find free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
