package consoletest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// chromium finds the browser: $NOETL_CHROMIUM, else chromium (Debian's package) on PATH.
// Without one the test is skipped, except in CI (CI=true), where it fails.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("NOETL_CHROMIUM"), "chromium", "chromium-browser"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed, and CI must run the browser tests: apt-get install -y chromium")
	}
	t.Skip("skipping the console's browser tests: chromium is not installed (apt-get install -y chromium, or set NOETL_CHROMIUM)")
	return ""
}

// shots saves screenshots under $NOETL_SCREENSHOT_DIR (default noetl-console-screenshots
// in the temporary directory) and lists them, with what each shows, in index.txt.
type shots struct {
	dir   string
	mu    sync.Mutex
	index []string
}

func newShots(t *testing.T) *shots {
	dir := os.Getenv("NOETL_SCREENSHOT_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "noetl-console-screenshots")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	old, _ := filepath.Glob(filepath.Join(dir, "*.png"))
	for _, f := range old {
		_ = os.Remove(f)
	}
	s := &shots{dir: dir}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		_ = os.WriteFile(filepath.Join(dir, "index.txt"), []byte(strings.Join(s.index, "\n")+"\n"), 0o644)
		t.Logf("screenshots (%d) in %s, listed in index.txt", len(s.index), dir)
	})
	return s
}

// take saves the page as name.png.
func (s *shots) take(t *testing.T, ctx context.Context, name, what string) {
	t.Helper()
	// From the top: the sticky bar would otherwise be drawn where the page was scrolled. A
	// modal dialog's backdrop covers the viewport only: then the viewport is the picture.
	shot := chromedp.FullScreenshot(100)
	if eval[bool](t, ctx, `window.scrollTo(0, 0), !!document.querySelector('dialog[open]')`) {
		shot = chromedp.CaptureScreenshot()
	}
	png, err := chromedp.Run(ctx, shot)
	require.NoError(t, err)
	p := filepath.Join(s.dir, name+".png")
	require.NoError(t, os.WriteFile(p, png, 0o644))
	s.mu.Lock()
	s.index = append(s.index, fmt.Sprintf("%s\t%s", p, what))
	s.mu.Unlock()
	t.Logf("screenshot %s: %s", p, what)
}

// startBrowser starts a headless chromium with a fresh profile and returns its tab's context
// and the page's console errors so far.
func startBrowser(t *testing.T, exe string) (context.Context, func() []string) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("lang", "en-US"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	var mu sync.Mutex
	var problems []string
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			// Refused calls the test makes on purpose are logged by the network (HTTP 401,
			// 400); anything else of level error, a CSP violation included, is a problem.
			if m.IsException() || (m.Type == chromedp.ConsoleError && m.Source != "network") {
				mu.Lock()
				problems = append(problems, m.String()+" at "+m.URL)
				mu.Unlock()
			}
		}
	}()
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), problems...)
	}
}

// do runs actions within a minute.
func do(t *testing.T, ctx context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, actions...))
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(t, err, expr)
	return v
}

// setValue sets the value of the element sel and tells the page, as typing would.
func setValue(t *testing.T, ctx context.Context, sel, v string) {
	t.Helper()
	js, err := json.Marshal(v)
	require.NoError(t, err)
	eval[bool](t, ctx, `(() => { const e = document.querySelector(`+"`"+sel+"`"+`); e.value = `+string(js)+`; e.dispatchEvent(new Event('input', {bubbles: true})); return true; })()`)
}

// until waits, in the page, for expr to be true, and fails with what explains the wait.
func until(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	// An element not there yet is a false condition, not an error.
	guarded := "(() => { try { return !!(" + expr + "); } catch { return false; } })()"
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](guarded, chromedp.WithPollingTimeout(90*time.Second)))
	if err != nil {
		body, _ := chromedp.Run(context.WithoutCancel(ctx), chromedp.Evaluate[string](`document.body.innerText.slice(0, 2000)`))
		t.Fatalf("waiting for %s (%s): %v\npage text:\n%s", what, expr, err, body)
	}
}

type fixture struct {
	m    *mesh.Mesh
	nats string
	conn *grpc.ClientConn
	cat  apiv1.CatalogServiceClient
	exe  apiv1.ExecutionServiceClient
	cred apiv1.CredentialServiceClient
}

func startMesh(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	natsURL := testkit.StartNATS(t)
	m, err := mesh.Start(ctx, mesh.Config{StateDir: t.TempDir(), PostgresURL: testkit.StartPostgres(t), NATSURL: natsURL})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	conn, err := m.Dial()
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &fixture{m: m, nats: natsURL, conn: conn, cat: apiv1.NewCatalogServiceClient(conn), exe: apiv1.NewExecutionServiceClient(conn), cred: apiv1.NewCredentialServiceClient(conn)}
}

func (f *fixture) register(t *testing.T, content string) {
	t.Helper()
	_, err := f.cat.RegisterPlaybook(context.Background(), &apiv1.RegisterPlaybookRequest{Content: content})
	require.NoError(t, err)
}

func (f *fixture) start(t *testing.T, path string) string {
	t.Helper()
	w, _ := structpb.NewStruct(nil)
	r, err := f.exe.StartExecution(context.Background(), &apiv1.StartExecutionRequest{Path: path, Workload: w})
	require.NoError(t, err)
	return r.GetExecutionId()
}

func (f *fixture) wait(t *testing.T, id string) *apiv1.Execution {
	t.Helper()
	var x *apiv1.Execution
	testkit.WaitFor(t, 2*time.Minute, func() error {
		r, err := f.exe.WaitExecution(context.Background(), &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(30 * time.Second)})
		if err != nil {
			return err
		}
		if x = r.GetExecution(); x.GetStatus() == eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING {
			return errors.New("still running")
		}
		return nil
	})
	return x
}

func testdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return string(b)
}

// rect is an element's box in the page.
type rect struct {
	What                     string
	Left, Top, Right, Bottom float64
}

// overlaps lists the pairs of boxes matched by sel that overlap by more than a pixel.
func overlaps(t *testing.T, ctx context.Context, sel string) ([]string, int) {
	t.Helper()
	rs := eval[[]rect](t, ctx, `[...document.querySelectorAll(`+"`"+sel+"`"+`)].map((e) => {
		const r = e.getBoundingClientRect();
		const g = e.closest('[data-step]') || e.closest('[data-from]');
		return {What: (g ? (g.dataset.step || g.dataset.from + '->' + g.dataset.to) : '') + ' ' + e.getAttribute('class'), Left: r.left, Top: r.top, Right: r.right, Bottom: r.bottom};
	})`)
	var out []string
	for i := range rs {
		for j := i + 1; j < len(rs); j++ {
			a, b := rs[i], rs[j]
			if a.Left+1 < b.Right && b.Left+1 < a.Right && a.Top+1 < b.Bottom && b.Top+1 < a.Bottom {
				out = append(out, a.What+" overlaps "+b.What)
			}
		}
	}
	return out, len(rs)
}

// TestConsole drives the web console in chromium against a real mesh: sign in with a key,
// the executions list (filters, live rows, an API error as the API worded it), the catalog
// (source, diff, a run with labels started from the form), an execution of a fan-out/fan-in
// playbook (its graph's nodes, arcs and statuses, the timeline, the event log, a table result
// paged), a rerun from a step (its reused steps) and the list filtered by label,
// a 30-step graph without overlaps, cancelling a running execution, the credentials and the
// API pages, and a narrow screen. It saves a screenshot of each view.
func TestConsole(t *testing.T) {
	exe := chromium(t)
	f := startMesh(t)
	shots := newShots(t)
	ctx := context.Background()

	fanout := testdata(t, "fanout.yaml")
	f.register(t, fanout)
	f.register(t, strings.Replace(strings.Replace(fanout, "max_in_flight: 3", "max_in_flight: 2", 1), "three at a time", "two at a time", 1))
	f.register(t, testdata(t, "slow.yaml"))
	f.register(t, testdata(t, "thirty.yaml"))
	thirty := f.start(t, "tests/console/thirty")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, f.wait(t, thirty).GetStatus(), "the 30-step playbook runs to its end")
	data, _ := structpb.NewStruct(map[string]any{"user": "etl", "password": "s3cret"})
	for _, c := range []struct{ name, typ string }{{"warehouse_pg", "postgres"}, {"crm_token", "http_bearer"}} {
		_, err := f.cred.PutCredential(ctx, &apiv1.PutCredentialRequest{Name: c.name, Type: c.typ, Data: data})
		require.NoError(t, err)
	}
	// Schedules that do not fire while the test runs (the 29th of February, New Year).
	sched := apiv1.NewScheduleServiceClient(f.conn)
	for _, sc := range []*apiv1.Schedule{
		{Name: "leap-report", Cron: "0 3 29 2 *", TimeZone: "Europe/Berlin", Path: "tests/console/thirty"},
		{Name: "new-year", Cron: "@yearly", Path: "tests/console/fanout", Version: 1},
	} {
		_, err := sched.CreateSchedule(ctx, &apiv1.CreateScheduleRequest{Schedule: sc})
		require.NoError(t, err)
	}
	slow := f.start(t, "tests/console/slow")
	f.register(t, testdata(t, "flaky.yaml"))
	fw, _ := structpb.NewStruct(map[string]any{"marker": filepath.Join(t.TempDir(), "attempted")})
	fl, err := f.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "tests/console/flaky", Workload: fw})
	require.NoError(t, err)
	flaky := fl.GetExecutionId()
	// The same playbook failing every attempt: its marker cannot be created.
	bw, _ := structpb.NewStruct(map[string]any{"marker": filepath.Join(t.TempDir(), "no-such-dir", "attempted")})
	bf, err := f.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "tests/console/flaky", Workload: bw})
	require.NoError(t, err)
	broken := bf.GetExecutionId()

	// Triggers: a webhook (its secret returned once) fired once, and a NATS subject.
	trig := apiv1.NewTriggerServiceClient(f.conn)
	hook, err := trig.CreateTrigger(ctx, &apiv1.CreateTriggerRequest{Trigger: &apiv1.Trigger{Name: "github-push", Path: "tests/console/thirty",
		Source: &apiv1.Trigger_Webhook{Webhook: &apiv1.WebhookSource{}}}})
	require.NoError(t, err)
	require.NotEmpty(t, hook.GetSecret())
	fired, err := trig.FireTrigger(ctx, &apiv1.FireTriggerRequest{Name: "github-push", DeliveryId: "d-1"})
	require.NoError(t, err)
	nc, err := nats.Connect(f.nats)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	require.NoError(t, err)
	_, err = trig.CreateTrigger(ctx, &apiv1.CreateTriggerRequest{Trigger: &apiv1.Trigger{Name: "order-created", Path: "tests/console/fanout", Version: 1,
		Source: &apiv1.Trigger_Nats{Nats: &apiv1.NatsSource{Subject: "orders.created"}}}})
	require.NoError(t, err)

	// A second tenant, acme, with an execution of its own: the admin key is also a system
	// key, which creates acme's keys (an admin and a viewer).
	admin := apiv1.NewAdminServiceClient(f.conn)
	acmeKey := func(role string) string {
		r, err := admin.CreateApiKey(ctx, &apiv1.CreateApiKeyRequest{Tenant: "acme", Roles: []string{role}, Name: "console test " + role})
		require.NoError(t, err)
		return r.GetSecret()
	}
	acmeAdmin, acmeViewer := acmeKey("admin"), acmeKey("viewer")
	acmeConn, err := grpcx.DialSigned(f.m.GRPCAddr, auth.Bearer(acmeAdmin))
	require.NoError(t, err)
	t.Cleanup(func() { _ = acmeConn.Close() })
	acme := &fixture{m: f.m, conn: acmeConn, cat: apiv1.NewCatalogServiceClient(acmeConn), exe: apiv1.NewExecutionServiceClient(acmeConn)}
	acme.register(t, testdata(t, "thirty.yaml"))
	acmeRun := acme.start(t, "tests/console/thirty")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, acme.wait(t, acmeRun).GetStatus())

	t.Run("routes", func(t *testing.T) {
		// / sends a browser to the console; the assets need no key, the graph route does.
		noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		get := func(path, key string) *http.Response {
			req, err := http.NewRequest(http.MethodGet, "http://"+f.m.HTTPAddr+path, nil)
			require.NoError(t, err)
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			resp, err := noRedirect.Do(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			return resp
		}
		r := get("/", "")
		require.Equal(t, http.StatusFound, r.StatusCode)
		require.Equal(t, "/ui/", r.Header.Get("Location"))
		r = get("/ui/", "")
		require.Equal(t, http.StatusOK, r.StatusCode)
		require.Contains(t, r.Header.Get("Content-Security-Policy"), "script-src 'self'")
		r = get("/ui/api/graph?path=tests/console/fanout", "")
		require.Equal(t, http.StatusUnauthorized, r.StatusCode)
		require.Equal(t, `Bearer realm="noetl"`, r.Header.Get("WWW-Authenticate"))
		require.Equal(t, http.StatusOK, get("/ui/api/graph?path=tests/console/fanout", f.m.AdminKey).StatusCode)
		require.Equal(t, http.StatusNotFound, get("/ui/api/graph?path=tests/console/none", f.m.AdminKey).StatusCode)
	})

	b, problems := startBrowser(t, exe)
	base := "http://" + f.m.HTTPAddr
	// Each step builds on the one before: the first to fail ends the test.
	step := func(name string, fn func(t *testing.T)) {
		if !t.Run(name, fn) {
			t.FailNow()
		}
	}

	step("sign in", func(t *testing.T) {
		do(t, b, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
		loc, err := chromedp.Run(b, chromedp.Location())
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(loc, base+"/ui/"), "/ redirects to the console: %s", loc)
		shots.take(t, b, "01-sign-in", "the sign-in page: an API key or JWT, kept for the tab only")
		do(t, b, chromedp.SendKeys(chromedp.CSS("#token"), "noetl_aaaaaaaaaaaaa_"+strings.Repeat("a", 52)), chromedp.Click(chromedp.CSS("#sign-in")))
		until(t, b, "the refusal", `!!document.querySelector('.alert.error .alert-msg')`)
		msg := eval[string](t, b, `document.querySelector('.alert.error .alert-msg').textContent`)
		require.Contains(t, msg, "invalid, revoked or expired API key", "the API's message is shown")
		shots.take(t, b, "02-sign-in-refused", "a refused key: the API's message (UNAUTHENTICATED, HTTP 401)")
		setValue(t, b, "#token", f.m.AdminKey)
		do(t, b, chromedp.Click(chromedp.CSS("#sign-in")))
		until(t, b, "the executions list", `document.querySelectorAll('#executions tbody tr').length >= 2`)
		// The key is in sessionStorage, never in the URL.
		require.Equal(t, f.m.AdminKey, eval[string](t, b, `sessionStorage.getItem('noetl.console.token')`))
		loc, err = chromedp.Run(b, chromedp.Location())
		require.NoError(t, err)
		require.NotContains(t, loc, f.m.AdminKey)
	})

	step("executions list", func(t *testing.T) {
		until(t, b, "the running row", fmt.Sprintf(`document.querySelector('tr[data-id="%s"]')?.dataset.status === 'running'`, slow))
		require.Equal(t, "completed", eval[string](t, b, fmt.Sprintf(`document.querySelector('tr[data-id="%s"]').dataset.status`, thirty)))
		shots.take(t, b, "03-executions", "the executions list: filters, a running and a completed execution, paging")
		// Filters are the API's: by status, and by a start-time range.
		do(t, b, chromedp.Navigate(base+"/ui/#/executions?status=completed"))
		// Completed only: the 30-step run among them, the running one not.
		until(t, b, "the completed filter", fmt.Sprintf(`(() => { const rows = [...document.querySelectorAll('#executions tbody tr')];
			return rows.length >= 2 && rows.every((r) => r.dataset.status === 'completed') && rows.some((r) => r.dataset.id === %q) && !rows.some((r) => r.dataset.id === %q); })()`, thirty, slow))
		// Paging: the API's keyset tokens, two rows a page here.
		ids := func() string {
			return eval[string](t, b, `[...document.querySelectorAll('#executions tbody tr')].map((r) => r.dataset.id).join(' ')`)
		}
		do(t, b, chromedp.Navigate(base+"/ui/#/executions?size=2"))
		until(t, b, "a page of two", `document.querySelectorAll('#executions tbody tr').length === 2 && document.querySelector('#f-size').value === '2'`)
		first := ids()
		do(t, b, chromedp.Click(chromedp.CSS(`[data-pager="next"]`)))
		until(t, b, "the second page", fmt.Sprintf(`document.querySelector('.pager .muted')?.textContent === 'page 2' && document.querySelectorAll('#executions tbody tr').length === 2 && [...document.querySelectorAll('#executions tbody tr')].map((r) => r.dataset.id).join(' ') !== %q`, first))
		second := ids()
		for _, id := range strings.Fields(second) {
			require.NotContains(t, first, id, "a page holds no row of the one before")
		}
		do(t, b, chromedp.Click(chromedp.CSS(`[data-pager="prev"]`)))
		until(t, b, "back to the first page", fmt.Sprintf(`[...document.querySelectorAll('#executions tbody tr')].map((r) => r.dataset.id).join(' ') === %q`, first))
		do(t, b, chromedp.Navigate(base+"/ui/#/executions?range=custom&from=2001-01-01T00:00&to=2001-01-02T00:00"))
		until(t, b, "an empty range", `document.querySelector('.empty-title')?.textContent.includes('No executions match')`)
	})

	step("an API error is shown with its message", func(t *testing.T) {
		do(t, b, chromedp.Navigate(base+"/ui/#/executions?path=../etc"))
		until(t, b, "the error", `!!document.querySelector('.alert.error .alert-msg')`)
		msg := eval[string](t, b, `document.querySelector('.alert.error .alert-msg').textContent`)
		require.Contains(t, msg, "path: must be a catalog path")
		require.Equal(t, "INVALID_ARGUMENT", eval[string](t, b, `document.querySelector('.alert.error').dataset.code`))
		shots.take(t, b, "04-api-error", "an API error as the API worded it: the field (path) and what is wrong")
	})

	var run string
	step("catalog", func(t *testing.T) {
		do(t, b, chromedp.Navigate(base+"/ui/#/catalog"))
		until(t, b, "the catalog", `document.querySelectorAll('#playbooks tbody tr').length === 4`)
		shots.take(t, b, "05-catalog", "the catalog: the latest version of each playbook")
		do(t, b, chromedp.Navigate(base+"/ui/#/catalog/tests/console/fanout"))
		until(t, b, "the source", `document.querySelectorAll('.code.yaml .code-line').length > 40 && !!document.querySelector('.y-key')`)
		require.Equal(t, "2", eval[string](t, b, `document.querySelector('#version').value`))
		shots.take(t, b, "06-catalog-source", "a playbook's YAML source, highlighted, with its versions")
		do(t, b, chromedp.Navigate(base+"/ui/#/catalog/tests/console/fanout?version=2&tab=diff"))
		until(t, b, "the diff", `document.querySelectorAll('.diff .diff-line.add').length === 2 && document.querySelectorAll('.diff .diff-line.del').length === 2`)
		shots.take(t, b, "07-catalog-diff", "the diff from version 1 to version 2")
		do(t, b, chromedp.Navigate(base+"/ui/#/catalog/tests/console/fanout?version=2&tab=run"))
		until(t, b, "the workload form", `document.querySelector('#workload').value.includes('"items"') && !document.querySelector('#start').disabled`)
		// A workload that is not JSON is refused before it is sent, naming the line.
		setValue(t, b, "#workload", "{\n  \"items\": [1, 2,\n}")
		until(t, b, "the JSON check", `document.querySelector('#start').disabled && document.querySelector('#workload-check').textContent.startsWith('line ')`)
		setValue(t, b, "#workload", `{"items": [2, 3, 4, 5, 6, 7], "big": false}`)
		setValue(t, b, "#labels", "team=console, env=test")
		until(t, b, "a valid workload", `!document.querySelector('#start').disabled`)
		shots.take(t, b, "08-run-form", "the run form: the workload as JSON, checked as it is typed")
		do(t, b, chromedp.Click(chromedp.CSS("#start")))
		until(t, b, "the new execution's page", `location.hash.startsWith('#/executions/') && !!document.querySelector('#exec-status')`)
		// The tab the test clicks later, as the page first drew it: live updates redraw the
		// tabs, and must keep their buttons (a button replaced between a press and its
		// release loses the click).
		require.True(t, eval[bool](t, b, `(window.firstTimelineTab = document.querySelector('[data-tab="timeline"]')) !== null`))
		run = strings.TrimPrefix(eval[string](t, b, `location.hash`), "#/executions/")
		run, _, _ = strings.Cut(run, "?")
	})
	require.NotEmpty(t, run, "the run form started an execution")

	step("execution graph", func(t *testing.T) {
		// The page follows the execution live until it completes.
		until(t, b, "the end of the run", `document.querySelector('#exec-status').dataset.status === 'completed' && document.querySelector('[data-step="end"]')?.dataset.status === 'completed'`)
		require.Equal(t, 7, eval[int](t, b, `document.querySelectorAll('svg.graph .node').length`), "nodes")
		require.True(t, eval[bool](t, b, `window.firstTimelineTab === document.querySelector('[data-tab="timeline"]') && window.firstTimelineTab.isConnected`),
			"the live updates kept the tab buttons the page first drew")
		require.Equal(t, 8, eval[int](t, b, `document.querySelectorAll('svg.graph .edge').length`), "edges")
		statuses := eval[map[string]string](t, b, `Object.fromEntries([...document.querySelectorAll('svg.graph .node')].map((n) => [n.dataset.step, n.dataset.status]))`)
		require.Equal(t, map[string]string{"start": "completed", "fan": "completed", "side": "completed", "rare": "skipped", "join": "completed", "table": "completed", "end": "completed"}, statuses)
		require.Equal(t, "6/6", eval[string](t, b, `(() => { const n = document.querySelector('[data-step="fan"]'); return n.dataset.loopDone + '/' + n.dataset.loopTotal; })()`), "the loop shows done/total")
		arcs := eval[map[string]string](t, b, `Object.fromEntries([...document.querySelectorAll('svg.graph .edge')].map((e) => [e.dataset.from + '->' + e.dataset.to, e.dataset.state]))`)
		require.Equal(t, map[string]string{"start->fan": "fired", "start->side": "fired", "start->rare": "not-taken", "fan->join": "fired", "side->join": "fired",
			"rare->join": "not-taken", "join->table": "fired", "table->end": "fired"}, arcs)
		require.Contains(t, eval[string](t, b, `document.querySelector('.edge-label text').textContent`), "workload.big")
		bad, n := overlaps(t, b, "svg.graph .node-box, svg.graph .edge-label rect")
		require.Equal(t, 8, n)
		require.Empty(t, bad)
		do(t, b, chromedp.Click(chromedp.CSS(`[data-step="fan"]`)))
		until(t, b, "the step panel", `document.querySelector('#step-panel h2')?.textContent === 'fan'`)
		shots.take(t, b, "09-execution-graph", "an execution of a fan-out/fan-in playbook: its step graph coloured by status (a loop 6/6, a skipped branch, arcs taken and not), a step's panel")
	})

	step("timeline", func(t *testing.T) {
		do(t, b, chromedp.Click(chromedp.CSS(`[data-tab="timeline"]`)))
		until(t, b, "the timeline", `document.querySelectorAll('svg.timeline .tl-row.step').length === 7`)
		require.Equal(t, 6, eval[int](t, b, `document.querySelectorAll('svg.timeline .tl-row.iter').length`), "a row per loop iteration")
		require.Equal(t, 1, eval[int](t, b, `document.querySelectorAll('svg.timeline .tl-row.slowest').length`))
		shots.take(t, b, "10-timeline", "the timeline: a Gantt of the steps and the loop's iterations over wall time, waiting hatched, the slowest step marked")
	})

	step("retries in the timeline", func(t *testing.T) {
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, f.wait(t, flaky).GetStatus())
		do(t, b, chromedp.Navigate(base+"/ui/#/executions/"+flaky+"?tab=timeline"))
		until(t, b, "the timeline", `document.querySelectorAll('svg.timeline .tl-row.step').length === 3`)
		attempts := eval[[]string](t, b, `[...document.querySelectorAll('svg.timeline .tl-run')].filter((r) => r.closest('.tl-row').dataset.step === 'fetch').map((r) => r.dataset.attempt + ' ' + r.getAttribute('class'))`)
		require.Equal(t, []string{"1 tl-run c-failed", "2 tl-run c-completed"}, attempts, "both attempts of fetch, the first failed")
		require.Equal(t, 1, eval[int](t, b, `document.querySelectorAll('svg.timeline .tl-backoff').length`), "the backoff between them")
		require.Equal(t, "#2", eval[string](t, b, `document.querySelector('svg.timeline .tl-attempt').textContent`))
		shots.take(t, b, "10b-timeline-retry", "the timeline of a retried step: the failed first attempt, the backoff, the second attempt marked #2")
		do(t, b, chromedp.Navigate(base+"/ui/#/executions/"+run))
		until(t, b, "the graph", `document.querySelectorAll('svg.graph .node').length === 7`)
	})

	step("a failed execution", func(t *testing.T) {
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, f.wait(t, broken).GetStatus())
		do(t, b, chromedp.Navigate(base+"/ui/#/executions/"+broken))
		until(t, b, "the failed graph", `document.querySelector('#exec-status')?.dataset.status === 'failed' && document.querySelector('[data-step="fetch"]')?.dataset.status === 'failed'`)
		require.Equal(t, "pending", eval[string](t, b, `document.querySelector('[data-step="end"]').dataset.status`), "never reached")
		require.Contains(t, eval[string](t, b, `document.querySelector('.exec-head .alert.error').textContent`), "No such file or directory", "the step's error, as the tool reported it")
		do(t, b, chromedp.Click(chromedp.CSS(`[data-step="fetch"]`)))
		until(t, b, "the step panel", `document.querySelector('#step-panel h2')?.textContent === 'fetch'`)
		shots.take(t, b, "10c-failed", "a failed execution: the failed step red, the step after it pending, the error in the header and the step's panel")
		do(t, b, chromedp.Click(chromedp.CSS(`[data-tab="timeline"]`)))
		until(t, b, "three failed attempts", `document.querySelectorAll('svg.timeline .tl-run.c-failed').length === 3`)
		do(t, b, chromedp.Navigate(base+"/ui/#/executions/"+run))
		until(t, b, "the graph", `document.querySelectorAll('svg.graph .node').length === 7`)
	})

	step("event log", func(t *testing.T) {
		do(t, b, chromedp.Click(chromedp.CSS(`[data-tab="events"]`)))
		until(t, b, "the events", `document.querySelectorAll('#events tr.event').length > 20`)
		require.Equal(t, "playbook.started", eval[string](t, b, `document.querySelector('#events tr.event').dataset.type`))
		do(t, b, chromedp.Click(chromedp.CSS(`#events tr.event[data-type="step.enter"]`)))
		until(t, b, "an open payload", `!!document.querySelector('#events tr.event-detail:not(.hidden) .json')`)
		shots.take(t, b, "11-events", "the event log: seq, time, type, step, iteration and attempt, one event's payload open")
	})

	step("results", func(t *testing.T) {
		do(t, b, chromedp.Click(chromedp.CSS(`[data-tab="results"]`)))
		until(t, b, "the table's first page", `document.querySelector('[data-step="table"] [data-rows-shown]')?.dataset.rowsShown === '1-50'`)
		require.Contains(t, eval[string](t, b, `document.querySelector('[data-step="table"] .pager .muted').textContent`), "of 2,000")
		do(t, b, chromedp.Click(chromedp.CSS(`[data-step="table"] [data-rows="next"]`)))
		until(t, b, "the second page", `document.querySelector('[data-step="table"] [data-rows-shown]')?.dataset.rowsShown === '51-100'`)
		first := eval[[]string](t, b, `[...document.querySelector('[data-step="table"] tbody tr').querySelectorAll('td')].map((td) => td.textContent)`)
		require.Equal(t, []string{"51", "50", "SKU-00050", "1", "line 50 of the console test table"}, first)
		// The downloads are the gateway's export of the table: CSV, and the Arrow IPC
		// stream as stored, fetched with the key in the Authorization header (never in a URL).
		downloads := t.TempDir()
		_, err := chromedp.CallBrowser(b, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: downloads})
		require.NoError(t, err)
		saved := func(name string) []byte {
			var data []byte
			testkit.WaitFor(t, time.Minute, func() error {
				// Chromium writes to a .crdownload file and renames it when done.
				var err error
				data, err = os.ReadFile(filepath.Join(downloads, name))
				return err
			})
			return data
		}
		do(t, b, chromedp.Click(chromedp.CSS(`[data-csv="table"]`)))
		csv := saved("table.csv")
		lines := strings.Split(strings.TrimSuffix(string(csv), "\n"), "\n")
		require.Len(t, lines, 2001, "a header and 2,000 rows")
		require.Equal(t, "id,sku,qty,note", lines[0])
		require.Equal(t, "1999,SKU-01999,4,line 1999 of the console test table", lines[2000])
		do(t, b, chromedp.Click(chromedp.CSS(`[data-arrow="table"]`)))
		rdr, err := ipc.NewReader(bytes.NewReader(saved("table.arrow")))
		require.NoError(t, err, "the download is an Arrow IPC stream")
		require.Equal(t, []string{"id", "sku", "qty", "note"}, func() (names []string) {
			for _, fl := range rdr.Schema().Fields() {
				names = append(names, fl.Name)
			}
			return names
		}())
		var rows int64
		var last string
		for rdr.Next() {
			rec := rdr.RecordBatch()
			rows += rec.NumRows()
			last = rec.Column(1).ValueStr(int(rec.NumRows()) - 1)
		}
		require.NoError(t, rdr.Err())
		rdr.Release()
		require.EqualValues(t, 2000, rows)
		require.Equal(t, "SKU-01999", last)
		for _, u := range eval[[]string](t, b, `performance.getEntriesByType('resource').map((e) => e.name).filter((n) => n.includes('/export'))`) {
			require.NotContains(t, u, f.m.AdminKey, "the key is never in a URL")
		}
		shots.take(t, b, "12-results", "the results: the execution's result as a JSON tree, a table result paged (rows 51-100 of 2,000) with its CSV and Arrow downloads")
	})

	step("rerun from a step", func(t *testing.T) {
		do(t, b, chromedp.Navigate(base+"/ui/#/executions/"+run))
		until(t, b, "the run's labels", `[...document.querySelectorAll('.facts .label-chip')].map((c) => c.textContent).join(' ') === 'env=test team=console'`)
		do(t, b, chromedp.Click(chromedp.CSS("#rerun")), chromedp.WaitVisible(chromedp.CSS("dialog[open] #rerun-from")))
		setValue(t, b, "#rerun-from", "join")
		shots.take(t, b, "13-rerun-dialog", "rerun from a step: the steps the original entered, the whole playbook by default")
		do(t, b, chromedp.Click(chromedp.CSS("dialog[open] [data-confirm]")))
		until(t, b, "the rerun's page", fmt.Sprintf(`location.hash.startsWith('#/executions/') && !location.hash.includes(%q) && !!document.querySelector('#exec-status')`, run))
		until(t, b, "the rerun's end", `document.querySelector('#exec-status').dataset.status === 'completed' && document.querySelector('[data-step="end"]')?.dataset.status === 'completed'`)
		reused := eval[map[string]string](t, b, `Object.fromEntries([...document.querySelectorAll('svg.graph .node')].map((n) => [n.dataset.step, n.dataset.reused]))`)
		require.Equal(t, map[string]string{"start": "true", "fan": "true", "side": "true", "rare": "true", "join": "false", "table": "false", "end": "false"}, reused)
		require.Equal(t, "fired", eval[string](t, b, `document.querySelector('.edge[data-from="fan"][data-to="join"]').dataset.state`), "a reused step's arcs to what ran were taken")
		require.Equal(t, "reused", eval[string](t, b, `document.querySelector('[data-step="fan"] .node-sub').textContent.split(' · ')[1]`))
		require.Contains(t, eval[string](t, b, `document.querySelector('.facts').textContent`), "Rerun of"+run+" from join")
		shots.take(t, b, "14-rerun", "a rerun from join: the steps before it reused (dashed, 'reused'), join and after run again, its origin in the header")
		do(t, b, chromedp.Navigate(base+"/ui/#/executions?labels=team%3Dconsole"))
		until(t, b, "the label filter", `document.querySelectorAll('#executions tbody tr').length === 2 && document.querySelectorAll('#executions tbody .label-chip').length === 4`)
		shots.take(t, b, "15-executions-by-label", "the executions list filtered by a label: the run started from the console and its rerun")
	})

	step("thirty steps", func(t *testing.T) {
		do(t, b, chromedp.Navigate(base+"/ui/#/executions/"+thirty))
		until(t, b, "the 30-step graph", `document.querySelectorAll('svg.graph .node').length === 30 && document.querySelector('[data-step="end"]').dataset.status === 'completed'`)
		do(t, b, chromedp.Click(chromedp.CSS(`.zoom button:last-child`))) // 100%: measure at the drawn size
		shots.take(t, b, "16-graph-30-steps", "a 30-step graph: fan-outs, conditions, joins, a self-loop and a back edge, laid out in layers without overlaps")
		bad, n := overlaps(t, b, "svg.graph .node-box, svg.graph .edge-label rect")
		require.Greater(t, n, 40)
		require.Empty(t, bad, "no step box or label overlaps another")
		// Step names and labels fit their boxes.
		require.Zero(t, eval[int](t, b, `[...document.querySelectorAll('svg.graph text')].filter((e) => e.hasAttribute('textLength')).length`))
		require.Equal(t, "skipped", eval[string](t, b, `document.querySelector('[data-step="vip_customers"]').dataset.status`))
		do(t, b, chromedp.Click(chromedp.CSS(`[data-tab="timeline"]`)))
		until(t, b, "its timeline", `document.querySelectorAll('svg.timeline .tl-row.step').length >= 30`)
		shots.take(t, b, "17-timeline-30-steps", "the timeline of the 30-step execution, skipped steps dotted")
	})

	step("cancel from the console", func(t *testing.T) {
		do(t, b, chromedp.Navigate(base+"/ui/#/executions/"+slow))
		until(t, b, "the running step", `document.querySelector('[data-step="nap"]')?.dataset.status === 'running'`)
		shots.take(t, b, "18-running", "a running execution: its running step pulses, the cancel button")
		do(t, b, chromedp.Click(chromedp.CSS("#cancel")), chromedp.WaitVisible(chromedp.CSS("dialog[open] [data-confirm]")))
		do(t, b, chromedp.SendKeys(chromedp.CSS("dialog[open] input"), "console test"))
		shots.take(t, b, "19-cancel-dialog", "the cancel confirmation, with a reason recorded in the log")
		do(t, b, chromedp.Click(chromedp.CSS("dialog[open] [data-confirm]")))
		until(t, b, "CANCELLED", `document.querySelector('#exec-status').dataset.status === 'cancelled'`)
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, f.wait(t, slow).GetStatus())
		shots.take(t, b, "20-cancelled", "the execution ended cancelled, live")
	})

	step("live rows", func(t *testing.T) {
		other := f.start(t, "tests/console/slow")
		do(t, b, chromedp.Navigate(base+"/ui/#/executions"))
		until(t, b, "the running row", fmt.Sprintf(`document.querySelector('tr[data-id="%s"]')?.dataset.status === 'running'`, other))
		_, err := f.exe.CancelExecution(ctx, &apiv1.CancelExecutionRequest{ExecutionId: other, Reason: "test"})
		require.NoError(t, err)
		until(t, b, "the row to turn cancelled without a reload", fmt.Sprintf(`document.querySelector('tr[data-id="%s"]')?.dataset.status === 'cancelled'`, other))
	})

	step("schedules", func(t *testing.T) {
		do(t, b, chromedp.Navigate(base+"/ui/#/schedules"))
		until(t, b, "the schedules", `document.querySelectorAll('#schedules tbody tr').length === 2`)
		do(t, b, chromedp.Click(chromedp.CSS(`[data-toggle="new-year"]`)))
		until(t, b, "the paused schedule", `document.querySelector('tr[data-name="new-year"]')?.dataset.paused === 'true'`)
		r, err := sched.GetSchedule(ctx, &apiv1.GetScheduleRequest{Name: "new-year"})
		require.NoError(t, err)
		require.True(t, r.GetSchedule().GetPaused())
		shots.take(t, b, "21-schedules", "schedules: their timing, next tick and last execution, one paused from the console")
	})

	step("triggers", func(t *testing.T) {
		do(t, b, chromedp.Navigate(base+"/ui/#/triggers"))
		until(t, b, "the triggers", `document.querySelectorAll('#triggers tbody tr').length === 2`)
		kinds := eval[map[string]string](t, b, `Object.fromEntries([...document.querySelectorAll('#triggers tbody tr')].map((r) => [r.dataset.name, r.dataset.kind]))`)
		require.Equal(t, map[string]string{"github-push": "webhook", "order-created": "nats"}, kinds)
		require.Contains(t, eval[string](t, b, `document.querySelector('tr[data-name="order-created"] td.source').textContent`), "orders.created in stream ORDERS")
		require.Contains(t, eval[string](t, b, `document.querySelector('tr[data-name="github-push"] td.source').textContent`), "POST /v1/triggers/github-push")
		require.Equal(t, fired.GetExecutionId(), eval[string](t, b, `document.querySelector('tr[data-name="github-push"] [data-last]').dataset.last`), "the last delivery's execution")
		require.Contains(t, eval[string](t, b, `document.querySelector('tr[data-name="order-created"] td.last').textContent`), "never fired")
		do(t, b, chromedp.Click(chromedp.CSS(`[data-deliveries="github-push"]`)))
		until(t, b, "its deliveries", fmt.Sprintf(`document.querySelectorAll('#executions tbody tr').length === 1 && !!document.querySelector('tr[data-id="%s"]')`, fired.GetExecutionId()))
		require.Equal(t, "trigger github-push", eval[string](t, b, `document.querySelector('#executions [data-origin="trigger"]').textContent`), "the list names the trigger as its origin")
		do(t, b, chromedp.Navigate(base+"/ui/#/triggers"))
		until(t, b, "the triggers", `document.querySelectorAll('#triggers tbody tr').length === 2`)
		page := eval[string](t, b, `document.documentElement.outerHTML`)
		require.NotContains(t, page, hook.GetSecret(), "a webhook's secret is never shown")
		shots.take(t, b, "22-triggers", "triggers: a webhook fired once (its last execution linked) and a NATS subject, what each starts; no secret")
	})

	step("credentials and API", func(t *testing.T) {
		do(t, b, chromedp.Navigate(base+"/ui/#/credentials"))
		until(t, b, "the credentials", `document.querySelectorAll('#credentials tbody tr').length === 2`)
		require.NotContains(t, eval[string](t, b, `document.body.innerText`), "s3cret")
		shots.take(t, b, "23-credentials", "credentials: names and types only")
		do(t, b, chromedp.Navigate(base+"/ui/#/api"))
		until(t, b, "the routes", `document.querySelectorAll('#api .api-route').length > 15`)
		require.Equal(t, 1, eval[int](t, b, `document.querySelectorAll('#api .api-route[data-method="get"][data-path="/v1/executions"]').length`))
		require.Contains(t, eval[string](t, b, `document.querySelector('#api .api-route[data-path="/v1/results/{resultId}/export"] .api-raw').textContent`), "application/vnd.apache.arrow.stream or text/csv",
			"the export route is described as the file it sends")
		do(t, b, chromedp.Click(chromedp.CSS(`#api .api-route[data-method="get"][data-path="/v1/executions"] summary`)))
		shots.take(t, b, "24-api", "the API page: /openapi.json's routes by service, one opened to its parameters and response")
	})

	step("narrow screen", func(t *testing.T) {
		do(t, b, chromedp.EmulateViewport(390, 844), chromedp.Navigate(base+"/ui/#/executions"))
		until(t, b, "the list", `document.querySelectorAll('#executions tbody tr').length >= 3`)
		require.LessOrEqual(t, eval[int](t, b, `document.documentElement.scrollWidth`), 390, "the page does not scroll sideways (tables scroll in their box)")
		shots.take(t, b, "25-executions-narrow", "the executions list on a 390-pixel-wide screen")
		do(t, b, chromedp.Navigate(base+"/ui/#/executions/"+run))
		until(t, b, "the graph", `document.querySelectorAll('svg.graph .node').length === 7`)
		shots.take(t, b, "26-graph-narrow", "an execution's page on a 390-pixel-wide screen, its graph fitted")
	})

	step("step logs", func(t *testing.T) {
		do(t, b, chromedp.EmulateViewport(1440, 900), chromedp.Navigate(base+"/ui/#/executions/"+run))
		until(t, b, "the graph", `document.querySelectorAll('svg.graph .node').length === 7`)
		// From a step's panel to its logs.
		do(t, b, chromedp.Click(chromedp.CSS(`svg.graph [data-step="side"]`)))
		until(t, b, "the step panel", `document.querySelector('#step-panel h2')?.textContent === 'side'`)
		do(t, b, chromedp.Click(chromedp.CSS(`#step-logs`)))
		until(t, b, "the side step's printed line", `document.querySelector('.step-logs[data-step="side"] .log-entry[data-stream="stdout"] .log-text')?.textContent === 'side step: all is well\n'`)
		require.Equal(t, "side", eval[string](t, b, `document.querySelector('#log-step').value`))
		require.Equal(t, "side step: a warning, for the record\n", eval[string](t, b, `document.querySelector('.step-logs[data-step="side"] .log-entry[data-stream="stderr"] .log-text').textContent`))
		setValue(t, b, "#log-step", "")
		until(t, b, "every step's logs", `location.hash.includes('tab=logs') && !location.hash.includes('logstep=side')`)
		require.Equal(t, []string{"side"}, eval[[]string](t, b, `[...document.querySelectorAll('.step-logs')].map((s) => s.dataset.step)`), "only the step that printed has logs")
		shots.take(t, b, "27-step-logs", "the step logs of an execution, per step: a python step's stdout and stderr")

		// A running execution's logs follow it: the first step's line shows while the second runs.
		live := f.start(t, "tests/console/slow")
		do(t, b, chromedp.Navigate(base+"/ui/#/executions/"+live+"?tab=logs"))
		until(t, b, "the first step's line, live", `document.querySelector('.step-logs[data-step="start"] .log-text')?.textContent === "hello from the console's python step\n"`)
		require.Equal(t, "running", eval[string](t, b, `document.querySelector('#exec-status').dataset.status`))
		shots.take(t, b, "28-step-logs-live", "the step logs of a running execution, followed live: the first step's line while the second runs")
		_, err := f.exe.CancelExecution(ctx, &apiv1.CancelExecutionRequest{ExecutionId: live, Reason: "test"})
		require.NoError(t, err)
	})

	step("tenant filter", func(t *testing.T) {
		// A system key lists every tenant's executions, or one tenant's.
		do(t, b, chromedp.Navigate(base+"/ui/#/executions"))
		until(t, b, "the tenant control", `!document.querySelector('#tenant-field').classList.contains('hidden')`)
		require.Zero(t, eval[int](t, b, fmt.Sprintf(`document.querySelectorAll('tr[data-id="%s"]').length`, acmeRun)), "its own tenant by default")
		eval[bool](t, b, `(() => { const s = document.querySelector('#f-tenant'); s.value = '-'; s.dispatchEvent(new Event('change')); return true; })()`)
		until(t, b, "every tenant's executions", fmt.Sprintf(`document.querySelector('tr[data-id="%s"]')?.dataset.tenant === 'acme' && document.querySelector('tr[data-id="%s"]')?.dataset.tenant === 'default'`, acmeRun, thirty))
		require.Contains(t, eval[string](t, b, `location.hash`), "tenant=-")
		do(t, b, chromedp.Navigate(base+"/ui/#/executions?tenant=acme"))
		until(t, b, "acme's executions", fmt.Sprintf(`document.querySelectorAll('#executions tbody tr').length === 1 && !!document.querySelector('tr[data-id="%s"]')`, acmeRun))
		require.Equal(t, "acme", eval[string](t, b, `document.querySelector('#f-tenant').value`))
		require.Equal(t, "acme", eval[string](t, b, `document.querySelector('#executions tbody td[data-tenant]').textContent`))
		shots.take(t, b, "29-executions-by-tenant", "a system key's executions list filtered by tenant (acme), the tenant column shown")
		// Another tenant's execution opens only with that tenant's key: the page says so.
		do(t, b, chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-id="%s"] a[href^="#/executions/"]`, acmeRun))))
		until(t, b, "the notice", `document.querySelector('.alert.warn')?.textContent.includes('belongs to tenant acme')`)

		// A viewer of acme sees no tenant control, and a tenant in the link is refused with
		// the API's message.
		eval[bool](t, b, `sessionStorage.clear(), true`)
		do(t, b, chromedp.Navigate(base+"/ui/#/login"), chromedp.WaitVisible(chromedp.CSS("#token")))
		setValue(t, b, "#token", acmeViewer)
		do(t, b, chromedp.Click(chromedp.CSS("#sign-in")))
		until(t, b, "acme's list", fmt.Sprintf(`!!document.querySelector('tr[data-id="%s"]')`, acmeRun))
		until(t, b, "the role known", `sessionStorage.getItem('noetl.console.system') === '0'`)
		require.True(t, eval[bool](t, b, `document.querySelector('#tenant-field').classList.contains('hidden')`), "no tenant control without the system role")
		do(t, b, chromedp.Navigate(base+"/ui/#/executions?tenant=-"))
		until(t, b, "the refusal", `document.querySelector('.alert.error')?.dataset.code === 'PERMISSION_DENIED'`)
		require.Contains(t, eval[string](t, b, `document.querySelector('.alert.error .alert-msg').textContent`), "needs the system role")
		shots.take(t, b, "30-tenant-refused", "a viewer key asking for every tenant's executions: refused with the API's message")
	})

	require.Empty(t, problems(), "the pages logged no error and threw no exception")
}
