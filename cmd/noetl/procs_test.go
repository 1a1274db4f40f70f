package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/testkit"
)

// services are the service binaries a process mesh runs, in start order.
var services = []string{"statebuilder", "resultstore", "materializer", "orchestrator", "worker", "gateway"}

// procMesh is the six services, each built (without -race) and running as its own OS
// process against a test Postgres database and an embedded NATS server.
type procMesh struct {
	// root is the repository root.
	root string
	// pgURL is the services' Postgres database, as the superuser that migrated it;
	// pgURLs are the URLs the services connect with, each as its own login role.
	pgURL  string
	pgURLs mesh.PostgresURLs
	// adminKey is the bootstrap admin API key of tenant "default".
	adminKey string
	// httpAddr and grpcAddr are the gateway's public addresses; flightAddr the
	// resultstore's Flight address.
	httpAddr, grpcAddr, flightAddr string
	// pids are the process ids by service name.
	pids map[string]int
	// bin holds the built service binaries; env is what every service is started with
	// (addresses, secrets), for tests that start more processes beside the mesh.
	bin string
	env []string
}

// startProcesses builds the service binaries and starts each as its own process; it
// returns once every service reports ready and the gateway serves the catalog. The
// processes are stopped, and their logs shown on failure, when the test ends.
func startProcesses(t *testing.T) *procMesh {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	bin := t.TempDir()
	for _, s := range services {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, s), "./services/"+s+"/cmd/"+s)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "build %s: %s", s, out)
	}
	pg := testkit.StartPostgres(t)
	natsURL := testkit.StartNATS(t)
	port := func() string { return fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t)) }
	sb, rs, or, gwHTTP, gwGRPC, fl := port(), port(), port(), port(), port(), port()
	adminKey, _, _, err := auth.NewAPIKey()
	require.NoError(t, err)
	env := []string{
		"NOETL_INTERNAL_SECRET=process-test-internal-secret-0123456789", "NOETL_BOOTSTRAP_API_KEY=" + adminKey,
		"NOETL_NATS_URL=" + natsURL,
		"NOETL_STATEBUILDER_GRPC=" + sb, "NOETL_STATEBUILDER_ADDR=" + sb,
		"NOETL_RESULTSTORE_GRPC=" + rs, "NOETL_RESULTSTORE_ADDR=" + rs,
		"NOETL_ORCHESTRATOR_GRPC=" + or, "NOETL_ORCHESTRATOR_ADDR=" + or,
		"NOETL_GATEWAY_HTTP=" + gwHTTP, "NOETL_GATEWAY_GRPC=" + gwGRPC,
		"NOETL_RESULTSTORE_FLIGHT=" + fl, "NOETL_RESULTSTORE_FLIGHT_ADDR=" + fl, "NOETL_RESULTSTORE_FLIGHT_LOCATION=grpc://" + fl,
	}
	p := &procMesh{root: root, pgURL: pg, adminKey: adminKey, httpAddr: gwHTTP, grpcAddr: gwGRPC, flightAddr: fl, pids: map[string]int{}, bin: bin, env: env}
	// The migrate step first (as a deployment's migrate job would), then each service, as
	// its own Postgres role, once the ones before it are ready, so that no client starts
	// in a dial backoff towards a peer still starting.
	p.pgURLs, err = mesh.PrepareDatabase(t.Context(), pg, nil)
	require.NoError(t, err)
	for _, s := range services {
		admin := port()
		cmd := exec.Command(filepath.Join(bin, s), "--admin", admin)
		cmd.Env = append(append(os.Environ(), env...), p.serviceEnv(s)...)
		logs := &syncBuffer{}
		cmd.Stderr = logs
		require.NoError(t, cmd.Start())
		p.pids[s] = cmd.Process.Pid
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			if t.Failed() {
				t.Logf("%s logs:\n%s", s, logs.String())
			}
		})
		testkit.WaitFor(t, 60*time.Second, func() error {
			resp, err := http.Get("http://" + admin + "/readyz")
			if err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s not ready: %d", s, resp.StatusCode)
			}
			return nil
		})
	}
	testkit.WaitFor(t, 60*time.Second, func() error {
		// Listing the catalog needs the gateway and the orchestrator (after its migrations).
		resp, err := p.do(http.MethodGet, "/v1/playbooks", nil)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("gateway not ready: %d", resp.StatusCode)
		}
		return nil
	})
	return p
}

// connect opens a connection to the mesh's Postgres as its owner, closed when the test
// ends, and runs setup on it (the tables a playbook under test reads and writes).
func (p *procMesh) connect(t *testing.T, setup string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	pg, err := pgx.Connect(ctx, p.pgURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Close(context.Background()) })
	if setup != "" {
		_, err = pg.Exec(ctx, setup)
		require.NoError(t, err, "setup")
	}
	return pg
}

// serviceEnv is what a service's process is started with beside the mesh's env: its own
// Postgres URL, for the services that connect to Postgres.
func (p *procMesh) serviceEnv(service string) []string {
	url := map[string]string{"orchestrator": p.pgURLs.Orchestrator, "materializer": p.pgURLs.Materializer,
		"statebuilder": p.pgURLs.Statebuilder, "resultstore": p.pgURLs.Resultstore}[service]
	if url == "" {
		return nil
	}
	return []string{"NOETL_PG_URL=" + url}
}

// do sends a REST request to the gateway as the admin.
func (p *procMesh) do(method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequest(method, "http://"+p.httpAddr+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+p.adminKey)
	return http.DefaultClient.Do(req)
}

// rssBytes is the resident set of a process (VmRSS in /proc/<pid>/status).
func rssBytes(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// syncBuffer is a bytes.Buffer safe for a process writing while a test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
