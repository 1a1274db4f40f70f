//go:build firstrun

// Package firstrun holds the first-contact test that .ci/run runs (go test -tags firstrun):
// the README's first command, run as a new user runs it.
package firstrun

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// command is the last command of the README's first command (make run): the dev mesh.
const command = "bin/noetl dev --run examples/hello.yaml"

// makeRun returns the commands `make run` runs, continuation lines joined: the set-up
// commands (install Postgres and python3 when missing, build bin/noetl), then command.
func makeRun(t *testing.T) (setup []string, last string) {
	t.Helper()
	out, err := exec.Command("make", "-C", repoRoot(t), "-n", "--no-print-directory", "run").Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(strings.ReplaceAll(string(out), "\\\n", " ")), "\n")
	require.GreaterOrEqual(t, len(lines), 2)
	return lines[:len(lines)-1], lines[len(lines)-1]
}

// TestReadmeCommandsAreTheOnesTested keeps this test and the README in step: the README
// opens with `make run` and `make test`, and `make run` builds bin/noetl and runs command.
func TestReadmeCommandsAreTheOnesTested(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	require.NoError(t, err)
	block := regexp.MustCompile("(?s)```sh\n(.*?)```").FindSubmatch(readme)
	require.NotNil(t, block, "README.md has a sh code block")
	var cmds []string
	for _, line := range strings.Split(strings.TrimSpace(string(block[1])), "\n") {
		cmd, _, _ := strings.Cut(line, "#")
		cmds = append(cmds, strings.TrimSpace(cmd))
	}
	require.Equal(t, []string{"make run", "make test"}, cmds, "README's first block holds the two set-up commands")
	setup, last := makeRun(t)
	require.Equal(t, command, last)
	require.Regexp(t, `^go build .*-o bin/noetl \./cmd/noetl$`, setup[len(setup)-1])
}

// TestFirstRun runs command with a fresh HOME and the default state directory, as the CI
// user (root in CI: Postgres must then run as the postgres user from a place it can
// reach), waits for the hello result, interrupts it as Ctrl-C does, and checks a clean
// exit with nothing left running. A second run finds the same state: the same admin key
// and the first run's execution.
func TestFirstRun(t *testing.T) {
	root := repoRoot(t)
	// A home like a new user's: private (0700, as /root is on Debian) and empty. The Go
	// caches stay where they are, so the run compiles no more than a user's second run.
	base, err := os.MkdirTemp("", "noetl-first-run-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	home := filepath.Join(base, "home")
	require.NoError(t, os.Mkdir(home, 0o700))
	env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "USER=" + os.Getenv("USER"), "LANG=C.UTF-8"}
	for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOFLAGS", "GOTOOLCHAIN"} {
		out, err := exec.Command("go", "env", k).Output()
		require.NoError(t, err)
		env = append(env, k+"="+strings.TrimSpace(string(out)))
	}
	state := filepath.Join(home, ".cache", "noetl", "dev")

	// Everything make run does before the mesh: install what is missing, build the CLI.
	setup, _ := makeRun(t)
	for _, c := range setup {
		sh := exec.Command("bash", "-c", c)
		sh.Dir, sh.Env = root, env
		out, err := sh.CombinedOutput()
		require.NoError(t, err, "%s:\n%s", c, out)
	}

	first := runOnce(t, root, env)
	require.Equal(t, "COMPLETED", first.outcome.Status, first.stdout)
	require.JSONEq(t, `{"greeting":"Hello, World! Hello, World! Hello, World!","words":6}`, string(first.outcome.Result))
	require.Contains(t, first.stdout, "created an admin API key")
	key, err := os.ReadFile(filepath.Join(state, "admin.key"))
	require.NoError(t, err, "the admin key is in the default state directory")
	if os.Geteuid() == 0 {
		require.Regexp(t, `cluster in /var/lib/noetl/postgres/dev-[0-9a-f]{12} `, first.stdout, "root's cluster lives where the postgres user can reach it")
	}

	second := runOnce(t, root, env, func(restAddr string) {
		// While the second mesh runs, the first run's execution is still there.
		req, err := http.NewRequest(http.MethodGet, "http://"+restAddr+"/v1/executions/"+first.outcome.ExecutionID, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Contains(t, string(body), "COMPLETED")
	})
	require.Equal(t, "COMPLETED", second.outcome.Status, second.stdout)
	require.NotEqual(t, first.outcome.ExecutionID, second.outcome.ExecutionID)
	require.Contains(t, second.stdout, "admin API key of tenant default in "+filepath.Join(state, "admin.key"))
	require.NotContains(t, second.stdout, "created an admin API key", "the second run reuses the first run's key")
	again, err := os.ReadFile(filepath.Join(state, "admin.key"))
	require.NoError(t, err)
	require.Equal(t, string(key), string(again))
}

type run struct {
	stdout  string
	outcome struct {
		ExecutionID string          `json:"execution_id"`
		Status      string          `json:"status"`
		Result      json.RawMessage `json:"result"`
	}
}

// runOnce starts command, waits for its outcome on stdout, calls each during (with the
// REST address) while the mesh serves, then interrupts the process group as a terminal's
// Ctrl-C does and checks that everything it started has exited.
func runOnce(t *testing.T, root string, env []string, during ...func(restAddr string)) *run {
	t.Helper()
	cmd := exec.Command("bash", "-c", "exec "+command)
	cmd.Dir = root
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group, like a shell job
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	pgid := cmd.Process.Pid
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
	})

	// Read stdout until the outcome's closing brace, within a deadline.
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	r := &run{}
	var all, js strings.Builder
	inJSON, restAddr := false, ""
	deadline := time.After(5 * time.Minute)
read:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("%q exited before printing its result:\nstdout:\n%s\nstderr:\n%s", command, all.String(), stderr.String())
			}
			all.WriteString(line + "\n")
			if m := regexp.MustCompile(`REST:\s+http://(\S+)`).FindStringSubmatch(line); m != nil {
				restAddr = m[1]
			}
			if line == "{" {
				inJSON = true
			}
			if inJSON {
				js.WriteString(line + "\n")
			}
			if inJSON && line == "}" {
				break read
			}
		case <-deadline:
			t.Fatalf("no result from %q within 5 minutes:\nstdout:\n%s\nstderr:\n%s", command, all.String(), stderr.String())
		}
	}
	r.stdout = all.String()
	if m := regexp.MustCompile(`(?m)^\s+cluster in (\S+)`).FindStringSubmatch(r.stdout); m != nil {
		// Root's cluster outside the state dir (under /var/lib/noetl/postgres): this
		// test's fresh home is gone after it, and so is the cluster.
		t.Cleanup(func() { _ = os.RemoveAll(m[1]) })
	}
	require.NoError(t, json.Unmarshal([]byte(js.String()), &r.outcome), r.stdout)
	require.NotEmpty(t, restAddr, "the REST address is printed:\n%s", r.stdout)

	// The mesh answers its readiness on the REST address while it serves.
	resp, err := http.Get("http://" + restAddr + "/readyz")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	for _, f := range during {
		f(restAddr)
	}

	// The processes of the run: the group's, and Postgres, which runs in a group of its own.
	procs := descendants(pgid)
	require.NotEmpty(t, procs)
	require.NoError(t, syscall.Kill(-pgid, syscall.SIGINT))
	go func() {
		for range lines { // drain, so the process never blocks on a full pipe
		}
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		killed = true
		require.NoError(t, err, "a clean exit on SIGINT; stderr:\n%s", stderr.String())
	case <-time.After(time.Minute):
		t.Fatalf("still running a minute after SIGINT; stderr:\n%s", stderr.String())
	}
	for _, p := range procs {
		if alive(p.pid) && p.cmdline == cmdline(p.pid) {
			t.Errorf("left behind after exit: pid %d %s", p.pid, p.cmdline)
		}
	}
	return r
}

type proc struct {
	pid     int
	cmdline string
}

// descendants lists pid and every process below it, with their command lines, from /proc.
func descendants(pid int) []proc {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		// The fields after the command name (which is in parentheses and may hold spaces).
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 {
			if ppid, err := strconv.Atoi(f[1]); err == nil {
				children[ppid] = append(children[ppid], p)
			}
		}
	}
	var out []proc
	var walk func(int)
	walk = func(p int) {
		out = append(out, proc{p, cmdline(p)})
		for _, c := range children[p] {
			walk(c)
		}
	}
	walk(pid)
	return out
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z" // a zombie has exited
}

func repoRoot(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs("../../..")
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(d, "go.work"))
	require.NoError(t, err, "run from cmd/noetl/firstrun in the repository")
	return d
}
