package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one OS process of the cluster (a service or a NATS node) that can be started
// again after a kill: the same binary, arguments, environment and addresses every time.
// Each runs in its own process group, so a signal to -pid reaches it and nothing else.
type proc struct {
	// kind is the fault target class: gateway, orchestrator, materializer, statebuilder,
	// resultstore, worker (shared or system pool) or nats.
	kind string
	// name is unique: orchestrator-0, worker-system-0, nats-1, ...
	name string
	bin  string
	args []string
	env  []string
	// admin is the address whose readiness URL says the process is ready.
	admin string
	// readyPath is the readiness URL's path on admin.
	readyPath string
	logPath   string

	mu      sync.Mutex
	cmd     *exec.Cmd
	logf    *os.File
	done    chan struct{} // closed when the current process has been reaped
	paused  bool
	starts  int
	stopped bool // Stop was called: start refuses
}

// errExited is a process that exited while it was awaited.
var errExited = errors.New("process exited")

// errPermanent marks an error that waitFor does not retry.
var errPermanent = errors.New("permanent")

// start starts the process (appending to its log) and returns at once.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return errors.New(p.name + ": cluster stopped")
	}
	if p.done != nil {
		select {
		case <-p.done:
		default:
			return errors.New(p.name + ": already running")
		}
	}
	logf, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.starts++
	fmt.Fprintf(logf, "--- chaos: start %d of %s at %s\n", p.starts, p.name, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group (signals go to -pid), and killed should the harness die.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.logf, p.done, p.paused = cmd, logf, done, false
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(done)
	}()
	return nil
}

// pid is the running process's id, 0 when it is not running.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || !p.runningLocked() {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *proc) runningLocked() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// running reports whether the process is alive (possibly paused).
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runningLocked()
}

// exited is closed when the current process has been reaped.
func (p *proc) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return p.done
}

// signal sends sig to the process's group.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return fmt.Errorf("%s: not running", p.name)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// kill sends SIGKILL to the group and waits until the process is reaped.
func (p *proc) kill() {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return
	}
	<-p.exited()
}

// terminate stops the process with SIGTERM (continuing it first if paused), and with
// SIGKILL if it has not exited after timeout.
func (p *proc) terminate(timeout time.Duration) {
	if !p.running() {
		return
	}
	_ = p.signal(syscall.SIGCONT)
	_ = p.signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.exited():
	case <-t.C:
		p.kill()
	}
}

// shutdown stops the process for good: later starts are refused.
func (p *proc) shutdown(timeout time.Duration) {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.terminate(timeout)
}

// waitReady waits until the process answers 200 on its readiness URL, it exits, or d
// passes.
func (p *proc) waitReady(ctx context.Context, d time.Duration) error {
	exited := p.exited()
	client := &http.Client{Timeout: 2 * time.Second}
	return waitFor(ctx, d, 100*time.Millisecond, func() error {
		select {
		case <-exited:
			return errExited
		default:
		}
		resp, err := client.Get("http://" + p.admin + p.readyPath)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %d", p.readyPath, resp.StatusCode)
		}
		return nil
	})
}

// startReady starts the process and waits until it is ready, starting it again (up to
// three starts) when it exits during start-up, as a supervisor would: a service whose
// dependency is still down may give up and exit.
func (p *proc) startReady(ctx context.Context, d time.Duration) error {
	var err error
	for try := 0; try < 3; try++ {
		if err = p.start(); err != nil {
			return err
		}
		if err = p.waitReady(ctx, d); err == nil || !errors.Is(err, errExited) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("%s not ready: %w; log tail:\n%s", p.name, err, tailFile(p.logPath, 3000))
	}
	return nil
}

// waitFor calls f every tick until it succeeds, returns errExited or errPermanent, ctx
// ends or d passes.
func waitFor(ctx context.Context, d, tick time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		err := f()
		if err == nil || errors.Is(err, errExited) || errors.Is(err, errPermanent) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// tailFile is the last n bytes of a file.
func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Ports handed out by freeAddr, so that two processes of a run never get the same one.
var (
	portsMu sync.Mutex
	ports   = map[int]bool{}
)

// freeAddr is a free TCP address on 127.0.0.1 below the kernel's ephemeral port range.
// The nemesis restarts a process on the address it had; a port of the ephemeral range
// may meanwhile be the local end of some outgoing connection (a restarted statebuilder
// once found its port taken so), one below it never is.
func freeAddr() (string, error) {
	const lo = 10000
	hi := ephemeralLow()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		p := lo + rand.IntN(hi-lo)
		if ports[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // in use
		}
		ports[p] = true
		return l.Addr().String(), l.Close()
	}
	return "", fmt.Errorf("no free port in 127.0.0.1:%d-%d", lo, hi-1)
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 when it cannot
// be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 11000 {
		return 32768
	}
	return n
}

// freePort is freeAddr's port.
func freePort() (int, error) {
	a, err := freeAddr()
	if err != nil {
		return 0, err
	}
	_, p, _ := net.SplitHostPort(a)
	return strconv.Atoi(p)
}

// repoRoot is the directory holding go.work, searched upwards from the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work above the working directory: run the chaos harness from the repository")
		}
		dir = parent
	}
}

// baseEnv is this process's environment without NOETL_* and PG* variables, which would
// otherwise leak the caller's settings into the services.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "NOETL_") || strings.HasPrefix(kv, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return env
}
