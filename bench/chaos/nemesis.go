package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Fault kinds: a kill -9 of one process of each kind (restarted after 1-20 s), a SIGSTOP
// pause longer than the target's ack wait or lease (then SIGCONT), and the restart of a
// whole group (SIGTERM to every member at once, down for 1-20 s, then started again).
const (
	faultKillGateway      = "kill-gateway"
	faultKillOrchestrator = "kill-orchestrator"
	faultKillMaterializer = "kill-materializer"
	faultKillStatebuilder = "kill-statebuilder"
	faultKillResultstore  = "kill-resultstore"
	faultKillWorker       = "kill-worker"
	faultKillNATS         = "kill-nats"
	faultKillPostgres     = "kill-postgres"
	faultPause            = "pause"
	faultRestartGroup     = "restart-group"
)

// faultKinds are every kind, each scheduled F/10 times (and the remainder at random).
var faultKinds = []string{
	faultKillGateway, faultKillOrchestrator, faultKillMaterializer, faultKillStatebuilder, faultKillResultstore,
	faultKillWorker, faultKillNATS, faultKillPostgres, faultPause, faultRestartGroup,
}

// Hold times of a pause: longer than what the target's peers wait for it. A worker's
// commands are redelivered after the worker consumer's 60 s ack wait, an orchestrator's
// notices after 30 s, a materializer's partitions are taken over after its 15 s lease.
var pauseBeyond = map[string]time.Duration{
	kindWorker:       60 * time.Second,
	kindOrchestrator: 30 * time.Second,
	kindMaterializer: 15 * time.Second,
}

// groups a restart-group fault may restart: every replica of a kind, the three NATS
// nodes, or every service process at once.
var groups = []string{kindOrchestrator, kindMaterializer, kindWorker, kindNATS, "services"}

// fault is one planned fault and, once run, what happened.
type fault struct {
	N       int           `json:"n"`
	Kind    string        `json:"kind"`
	Targets []string      `json:"targets"`
	Group   string        `json:"group,omitempty"`
	Gap     time.Duration `json:"-"` // before it starts
	Hold    time.Duration `json:"-"` // down (kill, restart) or stopped (pause)

	GapS   float64 `json:"gap_s"`
	HoldS  float64 `json:"hold_s"`
	StartS float64 `json:"start_s,omitempty"` // since the nemesis began
	HealS  float64 `json:"heal_s,omitempty"`  // healed: restarted and ready, or continued
	Err    string  `json:"error,omitempty"`

	start, healed time.Time
}

// checkKinds returns an error naming any unknown fault kind.
func checkKinds(kinds []string) error {
	for _, k := range kinds {
		known := false
		for _, f := range faultKinds {
			known = known || k == f
		}
		if !known {
			return fmt.Errorf("unknown fault kind %q (known: %s)", k, strings.Join(faultKinds, ", "))
		}
	}
	return nil
}

// plan is the fault schedule drawn from the seed: the same seed, the same faults. Each of
// the kinds (every kind when empty) is scheduled f/len(kinds) times, the remainder goes to
// distinct kinds at random, and the order is shuffled.
func plan(f int, rng *mrand.Rand, shared, system int, only []string) []*fault {
	all := faultKinds
	if len(only) > 0 {
		all = only
	}
	var kinds []string
	for range f / len(all) {
		kinds = append(kinds, all...)
	}
	rest := rng.Perm(len(all))
	for i := 0; len(kinds) < f; i++ {
		kinds = append(kinds, all[rest[i]])
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	var workers []string
	for i := range shared {
		workers = append(workers, fmt.Sprintf("worker-shared-%d", i))
	}
	for i := range system {
		workers = append(workers, fmt.Sprintf("worker-system-%d", i))
	}
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	down := func() time.Duration { return time.Duration(1000+rng.IntN(19001)) * time.Millisecond }
	var out []*fault
	for n, k := range kinds {
		ft := &fault{N: n + 1, Kind: k, Gap: time.Duration(1000+rng.IntN(2001)) * time.Millisecond}
		switch k {
		case faultKillGateway:
			ft.Targets = []string{"gateway-0"}
		case faultKillOrchestrator:
			ft.Targets = []string{pick([]string{"orchestrator-0", "orchestrator-1"})}
		case faultKillMaterializer:
			ft.Targets = []string{pick([]string{"materializer-0", "materializer-1"})}
		case faultKillStatebuilder:
			ft.Targets = []string{"statebuilder-0"}
		case faultKillResultstore:
			ft.Targets = []string{"resultstore-0"}
		case faultKillWorker:
			ft.Targets = []string{pick(workers)}
		case faultKillNATS:
			ft.Targets = []string{pick([]string{"nats-0", "nats-1", "nats-2"})}
		case faultKillPostgres:
			ft.Targets = []string{kindPostgres}
		case faultPause:
			candidates := append([]string{"orchestrator-0", "orchestrator-1", "materializer-0", "materializer-1"}, workers...)
			ft.Targets = []string{pick(candidates)}
		case faultRestartGroup:
			ft.Group = pick(groups)
		}
		switch k {
		case faultPause:
			kind := ft.Targets[0][:strings.Index(ft.Targets[0], "-")]
			ft.Hold = pauseBeyond[kind] + time.Duration(5000+rng.IntN(15001))*time.Millisecond
		default:
			ft.Hold = down()
		}
		ft.GapS, ft.HoldS = round2(ft.Gap.Seconds()), round2(ft.Hold.Seconds())
		out = append(out, ft)
	}
	return out
}

// plannedSpan estimates how long the schedule takes (pauses run beside later faults;
// each restart is taken to need 3 s): the load spreads its starts over it.
func plannedSpan(faults []*fault) time.Duration {
	var d time.Duration
	var tail time.Duration
	for _, f := range faults {
		d += f.Gap
		if f.Kind == faultPause {
			tail = max(tail-f.Gap, f.Hold)
			continue
		}
		tail = max(tail-f.Gap-f.Hold, 0)
		d += f.Hold + 3*time.Second
	}
	return d + tail
}

// nemesis runs a schedule against a cluster.
type nemesis struct {
	c      *cluster
	faults []*fault
	logf   func(format string, args ...any)

	mu    sync.Mutex
	held  map[string]bool // targets under a running pause
	freed *sync.Cond
	t0    time.Time
}

// run runs every fault in order (a pause goes on beside the faults after it; a fault
// whose target is paused waits for the pause to end) and returns once every fault has
// healed.
func (n *nemesis) run(ctx context.Context) {
	n.held = map[string]bool{}
	n.freed = sync.NewCond(&n.mu)
	n.t0 = time.Now()
	var bg sync.WaitGroup
	for _, f := range n.faults {
		pause(ctx, f.Gap)
		if ctx.Err() != nil {
			break
		}
		targets := n.targetsOf(f)
		n.mu.Lock()
		for anyHeld(n.held, targets) {
			n.freed.Wait()
		}
		n.mu.Unlock()
		f.start = time.Now()
		f.StartS = round2(f.start.Sub(n.t0).Seconds())
		n.logf("fault %d/%d %s %s for %.1fs", f.N, len(n.faults), f.Kind, strings.Join(targets, ","), f.Hold.Seconds())
		if f.Kind == faultPause {
			n.mu.Lock()
			for _, t := range targets {
				n.held[t] = true
			}
			n.mu.Unlock()
			bg.Add(1)
			go func() {
				defer bg.Done()
				n.pauseFault(ctx, f)
				n.mu.Lock()
				for _, t := range targets {
					delete(n.held, t)
				}
				n.freed.Broadcast()
				n.mu.Unlock()
			}()
			continue
		}
		n.runFault(ctx, f, targets)
	}
	bg.Wait()
}

func anyHeld(held map[string]bool, targets []string) bool {
	for _, t := range targets {
		if held[t] {
			return true
		}
	}
	return false
}

// targetsOf is the process names a fault acts on.
func (n *nemesis) targetsOf(f *fault) []string {
	if f.Kind != faultRestartGroup {
		return f.Targets
	}
	kind := f.Group
	if kind == "services" {
		kind = ""
	}
	var out []string
	for _, p := range n.c.procs(kind) {
		if f.Group == "services" && p.kind == kindNATS {
			continue
		}
		out = append(out, p.name)
	}
	sort.Strings(out)
	f.Targets = out
	return out
}

func (n *nemesis) proc(name string) *proc {
	for _, p := range n.c.procs("") {
		if p.name == name {
			return p
		}
	}
	return nil
}

func (n *nemesis) healed(f *fault, err error) {
	f.healed = time.Now()
	f.HealS = round2(f.healed.Sub(n.t0).Seconds())
	if err != nil {
		f.Err = err.Error()
		n.logf("fault %d %s: %v", f.N, f.Kind, err)
	}
}

func (n *nemesis) pauseFault(ctx context.Context, f *fault) {
	p := n.proc(f.Targets[0])
	if err := p.signal(syscall.SIGSTOP); err != nil {
		n.healed(f, err)
		return
	}
	pause(ctx, f.Hold)
	n.healed(f, p.signal(syscall.SIGCONT))
}

func (n *nemesis) runFault(ctx context.Context, f *fault, targets []string) {
	if f.Kind == faultKillPostgres {
		if err := n.c.killPostgres(ctx); err != nil {
			n.healed(f, err)
			return
		}
		pause(ctx, f.Hold)
		n.healed(f, n.c.restartPostgres(ctx))
		return
	}
	var ps []*proc
	for _, t := range targets {
		ps = append(ps, n.proc(t))
	}
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if f.Kind == faultRestartGroup {
				p.terminate(stopTimeout)
			} else {
				p.kill()
			}
		}()
	}
	wg.Wait()
	pause(ctx, f.Hold)
	errs := make([]error, len(ps))
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.startReady(ctx, readyTimeout)
		}()
	}
	wg.Wait()
	var msgs []string
	for _, err := range errs {
		if err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	if len(msgs) > 0 {
		n.healed(f, fmt.Errorf("%s", strings.Join(msgs, "; ")))
		return
	}
	n.healed(f, nil)
}

// summary is the faults by kind: count, total hold, errors.
func (n *nemesis) summary() map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, f := range n.faults {
		s := out[f.Kind]
		if s == nil {
			s = map[string]any{"count": 0, "hold_s": 0.0, "errors": 0, "targets": []string{}}
			out[f.Kind] = s
		}
		s["count"] = s["count"].(int) + 1
		s["hold_s"] = round2(s["hold_s"].(float64) + f.Hold.Seconds())
		if f.Err != "" {
			s["errors"] = s["errors"].(int) + 1
		}
		name := strings.Join(f.Targets, "+")
		if f.Group != "" {
			name = f.Group
		}
		s["targets"] = append(s["targets"].([]string), name)
	}
	return out
}

func round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }

// faultLine is one line of faults.jsonl: a fault, with when it began and healed on the
// clock of history.jsonl (its "t", seconds since the load began) and on the wall clock,
// so a failed run's operations, faults and service logs read side by side.
type faultLine struct {
	*fault
	T      float64 `json:"t"`
	THeal  float64 `json:"t_heal,omitempty"`
	At     string  `json:"at"`
	HealAt string  `json:"heal_at,omitempty"`
}

// writeFaults writes the faults that ran to path, one JSON line each, with times measured
// from t0 (the history's start); a fault that never started is left out.
func writeFaults(path string, faults []*fault, t0 time.Time) error {
	var b []byte
	for _, f := range faults {
		if f.start.IsZero() {
			continue
		}
		l := faultLine{fault: f, T: round2(f.start.Sub(t0).Seconds()), At: f.start.UTC().Format(time.RFC3339Nano)}
		if !f.healed.IsZero() {
			l.THeal, l.HealAt = round2(f.healed.Sub(t0).Seconds()), f.healed.UTC().Format(time.RFC3339Nano)
		}
		line, err := json.Marshal(l)
		if err != nil {
			return err
		}
		b = append(append(b, line...), '\n')
	}
	return os.WriteFile(path, b, 0o644)
}
