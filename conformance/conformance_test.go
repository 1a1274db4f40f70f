package conformance

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	"github.com/noetl/noetl/internal/testkit"
	"github.com/noetl/noetl/services/worker"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// playbookDir is where the conformance playbooks live: playbooks/ beside this file, or
// NOETL_CONFORMANCE_DIR (to run another corpus with the same expectations).
func playbookDir(t *testing.T) string {
	if d := os.Getenv("NOETL_CONFORMANCE_DIR"); d != "" {
		return d
	}
	d, err := filepath.Abs("playbooks")
	require.NoError(t, err)
	if _, err := os.Stat(d); err != nil {
		t.Fatalf("conformance playbooks not found at %s (set NOETL_CONFORMANCE_DIR): %v", d, err)
	}
	return d
}

// rest is a small client of the gateway's REST API.
type rest struct {
	t    *testing.T
	base string
	key  string // API key sent as a bearer token
}

func (r rest) do(method, path string, body any) (int, map[string]any) {
	r.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(r.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, r.base+path, rd)
	require.NoError(r.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+r.key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(r.t, err)
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(r.t, err)
	out := map[string]any{}
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

// run is one finished execution as the REST API shows it.
type run struct {
	// api is the client that ran it, for checks that read more of the API.
	api    rest
	id     string
	status string
	exec   map[string]any
	events []map[string]any
}

func (r run) step(name string) map[string]any {
	steps, _ := r.exec["steps"].(map[string]any)
	s, _ := steps[name].(map[string]any)
	return s
}

func (r run) stepResult(name string) map[string]any {
	res, _ := r.step(name)["result"].(map[string]any)
	return res
}

// enters counts the entries of step: its step.enter events, or the command.issued events
// that carry its entry (a step of one command).
func (r run) enters(step string) int {
	n := 0
	for _, ev := range r.events {
		payload, _ := ev["payload"].(map[string]any)
		if ev["step"] == step && (ev["type"] == "step.enter" || ev["type"] == "command.issued" && payload["enter"] != nil) {
			n++
		}
	}
	return n
}

func (r run) seqOf(typ, step string) int {
	for _, ev := range r.events {
		if ev["type"] == typ && ev["step"] == step {
			s, _ := ev["seq"].(string)
			var n int
			_, _ = fmt.Sscan(s, &n)
			return n
		}
	}
	return -1
}

func (c rest) execute(path string, workload map[string]any) run {
	c.t.Helper()
	code, started := c.do("POST", "/v1/executions", map[string]any{"path": path, "workload": workload})
	require.Equal(c.t, http.StatusOK, code, "start %s: %v", path, started)
	id, _ := started["executionId"].(string)
	require.NotEmpty(c.t, id)
	var r run
	deadline := time.Now().Add(3 * time.Minute)
	for {
		code, w := c.do("GET", "/v1/executions/"+id+":wait?timeout=30s", nil)
		require.Equal(c.t, http.StatusOK, code, "wait %s: %v", id, w)
		r.exec, _ = w["execution"].(map[string]any)
		r.status, _ = r.exec["status"].(string)
		if r.status != "EXECUTION_STATUS_RUNNING" || time.Now().After(deadline) {
			break
		}
	}
	if r.status != "EXECUTION_STATUS_RUNNING" {
		// The wait's final state may be the orchestrator's own (the state it decided the
		// end on): it must be the log's, as the statebuilder folds it.
		code, got := c.do("GET", "/v1/executions/"+id, nil)
		require.Equal(c.t, http.StatusOK, code, "get %s: %v", id, got)
		require.Equal(c.t, got["execution"], any(r.exec), "execution %s: the wait's view is the log's", id)
	}
	r.id, r.api = id, c
	token := ""
	for {
		code, page := c.do("GET", "/v1/executions/"+id+"/events?pageSize=1000&pageToken="+token, nil)
		require.Equal(c.t, http.StatusOK, code)
		evs, _ := page["events"].([]any)
		for _, e := range evs {
			m, _ := e.(map[string]any)
			r.events = append(r.events, m)
		}
		token, _ = page["nextPageToken"].(string)
		if token == "" {
			break
		}
	}
	return r
}

// expectation is one row of the outcome table of README.md beside this file.
type expectation struct {
	file     string
	workload map[string]any
	// unsupported, when set, names what the platform still lacks for this playbook; the case
	// is skipped with that reason printed.
	unsupported string
	// registerOnly playbooks are registered and validated but not executed.
	registerOnly bool
	status       string
	check        func(t *testing.T, r run)
}

// pgURL is the test Postgres every credential points at; checks read it.
var pgURL string

// count runs a counting query against the test Postgres.
func count(t *testing.T, q string, args ...any) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), pgURL)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	var n int
	require.NoError(t, conn.QueryRow(context.Background(), q, args...).Scan(&n))
	return n
}

func cases() []expectation {
	completed := "EXECUTION_STATUS_COMPLETED"
	return []expectation{
		{file: "hello_world.hello_world.yaml", status: completed},
		{file: "simple_python.yaml", status: completed},
		{file: "test_args_passing.yaml", status: completed},
		{file: "vars_test.test_vars_simple.yaml", status: completed, check: func(t *testing.T, r run) {
			res := r.stepResult("get_var")
			require.EqualValues(t, 42, res["value"], "get_var result: %v", res)
			require.Equal(t, true, res["verification"], "get_var result: %v", res)
		}},
		{file: "vars_test.test_vars_block.yaml", status: completed},
		{file: "loop_test.yaml", status: completed},
		{file: "root_scripts.test_simple_loop.yaml", status: completed},
		{file: "root_scripts.test_implicit_end_routing.yaml", status: completed},
		{file: "fanout_reduce.fanout_reduce_phase6.yaml", status: completed, check: func(t *testing.T, r run) {
			require.Equal(t, 1, r.enters("reduce_customer"), "the reducer is entered exactly once")
			reduce := r.seqOf("command.completed", "reduce_customer")
			require.Greater(t, reduce, r.seqOf("command.completed", "normalize_customer"))
			require.Greater(t, reduce, r.seqOf("command.completed", "enrich_customer"))
			require.Greater(t, r.seqOf("command.completed", "normalize_customer"), 0)
			require.Greater(t, r.seqOf("command.completed", "enrich_customer"), 0)
		}},
		{file: "control_flow_workbook.control_flow_workbook.yaml", status: completed},
		{file: "test_start_with_action.yaml", status: completed},
		{file: "test_end_with_action.yaml", status: completed},
		{file: "test_large_result_extraction.yaml", status: completed, check: func(t *testing.T, r run) {
			start := r.step("start")
			require.NotNil(t, start["resultRef"], "the large result travels by reference")
			require.Nil(t, start["result"], "no inline copy of the large result")
			require.Equal(t, true, r.stepResult("check_extraction")["test_passed"], "%v", r.stepResult("check_extraction"))
			for _, ev := range r.events {
				if ev["type"] == "command.completed" && ev["step"] == "start" {
					require.NotNil(t, ev["resultRef"])
					require.Nil(t, ev["result"])
				}
			}
		}},
		{file: "test_output_select.yaml", status: completed, check: func(t *testing.T, r run) {
			require.NotNil(t, r.step("start")["resultRef"], "the large result travels by reference")
			v := r.stepResult("verify_extracted_fields")
			require.Equal(t, true, v["was_externalized"], "{{ start._ref is defined }}: %v", v)
			require.EqualValues(t, 1000, v["count_received"], "%v", v)
			// The artifact step loaded the whole payload: every item was seen.
			require.EqualValues(t, 1000, r.stepResult("process_full_data")["total_items"], "%v", r.stepResult("process_full_data"))
			require.Equal(t, "PASSED", r.stepResult("summary")["test_result"])
		}},
		{file: "http_test.yaml", workload: map[string]any{"api_url": "GATEWAY"}, status: completed, check: func(t *testing.T, r run) {
			require.Equal(t, true, r.stepResult("verify")["verified"], "verify result: %v", r.stepResult("verify"))
		}},
		{file: "playbook_composition.user_profile_scorer.yaml", status: completed},
		{file: "playbook_composition.playbook_composition.yaml", status: completed, check: func(t *testing.T, r run) {
			require.Equal(t, 4, count(t, `SELECT count(*) FROM noetl.execution WHERE parent_execution_id = $1 AND status = 2`, r.id), "one completed child per user")
			require.Equal(t, 4, count(t, `SELECT count(*) FROM public.user_profile_results WHERE execution_id = $1 AND profile_score > 0`, r.id), "scores upserted")
		}},
		{file: "postgres_test.yaml", status: completed},
		{file: "engine.cursor_drain.yaml", status: completed, check: func(t *testing.T, r run) {
			sum := r.stepResult("drain")
			require.Equal(t, true, sum["drained"], "%v", sum)
			require.EqualValues(t, 200, sum["claimed"], "%v", sum)
			require.EqualValues(t, 200, sum["processed"], "%v", sum)
			require.EqualValues(t, 0, sum["failed"], "%v", sum)
			require.EqualValues(t, 200, sum["attempts"], "one body per row: %v", sum)
			rows, _ := r.stepResult("check")["rows"].([]any)
			require.Equal(t, []any{map[string]any{"effects": 200.0, "unclaimed": 0.0}}, rows, "each row recorded once, none left")
			byRef := 0
			for _, ev := range r.events {
				if ev["type"] == "command.completed" && ev["step"] == "drain" && ev["resultRef"] != nil {
					byRef++
				}
			}
			require.Positive(t, byRef, "full claims (80 KB) travel by reference")
			var exit map[string]any
			for _, ev := range r.events {
				if ev["type"] == "step.exit" && ev["step"] == "drain" {
					exit = ev
				}
			}
			require.Contains(t, fmt.Sprint(exit), "__cursor_drained", "the loop ends with a drain exit: %v", exit)
		}},
		{file: "broken_sql.yaml", status: "EXECUTION_STATUS_FAILED", check: func(t *testing.T, r run) {
			failed, _ := r.exec["failedSteps"].([]any)
			require.Equal(t, []any{"verify_pg_data"}, failed)
			e, _ := r.exec["error"].(map[string]any)
			msg, _ := e["message"].(string)
			require.Contains(t, msg, "verify_pg_data")
			require.Contains(t, msg, "syntax error")
			require.Contains(t, msg, "42601")
		}},
		{file: "v10_canonical_example.yaml", registerOnly: true},
		{file: "engine.batch_child.yaml", status: completed, check: func(t *testing.T, r run) {
			require.EqualValues(t, 0, r.stepResult("start")["doubled"], "%v", r.stepResult("start"))
		}},
		{file: "engine.batch_execute.yaml", workload: map[string]any{"api_url": "GATEWAY"}, status: completed, check: func(t *testing.T, r run) {
			res := r.stepResult("check")
			require.EqualValues(t, 200, res["status_code"], "%v", res)
			require.Equal(t, []any{4.0, 2.0, 1.0, 1.0}, res["counts"], "count, started, duplicates, failed: %v", res)
			require.Equal(t, []any{"started", "started", "duplicate", "error"}, res["statuses"], "%v", res)
			require.Equal(t, true, res["same_execution"], "a duplicate names the first's execution: %v", res)
			require.Equal(t, "NOT_FOUND", res["missing_code"], "%v", res)
			children, _ := res["children"].([]any)
			require.Len(t, children, 2)
			ids := make([]string, 0, len(children))
			for _, c := range children {
				id, _ := c.(string)
				ids = append(ids, id)
			}
			testkit.WaitFor(t, time.Minute, func() error {
				if n := count(t, `SELECT count(*) FROM noetl.execution WHERE execution_id = ANY($1) AND status = 2`, ids); n != 2 {
					return fmt.Errorf("%d of the batch's 2 executions completed", n)
				}
				return nil
			})
		}},
		{file: "engine.vars.yaml", workload: map[string]any{"api_url": "GATEWAY"}, status: completed, check: func(t *testing.T, r run) {
			require.Equal(t, map[string]any{"region": "eu-west", "double_rows": 500.0, "label": "eu-west-3"}, r.stepResult("render"), "%v", r.stepResult("render"))
			require.Equal(t, map[string]any{"region_defined": false, "rows": 250.0, "deleted": "deleted", "set_status": 200.0}, r.stepResult("end"), "%v", r.stepResult("end"))
			var writes []int
			for _, ev := range r.events {
				if ev["type"] == "vars.updated" {
					var n int
					_, err := fmt.Sscan(fmt.Sprint(ev["seq"]), &n)
					require.NoError(t, err)
					writes = append(writes, n)
				}
			}
			require.Len(t, writes, 2, "each write is one vars.updated event")
			require.Less(t, writes[0], r.seqOf("command.issued", "render"), "the set is committed before the step that renders it is issued")
			require.Less(t, writes[1], r.seqOf("command.issued", "end"), "the delete is committed before the last step is issued")
			require.Greater(t, writes[1], r.seqOf("command.issued", "render"))
		}},
		{file: "engine.shell_success.yaml", status: completed, check: func(t *testing.T, r run) {
			start := r.stepResult("start")
			require.EqualValues(t, 0, start["exit_code"], "%v", start)
			require.Equal(t, "hello from work", start["stdout"], "%v", start)
			require.Equal(t, "to stderr\n", start["stderr"], "%v", start)
			require.Equal(t, "hello from work|0", r.stepResult("argv")["stdout"], "%v", r.stepResult("argv"))
		}},
		{file: "engine.secrets_fields.yaml", status: completed, check: func(t *testing.T, r run) {
			require.Equal(t, map[string]any{"host": "***", "user": "***"}, r.stepResult("start")["fields"], "%v", r.stepResult("start"))
			require.Equal(t, map[string]any{"names": []any{"host", "user"}, "masked": true, "credential": "pg_local"}, r.stepResult("check"))
		}},
		{file: "engine.shell_timeout.yaml", status: "EXECUTION_STATUS_FAILED", check: func(t *testing.T, r run) {
			e, _ := r.exec["error"].(map[string]any)
			msg, _ := e["message"].(string)
			require.Contains(t, msg, "shell: timed out after 1s")
		}},
		{file: "engine.keychain.yaml", workload: map[string]any{"api": "TOKEN_SERVER"}, status: completed, check: func(t *testing.T, r run) {
			require.Equal(t, map[string]any{"resolved": true, "user": "***"}, r.stepResult("start"))
			for _, step := range []string{"call_api", "again"} {
				body, _ := r.stepResult(step)["body"].(map[string]any)
				require.Equal(t, map[string]any{"authorized": true, "token": "***"}, body, "step %s: %v", step, r.stepResult(step))
			}
			require.EqualValues(t, 1, tokens.requests.Load(), "the second step reuses the cached token")
			b, err := json.Marshal(r.events)
			require.NoError(t, err)
			require.NotContains(t, string(b), tokenPrefix)
			require.NotContains(t, string(b), "kc-client-secret")
		}},
		{file: "engine.python_script.yaml", workload: map[string]any{"api": "TOKEN_SERVER"}, status: completed, check: func(t *testing.T, r run) {
			require.EqualValues(t, 60, r.stepResult("from_file")["total"], "%v", r.stepResult("from_file"))
			require.Equal(t, "hello, total 60!", r.stepResult("from_url")["greeting"], "%v", r.stepResult("from_url"))
		}},
		{file: "engine.python_env.yaml", status: completed, check: func(t *testing.T, r run) {
			require.Equal(t, map[string]any{"region": "eu-west", "retries": 4.0, "cwd_tail": "work/out", "marker": "eu-west", "encoded": `{"ok": true}`}, r.stepResult("probe"))
		}},
		{file: "engine.step_timeout_retry.yaml", status: completed, check: func(t *testing.T, r run) {
			require.EqualValues(t, 2, r.stepResult("flaky")["attempt"], "the second attempt ran: %v", r.stepResult("flaky"))
			var codes []any
			for _, ev := range r.events {
				if ev["type"] == "command.failed" && ev["step"] == "flaky" {
					e, _ := ev["error"].(map[string]any)
					codes = append(codes, e["code"])
					require.Contains(t, fmt.Sprint(e["message"]), "spec.timeout", "%v", e)
				}
			}
			require.Equal(t, []any{"retry"}, codes, "one attempt stopped at its timeout and retried")
		}},
		{file: "engine.execution_timeout.yaml", status: "EXECUTION_STATUS_FAILED", check: func(t *testing.T, r run) {
			e, _ := r.exec["error"].(map[string]any)
			require.Equal(t, "deadline_exceeded", e["code"], "%v", r.exec["error"])
			require.Contains(t, fmt.Sprint(e["message"]), "ran past its timeout of 2s")
		}},
		{file: "engine.pipeline_set.yaml", status: completed, check: func(t *testing.T, r run) {
			chain := r.stepResult("chain")
			require.EqualValues(t, 12, chain["seen_total"], "an item's set reaches the next items by bare name: %v", chain)
			require.EqualValues(t, 120, chain["seen_scaled"], "a policy's then.set too: %v", chain)
			require.Equal(t, map[string]any{"total": 12.0, "scaled": 120.0}, r.stepResult("end"), "and later steps through ctx")
		}},
		{file: "engine.leading_slash.yaml", status: completed, check: func(t *testing.T, r run) {
			require.Equal(t, "conformance/leading_slash", r.exec["path"], "%v", r.exec)
			code, got := r.api.do("GET", "/v1/playbooks/%2Fconformance%2Fleading_slash", nil)
			require.Equal(t, http.StatusOK, code, "the slashed spelling finds the entry: %v", got)
		}},
		{file: "engine.system_sql_read.yaml", status: completed, check: func(t *testing.T, r run) {
			start := r.stepResult("start")
			rows, _ := start["rows"].([]any)
			require.Len(t, rows, 1, "%v", start)
			row, _ := rows[0].(map[string]any)
			require.EqualValues(t, 1, row["status"], "the execution reads itself running: %v", row)
			require.Equal(t, "system/conformance_sql_read", row["playbook_path"])
			require.GreaterOrEqual(t, row["events"], float64(2), "playbook.started and the step's command.issued at least: %v", row)
			capped := r.stepResult("capped")
			require.Equal(t, true, capped["truncated"], "%v", capped)
			require.EqualValues(t, 2, capped["row_count"], "%v", capped)
		}},
		{file: "engine.step_logs.yaml", status: completed, check: func(t *testing.T, r run) {
			require.EqualValues(t, 3, r.stepResult("say")["ticks"], "%v", r.stepResult("say"))
			code, page := r.api.do("GET", "/v1/executions/"+r.id+"/logs?step=say", nil)
			require.Equal(t, http.StatusOK, code, "%v", page)
			entries, _ := page["entries"].([]any)
			require.Len(t, entries, 2, "%v", page)
			out, _ := entries[0].(map[string]any)
			errs, _ := entries[1].(map[string]any)
			require.Equal(t, "stdout", out["stream"])
			require.Equal(t, "tick 1 of 3\ntick 2 of 3\ntick 3 of 3\n", out["text"])
			require.Equal(t, "say", out["step"])
			require.Equal(t, "stderr", errs["stream"])
			require.Equal(t, "nothing went wrong\n", errs["text"])
			_, page = r.api.do("GET", "/v1/executions/"+r.id+"/logs?step=end", nil)
			require.Empty(t, page["entries"], "a noop writes nothing")
		}},
		{file: "engine.wasm.yaml", status: completed, check: func(t *testing.T, r run) {
			require.Equal(t, map[string]any{"message": "Good morning, Grace!", "fresh": true, "counted": true}, r.stepResult("check"))
		}},
		{file: "engine.nats_kv.yaml", status: completed, check: func(t *testing.T, r run) {
			require.Equal(t, map[string]any{"text": "hello", "n": float64(1), "revision": float64(1), "other_found": false, "keys": []any{"greeting"}}, r.stepResult("check"))
		}},
		{file: "engine.nats_object.yaml", status: completed, check: func(t *testing.T, r run) {
			require.Equal(t, map[string]any{"report_intact": true, "blob": "AAEC/w==", "blob_encoding": "base64",
				"before": []any{"blob.bin", "report.csv"}, "after": []any{"report.csv"}}, r.stepResult("check"))
		}},
		{file: "engine.duckdb_query.yaml", status: completed, check: func(t *testing.T, r run) {
			start := r.stepResult("start")
			require.Equal(t, []any{"region", "manager", "orders", "items", "revenue"}, start["columns"], "%v", start)
			require.Equal(t, []any{
				map[string]any{"region": "north", "manager": "Edsger", "orders": 1.0, "items": 1.0, "revenue": 99.99},
				map[string]any{"region": "east", "manager": "Ada", "orders": 2.0, "items": 12.0, "revenue": 31.0},
				map[string]any{"region": "west", "manager": "Grace", "orders": 2.0, "items": 5.0, "revenue": 20.0},
			}, start["rows"], "%v", start)
			require.EqualValues(t, 3, start["statements"])
			big := r.step("big")
			ref, _ := big["resultRef"].(map[string]any)
			require.NotNil(t, ref, "the 20,000-row result travels by reference: %v", big)
			require.Nil(t, big["result"], "no inline copy of the large result")
			require.Equal(t, "application/vnd.apache.arrow.stream", ref["contentType"], "stored as Arrow: %v", ref)
			require.Equal(t, "20000", fmt.Sprint(ref["rowCount"]), "%v", ref)
		}},
		duckdbPostgresCase(),
		{file: "engine.shell_failure.yaml", status: "EXECUTION_STATUS_FAILED", check: func(t *testing.T, r run) {
			failed, _ := r.exec["failedSteps"].([]any)
			require.Equal(t, []any{"fail_loudly"}, failed)
			e, _ := r.exec["error"].(map[string]any)
			msg, _ := e["message"].(string)
			require.Contains(t, msg, "fail_loudly")
			require.Contains(t, msg, "exit code 4: disk on fire")
		}},
	}
}

// duckdbPostgresCase expects engine.duckdb_postgres to read the Postgres table through
// the attached credential: through DuckDB's postgres extension where it is installed,
// else (CI, which cannot download it) through the worker's own scanner.
func duckdbPostgresCase() expectation {
	return expectation{file: "engine.duckdb_postgres.yaml", status: "EXECUTION_STATUS_COMPLETED", check: func(t *testing.T, r run) {
		read := r.stepResult("read")
		require.Equal(t, []any{"tier", "rank", "accounts", "total", "over_90"}, read["columns"], "%v", read)
		require.Equal(t, []any{
			map[string]any{"tier": "gold", "rank": 1.0, "accounts": 2.0, "total": 1300.0, "over_90": 2.0},
			map[string]any{"tier": "silver", "rank": 2.0, "accounts": 1.0, "total": 80.0, "over_90": 2.0},
			map[string]any{"tier": "bronze", "rank": 3.0, "accounts": 1.0, "total": 5.0, "over_90": 2.0},
		}, read["rows"], "%v", read)
	}}
}

func TestConformance(t *testing.T) {
	dir := playbookDir(t)
	pg := testkit.StartPostgres(t)
	pgURL = pg
	natsURL := testkit.StartNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := mesh.Start(ctx, mesh.Config{StateDir: t.TempDir(), PostgresURL: pg, NATSURL: natsURL, WorkerConcurrency: 16, Shell: true,
		Worker: func(c *worker.Config) { c.ScriptDir = scriptDir(t) }})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	c := rest{t: t, base: "http://" + m.HTTPAddr, key: m.AdminKey}
	// Every credential the playbooks name points at the test Postgres.
	u, err := url.Parse(pg)
	require.NoError(t, err)
	// The suite's own API key, for playbooks that call the gateway's REST API (auth: noetl_api:
	// engine.batch_execute, engine.vars).
	code, resp := c.do("POST", "/v1/credentials", map[string]any{"name": "noetl_api", "type": "http_bearer", "data": map[string]any{"token": m.AdminKey}})
	require.Equal(t, http.StatusOK, code, "credential noetl_api: %v", resp)
	for _, name := range []string{"pg_local", "pg_k8s", "pg_noetl_k8s", "pg_test"} {
		code, resp := c.do("POST", "/v1/credentials", map[string]any{"name": name, "type": "postgres", "data": map[string]any{
			"host": u.Hostname(), "port": u.Port(), "user": u.User.Username(), "database": strings.TrimPrefix(u.Path, "/"), "sslmode": "disable",
		}})
		require.Equal(t, http.StatusOK, code, "credential %s: %v", name, resp)
	}

	// engine.nats_*: the suite's embedded NATS server, for kind: nats.
	code, resp = c.do("POST", "/v1/credentials", map[string]any{"name": "nats_local", "type": "nats", "data": map[string]any{"url": natsURL}})
	require.Equal(t, http.StatusOK, code, "credential nats_local: %v", resp)

	// engine.keychain: an OAuth2 client credential and the token server it is good for.
	tokens = startTokenServer(t)
	code, resp = c.do("POST", "/v1/credentials", map[string]any{"name": "kc_client", "type": "oauth2_client", "data": map[string]any{
		"client_id": "kc-client", "client_secret": "kc-client-secret-1",
	}})
	require.Equal(t, http.StatusOK, code, "credential kc_client: %v", resp)

	// engine.wasm: the sample plug-in, built from the repository and registered as
	// conformance/greeter, compressed as the CLI sends it.
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, err = zw.Write(testkit.BuildWasm(t, testkit.SamplePlugin, ""))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	code, resp = c.do("POST", "/v1/plugins", map[string]any{"path": "conformance/greeter", "module": z.Bytes()})
	require.Equal(t, http.StatusOK, code, "plug-in conformance/greeter: %v", resp)

	all := cases()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	known := map[string]bool{}
	for _, e := range all {
		known[e.file] = true
	}
	for _, f := range files {
		require.True(t, known[filepath.Base(f)], "playbook %s has no expectation in this suite", filepath.Base(f))
	}

	var mu sync.Mutex
	var lines []string
	passed, failed, skipped := 0, 0, 0
	for _, e := range all {
		name := strings.TrimSuffix(e.file, ".yaml")
		ok := t.Run(name, func(t *testing.T) {
			if e.unsupported != "" {
				mu.Lock()
				skipped++
				lines = append(lines, fmt.Sprintf("SKIP %s: not yet supported: %s", name, e.unsupported))
				mu.Unlock()
				t.Skipf("not yet supported: %s", e.unsupported)
			}
			src, err := os.ReadFile(filepath.Join(dir, e.file))
			require.NoError(t, err)
			cc := rest{t: t, base: c.base, key: c.key}
			code, reg := cc.do("POST", "/v1/playbooks", map[string]any{"content": string(src)})
			require.Equal(t, http.StatusOK, code, "register: %v", reg)
			pb, _ := reg["playbook"].(map[string]any)
			path, _ := pb["path"].(string)
			if e.registerOnly {
				return
			}
			workload := e.workload
			if workload["api_url"] == "GATEWAY" {
				workload = map[string]any{"api_url": c.base}
			}
			if workload["api"] == "TOKEN_SERVER" {
				workload = map[string]any{"api": tokens.URL}
			}
			r := cc.execute(path, workload)
			require.Equal(t, e.status, r.status, "execution %s: %v", r.id, r.exec["error"])
			if e.check != nil {
				e.check(t, r)
			}
		})
		if e.unsupported != "" {
			continue
		}
		mu.Lock()
		if ok {
			passed++
			lines = append(lines, "PASS "+name)
		} else {
			failed++
			lines = append(lines, "FAIL "+name)
		}
		mu.Unlock()
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println("conformance:", l)
	}
	fmt.Printf("conformance: %d passed, %d failed, %d skipped\n", passed, failed, skipped)
}

// tokenPrefix starts every token the suite's token server issues.
const tokenPrefix = "kc-token-"

// tokenServer is the suite's OAuth2 token endpoint (POST /token, client credentials of
// kc_client) and an API (GET /api) that accepts the tokens it issued, for engine.keychain.
type tokenServer struct {
	*httptest.Server
	requests atomic.Int32
	mu       sync.Mutex
	issued   map[string]bool
}

// tokens is the suite's token server (TestConformance starts it).
var tokens *tokenServer

func startTokenServer(t *testing.T) *tokenServer {
	ts := &tokenServer{issued: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", func(rw http.ResponseWriter, r *http.Request) {
		n := ts.requests.Add(1)
		if r.FormValue("grant_type") != "client_credentials" || r.FormValue("client_id") != "kc-client" || r.FormValue("client_secret") != "kc-client-secret-1" {
			http.Error(rw, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		tok := fmt.Sprintf("%s%d-abcdef", tokenPrefix, n)
		ts.mu.Lock()
		ts.issued[tok] = true
		ts.mu.Unlock()
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 3600})
	})
	mux.HandleFunc("GET /api", func(rw http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		ts.mu.Lock()
		ok := ts.issued[tok]
		ts.mu.Unlock()
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(map[string]any{"authorized": ok, "token": tok})
	})
	// engine.python_script's second script.
	mux.Handle("GET /scripts/", http.StripPrefix("/scripts/", http.FileServer(http.Dir(scriptDir(t)))))
	ts.Server = httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}

// scriptDir is the suite's script directory (conformance/scripts): the workers'
// NOETL_WORKER_SCRIPT_DIR, and what the suite's test server serves under /scripts/.
func scriptDir(t *testing.T) string {
	d, err := filepath.Abs("scripts")
	require.NoError(t, err)
	return d
}
