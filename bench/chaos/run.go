package chaos

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Options configures a chaos run.
type Options struct {
	// Executions is how many executions the load starts (default 1,000).
	Executions int
	// Faults is how many faults the nemesis injects (bench's --faults defaults to 50; zero
	// runs the load without faults).
	Faults int
	// Seed draws the fault schedule and the load's mix; zero draws a seed, which is
	// printed either way.
	Seed uint64
	// Kinds restricts the faults to these kinds (all ten when empty), to reproduce one.
	Kinds []string
	// Tenants is how many tenants start executions (default 10).
	Tenants int
	// InFlight bounds the executions between their first start call and their terminal
	// status (default 50).
	InFlight int
	// Drain bounds the wait, after the last fault healed, for every execution to end and
	// every consumer to catch up (default 10 minutes).
	Drain time.Duration
	// Dir is the run directory (data, logs, history.jsonl, faults.jsonl); empty makes a
	// temporary one, removed after a passing run unless Keep.
	Dir  string
	Keep bool
	// Rev builds the services from this git revision instead of the working tree.
	Rev string
	// PGFast runs Postgres without fsync and synchronous_commit (noetl dev's fast mode).
	PGFast bool
	// Out receives one JSON line per phase, criterion and the final result; Err the
	// human-readable progress and checker lines.
	Out, Err io.Writer
}

func (o *Options) defaults() {
	if o.Executions <= 0 {
		o.Executions = 1000
	}
	if o.Faults < 0 {
		o.Faults = 0
	}
	if o.Tenants <= 0 {
		o.Tenants = 10
	}
	if o.InFlight <= 0 {
		o.InFlight = 50
	}
	if o.Drain <= 0 {
		o.Drain = 10 * time.Minute
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Err == nil {
		o.Err = os.Stderr
	}
	if o.Seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.Seed = binary.LittleEndian.Uint64(b[:]) >> 1
		if o.Seed == 0 {
			o.Seed = 1
		}
	}
}

// Result is a run's verdict: the final line's counts.
type Result struct {
	Seed                         uint64
	Lost, Duplicated, Unexpected int
	// Problems are failures outside the three counts: a drain that timed out, a fault
	// that did not heal, resources grossly off their baseline.
	Problems []string
}

// Passed reports whether the checker found nothing.
func (r Result) Passed() bool {
	return r.Lost == 0 && r.Duplicated == 0 && r.Unexpected == 0 && len(r.Problems) == 0
}

// ErrFailed is returned by Run when the checker found a violation.
var ErrFailed = errors.New("chaos: the checker failed")

// Run starts the cluster, runs the load under the nemesis, drains, checks and stops
// everything. It returns ErrFailed (wrapped) when a criterion failed.
func Run(ctx context.Context, o Options) (res Result, err error) {
	o.defaults()
	res.Seed = o.Seed
	// An interrupt stops every process before returning.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	wall := time.Now()
	r := &reporter{out: o.Out, err: o.Err, seed: o.Seed}
	replay := fmt.Sprintf("--seed %d --executions %d --faults %d", o.Seed, o.Executions, o.Faults)
	if len(o.Kinds) > 0 {
		replay += " --chaos-kinds " + strings.Join(o.Kinds, ",")
	}
	if o.PGFast {
		replay += " --chaos-pg-fast"
	}
	r.logf("seed %d (replay: %s)", o.Seed, replay)

	dir := o.Dir
	temp := dir == ""
	if temp {
		if dir, err = os.MkdirTemp("", "noetl-chaos-"); err != nil {
			return res, err
		}
	} else if err = os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	// The private Postgres runs as the postgres user when we are root.
	if err = os.Chmod(dir, 0o755); err != nil {
		return res, err
	}
	defer func() {
		if temp && !o.Keep && err == nil && res.Passed() {
			_ = os.RemoveAll(dir)
			return
		}
		r.logf("run directory kept: %s (logs/, history.jsonl, faults.jsonl)", dir)
	}()
	r.logf("run directory %s", dir)

	rngFaults := mrand.New(mrand.NewPCG(o.Seed, 1))
	rngLoad := mrand.New(mrand.NewPCG(o.Seed, 2))
	const shared, system = 2, 1
	if err = checkKinds(o.Kinds); err != nil {
		return res, err
	}
	faults := plan(o.Faults, rngFaults, shared, system, o.Kinds)
	for _, f := range faults {
		r.json(map[string]any{"phase": "plan", "fault": f})
	}

	// Setup.
	t0 := time.Now()
	c, err := startCluster(ctx, clusterOptions{Dir: dir, Rev: o.Rev, PGFast: o.PGFast, Shared: shared, System: system, WorkerConcurrency: 32, Logf: r.logf})
	if err != nil {
		return res, err
	}
	defer c.stop()
	sentinelBytes := make([]byte, 12)
	_, _ = rand.Read(sentinelBytes)
	sentinel := "SENTINEL-SECRET-" + hex.EncodeToString(sentinelBytes)
	echo, err := newEchoServer(sentinel)
	if err != nil {
		return res, err
	}
	defer echo.Close()
	tenants, err := setupTenants(ctx, c, o.Tenants, sentinel, echo.URL(), rngLoad, 2*time.Minute)
	defer closeTenants(tenants)
	if err != nil {
		return res, err
	}
	byName := map[string]*tenant{}
	for _, t := range tenants {
		byName[t.name] = t
	}
	db, err := pgxpool.New(ctx, c.noetlURL)
	if err != nil {
		return res, err
	}
	defer db.Close()
	effects, err := pgxpool.New(ctx, c.chaosURL)
	if err != nil {
		return res, err
	}
	defer effects.Close()
	nc, js, err := connectNATS(c.natsURL)
	if err != nil {
		return res, err
	}
	defer nc.Close()
	baseline := measureAll(c)
	r.json(map[string]any{"phase": "setup", "setup_s": round2(time.Since(t0).Seconds()), "processes": len(c.procs("")) + 1,
		"tenants": len(tenants), "playbooks": len(loadPlaybooks) + 1, "nats": c.natsURL, "postgres_fast": o.PGFast,
		"run_dir": dir, "baseline": baseline})

	// Load under the nemesis.
	hist, err := newHistory(filepath.Join(dir, "history.jsonl"), time.Now())
	if err != nil {
		return res, err
	}
	defer hist.close()
	recs := planLoad(o.Executions, tenants, o.Seed, rngLoad)
	span := plannedSpan(faults)
	if span < 30*time.Second {
		span = 30 * time.Second
	}
	ld := &load{recs: recs, hist: hist, inFlight: o.InFlight, span: span}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadDone := make(chan struct{})
	loadStart := time.Now()
	go func() { ld.run(loadCtx); close(loadDone) }()
	r.logf("load: %d executions from %d tenants, at most %d in flight, starts spread over %s", o.Executions, len(tenants), o.InFlight, span.Round(time.Second))
	nm := &nemesis{c: c, faults: faults, logf: r.logf}
	nm.run(ctx)
	healed := time.Now()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	for _, f := range faults {
		r.json(map[string]any{"phase": "fault", "fault": f})
	}
	if err := writeFaults(filepath.Join(dir, "faults.jsonl"), faults, hist.t0); err != nil {
		res.Problems = append(res.Problems, fmt.Sprintf("write faults.jsonl: %v", err))
	}
	for kind, s := range nm.summary() {
		r.json(map[string]any{"phase": "faults", "kind": kind, "count": s["count"], "hold_s": s["hold_s"], "errors": s["errors"], "targets": s["targets"]})
	}
	for _, f := range faults {
		if f.Err != "" {
			res.Problems = append(res.Problems, fmt.Sprintf("fault %d %s did not heal cleanly: %s", f.N, f.Kind, f.Err))
		}
	}

	// Drain: wait for every execution to end and every consumer to catch up.
	r.logf("drain: up to %s", o.Drain)
	var last backlog
	drainErr := waitFor(ctx, o.Drain, time.Second, func() error {
		busy := int(ld.active.Load())
		select {
		case <-loadDone:
		default:
			busy = max(busy, 1)
		}
		b, err := measureBacklog(ctx, db, js, busy)
		if err != nil {
			return err
		}
		last = b
		if !b.zero() {
			return fmt.Errorf("backlog %s", b)
		}
		return nil
	})
	drain := time.Since(healed)
	stopLoad()
	<-loadDone
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if drainErr != nil {
		res.Problems = append(res.Problems, fmt.Sprintf("drain did not finish in %s: %v", o.Drain, drainErr))
	}
	loadSummary := summarizeLoad(recs)
	r.json(map[string]any{"phase": "load", "load_s": round2(healed.Sub(loadStart).Seconds()), "executions": o.Executions, "ops": hist.counts(), "summary": loadSummary})
	r.json(map[string]any{"phase": "drain", "drain_s": round2(drain.Seconds()), "done": drainErr == nil, "backlog": last.String()})
	r.logf("drain: %.1fs (%s)", drain.Seconds(), last)

	// Resources after the drain, against the baseline.
	end := measureAll(c)
	res.Problems = append(res.Problems, r.resources(baseline, end)...)

	// Checker.
	k := &checker{c: c, recs: recs, tenants: byName, faults: faults, sentinel: sentinel, echo: echo, db: db, effects: effects, js: js}
	crit, err := k.run(ctx)
	if err != nil {
		return res, fmt.Errorf("checker: %w", err)
	}
	factor := 0.0
	for _, cr := range crit {
		r.criterion(cr)
		switch cr.Class {
		case classLost:
			res.Lost += cr.Failed
		case classDuplicated:
			res.Duplicated += cr.Failed
		case classUnexpected:
			res.Unexpected += cr.Failed
		}
		if cr.Name == "duplication_factor" {
			factor, _ = cr.Detail["factor"].(float64)
		}
	}
	for _, p := range res.Problems {
		r.logf("PROBLEM %s", p)
	}
	r.json(map[string]any{"phase": "final", "seed": o.Seed, "executions": o.Executions, "faults": len(faults),
		"lost": res.Lost, "duplicated": res.Duplicated, "unexpected": res.Unexpected, "duplication_factor": factor,
		"drain_s": round2(drain.Seconds()), "wall_s": round2(time.Since(wall).Seconds()), "problems": res.Problems, "pass": res.Passed()})
	fmt.Fprintf(o.Err, "lost=%d duplicated=%d unexpected=%d\n", res.Lost, res.Duplicated, res.Unexpected)
	if !res.Passed() {
		return res, fmt.Errorf("%w: lost=%d duplicated=%d unexpected=%d, %d other problems (seed %d)", ErrFailed, res.Lost, res.Duplicated, res.Unexpected, len(res.Problems), o.Seed)
	}
	return res, nil
}

// summarizeLoad counts the load's executions by how the client saw them end.
func summarizeLoad(recs []*execRec) map[string]any {
	ends := map[string]int{}
	var acked, gaveUp, starts, infos, fails int
	for _, r := range recs {
		r.mu.Lock()
		if !r.ackAt.IsZero() {
			acked++
		}
		if r.gaveUp {
			gaveUp++
		}
		for _, a := range r.attempts {
			starts++
			switch a.typ {
			case "info":
				infos++
			case "fail":
				fails++
			}
		}
		if r.status != 0 {
			ends[strings.TrimPrefix(r.status.String(), "EXECUTION_STATUS_")]++
		}
		r.mu.Unlock()
	}
	return map[string]any{"acknowledged": acked, "gave_up": gaveUp, "start_calls": starts, "start_info": infos, "start_fail": fails, "ends_seen_by_client": ends}
}

// reporter writes the JSON lines and the human-readable lines.
type reporter struct {
	out, err io.Writer
	seed     uint64
	t0       time.Time
}

func (r *reporter) logf(format string, args ...any) {
	if r.t0.IsZero() {
		r.t0 = time.Now()
	}
	fmt.Fprintf(r.err, "chaos %7.1fs: %s\n", time.Since(r.t0).Seconds(), fmt.Sprintf(format, args...))
}

func (r *reporter) json(m map[string]any) {
	m["workload"] = "chaos"
	m["seed"] = r.seed
	b, err := json.Marshal(m)
	if err != nil {
		b = []byte(fmt.Sprintf(`{"workload":"chaos","error":%q}`, err.Error()))
	}
	_, _ = fmt.Fprintf(r.out, "%s\n", b)
}

// criterion prints one criterion: a JSON line, and PASS/FAIL/INFO with its counts and
// examples on stderr.
func (r *reporter) criterion(c *criterion) {
	r.json(map[string]any{"phase": "checker", "criterion": c.Name, "class": c.Class, "checked": c.Checked, "failed": c.Failed, "examples": c.Examples, "detail": c.Detail})
	verdict := "PASS"
	switch {
	case c.Class == classInfo:
		verdict = "INFO"
	case c.Failed > 0:
		verdict = "FAIL"
	}
	line := fmt.Sprintf("%s %s (%s): %d checked, %d failed", verdict, c.Name, c.Class, c.Checked, c.Failed)
	if len(c.Detail) > 0 {
		keys := make([]string, 0, len(c.Detail))
		for k := range c.Detail {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			b, _ := json.Marshal(c.Detail[k])
			parts = append(parts, k+"="+string(b))
		}
		line += "; " + strings.Join(parts, " ")
	}
	fmt.Fprintln(r.err, line)
	if c.What != "" {
		fmt.Fprintf(r.err, "     %s\n", c.What)
	}
	for _, e := range c.Examples {
		fmt.Fprintf(r.err, "     e.g. %s\n", e)
	}
}

// resources reports every process's RSS, threads, open files and goroutines at the
// baseline and after the drain, and returns a problem for each grossly off its baseline
// (over 4 times and over an absolute margin).
func (r *reporter) resources(base, end map[string]usage) []string {
	names := make([]string, 0, len(end))
	for n := range end {
		names = append(names, n)
	}
	sort.Strings(names)
	var problems []string
	by := map[string]any{}
	for _, n := range names {
		b, e := base[n], end[n]
		by[n] = map[string]any{"baseline": b, "after_drain": e}
		gross := func(what string, from, to, margin float64) {
			if from > 0 && to > 4*from && to-from > margin {
				problems = append(problems, fmt.Sprintf("%s: %s %.0f after the drain against %.0f at the baseline", n, what, to, from))
			}
		}
		gross("RSS MB", b.RSSMB, e.RSSMB, 256)
		gross("goroutines", float64(b.Goroutines), float64(e.Goroutines), 1000)
		gross("open files", float64(b.FDs), float64(e.FDs), 500)
		fmt.Fprintf(r.err, "resources %-18s rss %6.1f -> %6.1f MB  threads %3d -> %3d  fds %4d -> %4d  goroutines %5d -> %5d\n",
			n, b.RSSMB, e.RSSMB, b.Threads, e.Threads, b.FDs, e.FDs, b.Goroutines, e.Goroutines)
	}
	r.json(map[string]any{"phase": "resources", "by_process": by, "grossly_off": problems})
	return problems
}
