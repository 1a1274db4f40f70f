package mesh_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/testkit"
)

// TestStuckMaterializerShowsLagAndTurnsUnready holds the materializer's loop as a stuck
// commit would, publishes events, and checks what an operator sees: the consumer's lag
// on /metrics climbs to what was published (it is read on a goroutine of its own, so it
// keeps reporting), /readyz turns 503 naming the lag and the missing progress, and /livez
// stays 200. Released, the materializer drains the backlog and is ready again, and the
// mesh runs playbooks.
func TestStuckMaterializerShowsLagAndTurnsUnready(t *testing.T) {
	const published, maxLag = 200, 50
	pg := testkit.StartPostgres(t)
	natsURL := testkit.StartNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m, err := mesh.Start(ctx, mesh.Config{StateDir: t.TempDir(), PostgresURL: pg, NATSURL: natsURL,
		MaterializerMaxLag: maxLag, MaterializerStallAfter: time.Second, LagPoll: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	admin := "http://" + m.MaterializerAdminAddr
	hc := &http.Client{Timeout: 5 * time.Second}

	testkit.WaitFor(t, 30*time.Second, func() error { return expectStatus(hc, admin+"/readyz", http.StatusOK) })
	require.Zero(t, consumerLag(t, hc, admin, "materializer"))

	resume := m.PauseMaterializer()
	t.Cleanup(resume)
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	for i := range published {
		// Events of executions that do not exist: once released, the materializer rejects
		// them, which drains the backlog without touching any execution.
		ev := &eventv1.Event{EventId: fmt.Sprintf("saturation-%d", i), ExecutionId: fmt.Sprintf("saturation-%d", i%7), Tenant: "default", Type: domain.EventCtxUpdated, PayloadJson: []byte(`{"values":{}}`)}
		b, err := proto.Marshal(ev)
		require.NoError(t, err)
		_, err = js.Publish(ctx, natsx.EventSubject(ev.GetExecutionId(), 0), b, jetstream.WithMsgID(ev.GetEventId()))
		require.NoError(t, err)
	}

	testkit.WaitFor(t, 30*time.Second, func() error {
		if n := consumerLag(t, hc, admin, "materializer"); n < published {
			return fmt.Errorf("lag %g, want %d", n, published)
		}
		return nil
	})
	testkit.WaitFor(t, 30*time.Second, func() error {
		body, err := expectBody(hc, admin+"/readyz", http.StatusServiceUnavailable)
		if err != nil {
			return err
		}
		for _, want := range []string{"consumer-lag: consumer lag", fmt.Sprintf("exceeds %d", maxLag), "progress: nothing committed for"} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("readyz says %q, want %q in it", body, want)
			}
		}
		return nil
	})
	require.NoError(t, expectStatus(hc, admin+"/livez", http.StatusOK), "a saturated materializer is alive: restarting it would not help")

	resume()
	testkit.WaitFor(t, 30*time.Second, func() error { return expectStatus(hc, admin+"/readyz", http.StatusOK) })
	testkit.WaitFor(t, 30*time.Second, func() error {
		if n := consumerLag(t, hc, admin, "materializer"); n != 0 {
			return fmt.Errorf("lag %g after release", n)
		}
		return nil
	})
	require.GreaterOrEqual(t, metricValue(t, hc, admin, "noetl_materializer_rejected_total", ""), float64(published))

	conn, err := m.Dial()
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	h := &harness{m: m, cat: apiv1.NewCatalogServiceClient(conn), exe: apiv1.NewExecutionServiceClient(conn)}
	x := h.run(t, quick, nil, "")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
}

// TestEveryServiceReportsItsLoad runs a playbook whose result travels by reference and
// checks each service's /metrics for what shows its load: RPCs by method and code and in
// flight, each consumer's backlog per consumer and pool, the worker's commands in flight
// against its concurrency, the resultstore's bytes.
func TestEveryServiceReportsItsLoad(t *testing.T) {
	h := start(t, false)
	x := h.run(t, `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: big, path: tests/big}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        result = {"blob": "x" * 100000}
`, nil, "")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
	hc := &http.Client{Timeout: 5 * time.Second}
	addr := func(svc string) string { return "http://" + h.m.AdminAddrs[svc] }

	require.Positive(t, metricValue(t, hc, addr("gateway"), "grpc_server_handled_total", `method="/noetl.api.v1.ExecutionService/StartExecution",code="OK"`))
	require.Positive(t, metricValue(t, hc, addr("gateway"), "grpc_server_handling_seconds_count", `code="OK"`))
	metricValue(t, hc, addr("gateway"), "grpc_server_in_flight", `method="/noetl.api.v1.ExecutionService/StartExecution"`)
	// Decided inside the materializer's commits (engine/inline.go).
	require.Positive(t, metricValue(t, hc, addr("orchestrator"), "noetl_orchestrator_decisions_total", `outcome="inline"`))
	require.Positive(t, metricValue(t, hc, addr("orchestrator"), "noetl_orchestrator_inline_decisions_total", `answer="decided"`))
	require.Positive(t, metricValue(t, hc, addr("materializer"), "noetl_materializer_events_committed_total", ""))
	require.Positive(t, metricValue(t, hc, addr("statebuilder"), "grpc_server_handled_total", `code="OK"`))
	metricValue(t, hc, addr("statebuilder"), "noetl_executions_running", "")
	metricValue(t, hc, addr("statebuilder"), "noetl_statebuilder_cache_entries", "")
	require.Equal(t, 64.0, metricValue(t, hc, addr("worker"), "noetl_worker_concurrency", `pool="shared"`))
	metricValue(t, hc, addr("worker"), "noetl_worker_in_flight", `pool="shared"`)
	require.Positive(t, metricValue(t, hc, addr("worker"), "noetl_worker_commands_total", `pool="shared",tool="python",outcome="ok"`))
	require.GreaterOrEqual(t, metricValue(t, hc, addr("resultstore"), "noetl_resultstore_bytes_in_total", ""), 100000.0)
	metricValue(t, hc, addr("resultstore"), "noetl_resultstore_streams_in_flight", `direction="put"`)

	// Each consumer's backlog, from its own service, labelled by consumer and pool.
	for svc, sel := range map[string]string{
		"materializer": `stream="NOETL_EVENTS",consumer="materializer",pool=""`,
		"orchestrator": `stream="NOETL_COMMITTED",consumer="orchestrator",pool=""`,
		"worker":       `stream="NOETL_COMMANDS",consumer="worker-shared",pool="shared"`,
	} {
		for _, name := range []string{"noetl_nats_consumer_pending", "noetl_nats_consumer_ack_pending"} {
			metricValue(t, hc, addr(svc), name, sel)
		}
		testkit.WaitFor(t, 30*time.Second, func() error {
			if v := metricValue(t, hc, addr(svc), "noetl_nats_consumer_max_ack_pending", sel); v <= 0 {
				return fmt.Errorf("%s: max_ack_pending %g: the consumer's state was not read yet", svc, v)
			}
			return nil
		})
	}
}

// consumerLag reads a consumer's pending plus unacknowledged messages from /metrics.
func consumerLag(t *testing.T, hc *http.Client, admin, consumer string) float64 {
	t.Helper()
	sel := `consumer="` + consumer + `"`
	return metricValue(t, hc, admin, "noetl_nats_consumer_pending", sel) + metricValue(t, hc, admin, "noetl_nats_consumer_ack_pending", sel)
}

// metricValue returns the value of the series of name that has every label of sel (a
// comma-separated list of name="value"), from the Prometheus text exposition at
// admin/metrics.
func metricValue(t *testing.T, hc *http.Client, admin, name, sel string) float64 {
	t.Helper()
	resp, err := hc.Get(admin + "/metrics")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		series, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		metric, labels, _ := strings.Cut(series, "{")
		if metric != name || !hasLabels(labels, sel) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		require.NoError(t, err, line)
		return v
	}
	require.NoError(t, sc.Err())
	t.Fatalf("no series %s{%s} on %s/metrics", name, sel, admin)
	return 0
}

// metricTotal sums every series of the metric name on admin's /metrics (zero when it has
// none, as a counter vector nothing incremented).
func metricTotal(t *testing.T, admin, name string) float64 {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(admin + "/metrics")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		series, value, ok := strings.Cut(sc.Text(), " ")
		if metric, _, _ := strings.Cut(series, "{"); !ok || metric != name {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		require.NoError(t, err, sc.Text())
		sum += v
	}
	require.NoError(t, sc.Err())
	return sum
}

// hasLabels reports whether the labels of a series (`a="1",b="2"}`) include each of sel.
func hasLabels(labels, sel string) bool {
	have := strings.Split(strings.TrimSuffix(labels, "}"), ",")
	for _, want := range strings.Split(sel, ",") {
		if want != "" && !slices.Contains(have, want) {
			return false
		}
	}
	return true
}

func expectStatus(hc *http.Client, url string, code int) error {
	_, err := expectBody(hc, url, code)
	return err
}

func expectBody(hc *http.Client, url string, code int) (string, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != code {
		return string(b), fmt.Errorf("%s: status %d, want %d: %s", url, resp.StatusCode, code, b)
	}
	return string(b), nil
}
