package mesh_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/testkit"
	"github.com/noetl/noetl/services/gateway"
	"github.com/noetl/noetl/services/materializer"
	"github.com/noetl/noetl/services/orchestrator"
	"github.com/noetl/noetl/services/resultstore"
	"github.com/noetl/noetl/services/statebuilder"
	"github.com/noetl/noetl/services/worker"
)

// probeCycle is the probe's playbook, exactly: start -> a, a -> b, b -> a. %s takes an
// optional root block (a path and limits).
const probeCycle = `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: cycle, path: %s}
%s
workflow:
  - step: start
    next: a
  - step: a
    next: b
  - step: b
    next: a
`

// pagination has a back-edge that exits on a when: it completes within its limit.
const pagination = `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: pages, path: tests/pages}
executor: {spec: {policy: {limits: {max_step_entries: 5}}}}
workflow:
  - step: start
    next: page
  - step: page
    tool: {kind: noop, result: {n: "{{ (ctx.n | default(0)) + 1 }}"}}
    set: {ctx.n: "{{ output.n }}"}
    next:
      arcs:
        - {step: page, when: "{{ output.n < 5 }}"}
        - step: end
  - step: end
    tool: {kind: noop, result: {pages: "{{ ctx.n }}"}}
`

const cycleWarning = `cycle with no exit condition: steps "a", "b" route only to each other and no arc between them has a when`

// TestUnboundedCycleEndsFailedAtItsLimit is issue 12's third finding through the public
// API: the cycle registers with a warning over REST and gRPC, and every run of it ends
// FAILED at a limit, naming the step and the limit, with a bounded log and nothing left
// running.
func TestUnboundedCycleEndsFailedAtItsLimit(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	c := newClient(t, m, m.AdminKey)
	ctx := context.Background()

	// Registration warns, over gRPC and REST, naming the steps of the cycle.
	reg, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: fmt.Sprintf(probeCycle, "tests/cycle", "")})
	require.NoError(t, err)
	require.Contains(t, strings.Join(reg.GetPlaybook().GetWarnings(), "\n"), `line 8: step "a": `+cycleWarning)
	out := c.wantREST(http.StatusOK, http.MethodPost, "/v1/playbooks", map[string]any{"content": fmt.Sprintf(probeCycle, "tests/cycle-rest", "")})
	pb, _ := out["playbook"].(map[string]any)
	require.Contains(t, fmt.Sprint(pb["warnings"]), cycleWarning, "%v", out)

	// A playbook's own limit: the probe's cycle, bounded to 5 entries of a step.
	limited := fmt.Sprintf(probeCycle, "tests/cycle-limited", "executor: {spec: {policy: {limits: {max_step_entries: 5}}}}")
	_, err = c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: limited})
	require.NoError(t, err)
	x := cycleRunGRPC(t, c, "tests/cycle-limited")
	cycleFailed(t, c, x, `step "a": would be entered 6 times, over the limit of 5 (executor.spec.policy.limits.max_step_entries)`, 5)
	xr := cycleRunREST(t, c, "tests/cycle-limited")
	require.Equal(t, "EXECUTION_STATUS_FAILED", xr["status"])
	e, _ := xr["error"].(map[string]any)
	require.Equal(t, "limit_exceeded", e["code"])
	require.Equal(t, `step "a": would be entered 6 times, over the limit of 5 (executor.spec.policy.limits.max_step_entries)`, e["message"])

	// A limit on events ends it too.
	_, err = c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: fmt.Sprintf(probeCycle, "tests/cycle-events", "executor: {spec: {policy: {limits: {max_events: 40}}}}")})
	require.NoError(t, err)
	x = cycleRunGRPC(t, c, "tests/cycle-events")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, x.GetStatus())
	require.Regexp(t, `^step "[ab]": the execution has \d+ events, at the limit of 40 \(executor\.spec\.policy\.limits\.max_events\); not entering it$`, x.GetError().GetMessage())
	require.Less(t, x.GetLastSeq(), int64(40+8))

	// A back-edge with a when exits and completes within its limit.
	_, err = c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: pagination})
	require.NoError(t, err)
	x = cycleRunGRPC(t, c, "tests/pages")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "%v", x.GetError())
	require.EqualValues(t, 5, x.GetResult().GetStructValue().GetFields()["pages"].GetNumberValue(), "result %v; log:\n%s", x.GetResult(), eventDump(t, c, x.GetExecutionId()))

	// A limit that is not a positive integer is refused at registration, naming the field,
	// over gRPC and REST, and nothing is registered.
	bad := fmt.Sprintf(probeCycle, "tests/cycle-bad", "executor: {spec: {policy: {limits: {max_step_entries: 0}}}}")
	_, err = c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: bad})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	const badMsg = `line 4, column 55: field "executor.spec.policy.limits.max_step_entries": must be a positive integer, not "0"`
	require.Contains(t, status.Convert(err).Message(), badMsg)
	code, out, _ := c.rest(http.MethodPost, "/v1/playbooks", map[string]any{"content": bad})
	require.Equal(t, http.StatusBadRequest, code, "%v", out)
	require.Contains(t, fmt.Sprint(out["message"]), badMsg)
	_, err = c.cat.GetPlaybook(ctx, &apiv1.GetPlaybookRequest{Path: "tests/cycle-bad"})
	require.Equal(t, codes.NotFound, status.Code(err), "nothing was registered")

	cycleNothingLeft(t, c, m.NATSURL)
}

// TestOperatorLimitsBoundCyclesAndTenantCapsWin runs the probe's playbook, exactly, on a
// mesh whose orchestrator sets NOETL_MAX_STEP_ENTRIES and NOETL_TENANT_LIMITS: it ends at
// the global limit; in a tenant with a lower cap, the cap wins over a higher limit of the
// playbook's own.
func TestOperatorLimitsBoundCyclesAndTenantCapsWin(t *testing.T) {
	m := startLimitMesh(t, func(c *orchestrator.Config) {
		c.MaxStepEntries = 8
		c.TenantLimits = `{"acme": {"max_step_entries": 3}}`
	})
	def := newClient(t, m, m.AdminKey)
	ctx := context.Background()

	_, err := def.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: fmt.Sprintf(probeCycle, "tests/cycle", "")})
	require.NoError(t, err)
	x := cycleRunGRPC(t, def, "tests/cycle")
	cycleFailed(t, def, x, `step "a": would be entered 9 times, over the limit of 8 (NOETL_MAX_STEP_ENTRIES)`, 8)

	// The playbook may lower the operator's limit ...
	_, err = def.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: fmt.Sprintf(probeCycle, "tests/cycle-own", "executor: {spec: {policy: {limits: {max_step_entries: 4}}}}")})
	require.NoError(t, err)
	x = cycleRunGRPC(t, def, "tests/cycle-own")
	cycleFailed(t, def, x, `step "a": would be entered 5 times, over the limit of 4 (executor.spec.policy.limits.max_step_entries)`, 4)

	// ... but not raise it: in tenant acme, whose cap is 3, a playbook asking for 50 gets 3.
	acmeKey, _ := def.createKey(map[string]any{"tenant": "acme", "roles": []string{"admin"}})
	acme := newClient(t, m, acmeKey)
	_, err = acme.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: fmt.Sprintf(probeCycle, "tests/cycle", "executor: {spec: {policy: {limits: {max_step_entries: 50}}}}")})
	require.NoError(t, err)
	x = cycleRunGRPC(t, acme, "tests/cycle")
	cycleFailed(t, acme, x, `step "a": would be entered 4 times, over the limit of 3 (max_step_entries of tenant "acme" (NOETL_TENANT_LIMITS))`, 3)
	xr := cycleRunREST(t, acme, "tests/cycle")
	e, _ := xr["error"].(map[string]any)
	require.Equal(t, `step "a": would be entered 4 times, over the limit of 3 (max_step_entries of tenant "acme" (NOETL_TENANT_LIMITS))`, e["message"])

	// Pagination within the cap completes in either tenant.
	for _, c := range []*client{def, acme} {
		_, err = c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: strings.Replace(pagination, "< 5", "< 3", 1)})
		require.NoError(t, err)
		x = cycleRunGRPC(t, c, "tests/pages")
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "%v", x.GetError())
	}
	cycleNothingLeft(t, def, m.NATSURL)
	cycleNothingLeft(t, acme, m.NATSURL)
}

// cycleRunGRPC starts path over gRPC and waits for its end.
func cycleRunGRPC(t *testing.T, c *client, path string) *apiv1.Execution {
	t.Helper()
	ctx := context.Background()
	started, err := c.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: path})
	require.NoError(t, err)
	done, err := c.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: started.GetExecutionId(), Timeout: durationpb.New(60 * time.Second)})
	require.NoError(t, err)
	x := done.GetExecution()
	require.NotEqual(t, eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, x.GetStatus(), "the wait ended before the execution")
	return x
}

// cycleRunREST starts path over REST and waits for its end; it returns the execution as
// JSON.
func cycleRunREST(t *testing.T, c *client, path string) map[string]any {
	t.Helper()
	started := c.wantREST(http.StatusOK, http.MethodPost, "/v1/executions", map[string]any{"path": path})
	id, _ := started["executionId"].(string)
	require.NotEmpty(t, id, "%v", started)
	done := c.wantREST(http.StatusOK, http.MethodGet, "/v1/executions/"+id+":wait?timeout=60s", nil)
	x, _ := done["execution"].(map[string]any)
	require.NotEqual(t, "EXECUTION_STATUS_RUNNING", x["status"], "the wait ended before the execution")
	return x
}

// cycleFailed checks that a run of the probe's cycle ended FAILED with msg, a and b each
// entered entries times, and its log ending at its terminal event: start's four events,
// four for each entry of a and b, b's last run never routed, then playbook.failed.
func cycleFailed(t *testing.T, c *client, x *apiv1.Execution, msg string, entries int) {
	t.Helper()
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, x.GetStatus())
	require.Equal(t, "limit_exceeded", x.GetError().GetCode())
	require.Equal(t, msg, x.GetError().GetMessage())
	var evs []*apiv1.Event
	token := ""
	for {
		resp, err := c.exe.ListExecutionEvents(context.Background(), &apiv1.ListExecutionEventsRequest{ExecutionId: x.GetExecutionId(), PageSize: 500, PageToken: token})
		require.NoError(t, err)
		evs = append(evs, resp.GetEvents()...)
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	enters := map[string]int{}
	for _, ev := range evs {
		if ev.GetType() == "command.issued" && ev.GetPayload().GetStructValue().GetFields()["enter"] != nil {
			enters[ev.GetStep()]++
		}
	}
	require.Equal(t, map[string]int{"start": 1, "a": entries, "b": entries}, enters)
	// Each step's three: command.issued with its entry, command.completed, step.exit (and a
	// command.started for a command that ran long, not counted); b's last run is never
	// routed (two).
	want := 1 + 3 + 3*(2*entries-1) + 2 + 1
	reports := 0
	for _, ev := range evs {
		if progressReport(ev) {
			reports++
		}
	}
	require.Equal(t, want, len(evs)-reports, "the log is bounded")
	require.EqualValues(t, len(evs), x.GetLastSeq())
	require.Equal(t, "playbook.failed", evs[len(evs)-1].GetType(), "nothing after the terminal event")
}

// cycleNothingLeft checks that no execution of c's tenant is still running and that no
// command is left unconsumed: the limited runs leave nothing behind.
func cycleNothingLeft(t *testing.T, c *client, natsURL string) {
	t.Helper()
	ctx := context.Background()
	resp, err := c.exe.ListExecutions(ctx, &apiv1.ListExecutionsRequest{})
	require.NoError(t, err)
	require.NotEmpty(t, resp.GetExecutions())
	for _, x := range resp.GetExecutions() {
		require.NotEqual(t, eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, x.GetStatus(), x.GetExecutionId())
	}
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	testkit.WaitFor(t, 30*time.Second, func() error {
		s, err := js.Stream(ctx, "NOETL_COMMANDS")
		if err != nil {
			return err
		}
		// The pools' subjects: the stream's keeper (natsx.KeepSubject) is no command.
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(natsx.PoolSubjects("*")))
		if err != nil {
			return err
		}
		left := uint64(0)
		for _, n := range info.State.Subjects {
			left += n
		}
		if left != 0 {
			return fmt.Errorf("%d commands left in NOETL_COMMANDS", left)
		}
		// The materializer forwarded commands, so it published the keeper, and one stays.
		keep, err := s.Info(ctx, jetstream.WithSubjectFilter(natsx.KeepSubject))
		if err != nil {
			return err
		}
		if keep.State.Subjects[natsx.KeepSubject] != 1 {
			return fmt.Errorf("NOETL_COMMANDS keepers: %v", keep.State.Subjects)
		}
		return nil
	})
}

// startLimitMesh starts the six services with authentication on and the orchestrator's
// configuration adjusted by set (mesh.Config has no way to pass the orchestrator's
// limits). The returned Mesh holds only the gateway's addresses, the NATS URL and the
// admin key of tenant "default".
func startLimitMesh(t *testing.T, set func(*orchestrator.Config)) *mesh.Mesh {
	t.Helper()
	pg, natsURL := testkit.StartPostgres(t), testkit.StartNATS(t)
	adminKey, _, _, err := auth.NewAPIKey()
	require.NoError(t, err)
	secret := "limits-test-internal-secret-0123456789abcdef"
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	log := slog.New(slog.DiscardHandler)
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		return l
	}
	run := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && ctx.Err() == nil {
				t.Errorf("%s stopped: %v", name, err)
			}
		}()
	}
	// The migrate step first, as a deployment's migrate job would; then each service as
	// its own role.
	urls, err := mesh.PrepareDatabase(ctx, pg, log)
	require.NoError(t, err)
	sb, rs, flight, or, gwGRPC, gwHTTP := listen(), listen(), listen(), listen(), listen(), listen()
	sbAddr, rsAddr, orAddr, flightAddr := sb.Addr().String(), rs.Addr().String(), or.Addr().String(), flight.Addr().String()
	run("statebuilder", func() error {
		return statebuilder.Run(ctx, statebuilder.Config{PostgresURL: urls.Statebuilder, InternalSecret: secret, GRPCListener: sb, AdminListener: listen()}, log)
	})
	run("resultstore", func() error {
		return resultstore.Run(ctx, resultstore.Config{PostgresURL: urls.Resultstore, InternalSecret: secret, GRPCListener: rs, AdminListener: listen(), FlightListener: flight}, log)
	})
	run("materializer", func() error {
		return materializer.Run(ctx, materializer.Config{PostgresURL: urls.Materializer, NATSURL: natsURL, StreamReplicas: 1, AdminListener: listen()}, log)
	})
	ocfg := orchestrator.Config{PostgresURL: urls.Orchestrator, StreamReplicas: 1, InternalSecret: secret, BootstrapAPIKey: adminKey, NATSURL: natsURL, StatebuilderAddr: sbAddr, ResultstoreAddr: rsAddr, GRPCListener: or, AdminListener: listen()}
	set(&ocfg)
	run("orchestrator", func() error { return orchestrator.Run(ctx, ocfg, log) })
	run("worker", func() error {
		return worker.Run(ctx, worker.Config{NATSURL: natsURL, StreamReplicas: 1, InternalSecret: secret, Pool: "shared", OrchestratorAddr: orAddr, ResultstoreAddr: rsAddr, FlightAddr: flightAddr, AdminListener: listen()}, log)
	})
	run("gateway", func() error {
		return gateway.Run(ctx, gateway.Config{InternalSecret: secret, OrchestratorAddr: orAddr, StatebuilderAddr: sbAddr, ResultstoreAddr: rsAddr, FlightLocation: "grpc://" + flightAddr, GRPCListener: gwGRPC, HTTPListener: gwHTTP, AdminListener: listen()}, log)
	})
	m := &mesh.Mesh{HTTPAddr: gwHTTP.Addr().String(), GRPCAddr: gwGRPC.Addr().String(), NATSURL: natsURL, PostgresURL: pg, PostgresURLs: urls, AdminKey: adminKey}
	c := newClient(t, m, adminKey)
	testkit.WaitFor(t, 60*time.Second, func() error {
		_, err := c.cat.ListPlaybooks(ctx, &apiv1.ListPlaybooksRequest{})
		return err
	})
	return m
}

// eventDump renders an execution's log, one event per line, for a failure message.
func eventDump(t *testing.T, c *client, id string) string {
	t.Helper()
	resp, err := c.exe.ListExecutionEvents(context.Background(), &apiv1.ListExecutionEventsRequest{ExecutionId: id, PageSize: 1000})
	if err != nil {
		return "(events: " + err.Error() + ")"
	}
	var b strings.Builder
	for _, e := range resp.GetEvents() {
		fmt.Fprintf(&b, "%d %s %s cmd=%s result=%s payload=%s\n", e.GetSeq(), e.GetType(), e.GetStep(), e.GetCommandId(), e.GetResult(), e.GetPayload())
	}
	return b.String()
}
