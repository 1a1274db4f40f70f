package chaos

import (
	"encoding/json"
	"fmt"
)

// The playbooks of the load, registered in every tenant's catalog. Every command runs
// exactly one effect probe: a postgres tool that inserts (command_id, attempt) into
// effects (one row per run) and command_id into effect_once (ON CONFLICT DO NOTHING).
// The identity is the engine's command id ({{ command_id }}); attempt is the probe's run
// number inside its command ({{ _attempt }}); a delayed retry of a single-tool step is a
// new command (a new id) issued after a durable timer. Pipelines add one tool that is not
// a probe (the failing check, the http call to the echo server, the sub-playbook call,
// system_info).
const (
	pbLinear = "chaos/linear" // 5 steps in a chain
	pbFanout = "chaos/fanout" // 1 -> a parallel loop of 20 -> 1
	pbRetry  = "chaos/retry"  // a step whose second tool fails at runs 1 and 2 of 3
	pbTimer  = "chaos/timer"  // a delayed retry waiting on a durable timer (5-30 s)
	pbBig    = "chaos/big"    // a 3 MiB result by reference, read back by the next step
	pbParent = "chaos/parent" // calls chaos/child and waits for its result
	pbChild  = "chaos/child"
	pbSystem = "system/chaos" // runs on the system pool (with system_info)
	pbSecret = "chaos/secret" // sends the sentinel token credential to the echo server
)

// loadPlaybooks are the playbooks the load starts, in mix order; pbChild is started by
// pbParent only.
var loadPlaybooks = []string{pbLinear, pbFanout, pbRetry, pbTimer, pbBig, pbParent, pbSystem, pbSecret}

// mixWeights are the relative frequencies of loadPlaybooks.
var mixWeights = []int{20, 15, 15, 10, 10, 10, 10, 10}

// bigRepeat makes the big step's blob repeat(md5(command_id), bigRepeat): 3 MiB.
const bigRepeat = 98304

// bigBytes is the blob's length.
const bigBytes = 32 * bigRepeat

// probeSQL is the effect probe: one statement (params bound, so nothing is spliced into
// the text). $1 command id, $2 attempt, $3 execution id, $4 step, $5 loop index (-1
// outside loops), $6 tenant (from the workload), $7 a note. ready says whether another
// command of the same execution and step ran the probe before (the timer playbook waits
// on it).
const probeSQL = `WITH e AS (INSERT INTO effects (command_id, attempt, execution_id, step, idx, tenant, note) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING 1),
o AS (INSERT INTO effect_once (command_id, execution_id, step, idx, tenant) VALUES ($1, $3, $4, $5, $6) ON CONFLICT DO NOTHING RETURNING 1)
SELECT (SELECT count(*) FROM e) AS runs, (SELECT count(*) FROM o) AS first,
  EXISTS (SELECT 1 FROM effects WHERE execution_id = $3 AND step = $4 AND command_id <> $1) AS ready`

// bigSQL is the probe returning a 3 MiB blob derived from the command id.
var bigSQL = `WITH e AS (INSERT INTO effects (command_id, attempt, execution_id, step, idx, tenant, note) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING 1),
o AS (INSERT INTO effect_once (command_id, execution_id, step, idx, tenant) VALUES ($1, $3, $4, $5, $6) ON CONFLICT DO NOTHING RETURNING 1)
SELECT (SELECT count(*) FROM e) AS runs, repeat(md5($1), ` + fmt.Sprint(bigRepeat) + `) AS blob`

// retryOnError retries a retryable failure (Postgres down, a connection refused) with
// exponential backoff: 1, 2, 4, ... s. For a single-tool step outside a loop each retry
// is a new command after a durable timer; elsewhere the worker waits.
func retryOnError() map[string]any {
	return map[string]any{"when": "{{ output.status == 'error' and output.error.retryable }}",
		"then": map[string]any{"do": "retry", "attempts": 8, "delay": 1, "backoff": "exponential"}}
}

func policy(rules ...map[string]any) map[string]any {
	return map[string]any{"policy": map[string]any{"rules": rules}}
}

// probe is the probe tool of a step; note is a template recorded in effects.note.
func probe(step, note string) map[string]any {
	return probeWith(step, note, probeSQL, policy(retryOnError()))
}

func probeWith(step, note, sql string, spec map[string]any) map[string]any {
	return map[string]any{
		"kind": "postgres", "auth": "chaos_pg", "command": sql,
		"params": []any{"{{ command_id }}", "{{ _attempt }}", "{{ execution_id }}", step, "{{ _index | default(-1) }}", "{{ workload.tenant }}", note},
		"spec":   spec,
	}
}

// named labels a pipeline tool.
func named(name string, tool map[string]any) map[string]any {
	out := map[string]any{"name": name}
	for k, v := range tool {
		out[k] = v
	}
	return out
}

func step(name string, tool any, next ...string) map[string]any {
	s := map[string]any{"step": name, "tool": tool}
	if len(next) > 0 {
		var arcs []any
		for _, n := range next {
			arcs = append(arcs, map[string]any{"step": n})
		}
		s["next"] = map[string]any{"arcs": arcs}
	}
	return s
}

// playbookDoc is a playbook document as JSON text (YAML's flow style).
func playbookDoc(path string, workload map[string]any, steps ...map[string]any) string {
	doc := map[string]any{
		"apiVersion": "noetl.io/v2",
		"kind":       "Playbook",
		"metadata":   map[string]any{"name": path, "path": path},
		"workload":   workload,
		"workflow":   steps,
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic(err) // maps of strings, numbers and lists
	}
	return string(b)
}

// tenantPlaybooks are the documents one tenant registers: child first (the parent names
// it). timerDelay is the timer playbook's delay in seconds; echoURL the echo server.
func tenantPlaybooks(tenant string, timerDelay int, echoURL string) []string {
	wl := map[string]any{"tenant": tenant, "echo": echoURL}
	linear := playbookDoc(pbLinear, wl,
		step("start", probe("start", ""), "s2"),
		step("s2", probe("s2", ""), "s3"),
		step("s3", probe("s3", ""), "s4"),
		step("s4", probe("s4", ""), "end"),
		step("end", probe("end", "")),
	)
	fan := step("fan", probe("fan", ""), "end")
	fan["loop"] = map[string]any{"in": "{{ range(20) | list }}", "iterator": "i", "spec": map[string]any{"mode": "parallel", "max_in_flight": 20}}
	fanout := playbookDoc(pbFanout, wl,
		step("start", probe("start", ""), "fan"),
		fan,
		step("end", probe("end", "")),
	)
	// The check fails with division by zero at its runs 1 and 2 (1/(1/3), 1/(2/3)) and
	// passes at run 3; the policy retries it in the same command (0.5 s, then 1 s; the
	// later runs wait out an outage: 2, 4, ... s).
	flaky := map[string]any{
		"kind": "postgres", "auth": "chaos_pg", "command": "SELECT 1 / ($1::int / 3) AS ok", "params": []any{"{{ _attempt }}"},
		"spec": policy(map[string]any{"when": "{{ output.status == 'error' }}", "then": map[string]any{"do": "retry", "attempts": 10, "delay": 0.5, "backoff": "exponential"}}),
	}
	retry := playbookDoc(pbRetry, wl,
		step("start", probe("start", ""), "flaky"),
		step("flaky", []any{named("probe", probe("flaky", "")), named("check", flaky)}, "end"),
		step("end", probe("end", "")),
	)
	// The first command of wait finds no earlier probe of its step (ready false) and asks
	// for a retry after timerDelay seconds: a durable timer, then a new command.
	wait := probeWith("wait", "", probeSQL, policy(retryOnError(),
		map[string]any{"when": "{{ output.status == 'ok' and not output.data.rows[0].ready }}",
			"then": map[string]any{"do": "retry", "attempts": 10, "delay": timerDelay}}))
	timer := playbookDoc(pbTimer, wl,
		step("start", probe("start", ""), "wait"),
		step("wait", wait, "end"),
		step("end", probe("end", "")),
	)
	bigStep := step("big", probeWith("big", "", bigSQL, policy(retryOnError())), "end")
	bigStep["output"] = map[string]any{"output_select": []any{"row_count"}}
	big := playbookDoc(pbBig, wl,
		step("start", probe("start", ""), "big"),
		bigStep,
		// Reading the blob's length makes the worker load the stored payload.
		step("end", probe("end", "{{ big.rows[0].blob | length | string }}")),
	)
	child := playbookDoc(pbChild, wl,
		step("start", probe("start", ""), "end"),
		step("end", probe("end", "")),
	)
	call := map[string]any{"kind": "playbook", "path": pbChild, "return_result": true, "timeout": 600,
		"input": map[string]any{"tenant": "{{ workload.tenant }}"}, "spec": policy(retryOnError())}
	parent := playbookDoc(pbParent, wl,
		step("start", probe("start", ""), "call"),
		step("call", []any{named("probe", probe("call", "")), named("child", call)}, "end"),
		step("end", probe("end", "")),
	)
	system := playbookDoc(pbSystem, wl,
		step("start", []any{named("probe", probe("start", "")), named("info", map[string]any{"kind": "system_info"})}, "end"),
		step("end", probe("end", "")),
	)
	echo := map[string]any{"kind": "http", "method": "GET", "url": "{{ workload.echo }}/echo", "auth": "chaos_token", "timeout_seconds": 10,
		"spec": policy(map[string]any{"when": "{{ output.status == 'error' }}", "then": map[string]any{"do": "retry", "attempts": 8, "delay": 1, "backoff": "exponential"}})}
	secret := playbookDoc(pbSecret, wl,
		step("start", []any{named("echo", echo), named("probe", probe("start", ""))}, "end"),
		step("end", probe("end", "")),
	)
	return []string{child, linear, fanout, retry, timer, big, parent, system, secret}
}
