package main

import (
	"context"
	"flag"
	"strings"
	"time"

	"github.com/noetl/noetl/bench/chaos"
)

// chaosOptions are the flags of the chaos workload, read after flag.Parse.
type chaosOptions struct {
	faults            *int
	seed              *uint64
	tenants, inFlight *int
	drain             *time.Duration
	dir, kinds, rev   *string
	keep, pgFast      *bool
}

// chaosFlags declares the chaos workload's flags (--executions is shared with the
// concurrent workload).
func chaosFlags() chaosOptions {
	return chaosOptions{
		faults:   flag.Int("faults", 50, "chaos: faults the nemesis injects (each of the ten kinds faults/10 times)"),
		seed:     flag.Uint64("seed", 0, "chaos: seed of the fault schedule and the load's mix (0: draw one; it is printed)"),
		tenants:  flag.Int("chaos-tenants", 10, "chaos: tenants starting executions"),
		inFlight: flag.Int("chaos-inflight", 50, "chaos: most executions in flight"),
		drain:    flag.Duration("chaos-drain", 10*time.Minute, "chaos: bound of the drain after the last fault healed"),
		dir:      flag.String("chaos-dir", "", "chaos: run directory (data, logs, history.jsonl, faults.jsonl; default a temporary one, kept unless the run passes)"),
		kinds:    flag.String("chaos-kinds", "", "chaos: comma-separated fault kinds to restrict the nemesis to (kill-gateway, kill-orchestrator, kill-materializer, kill-statebuilder, kill-resultstore, kill-worker, kill-nats, kill-postgres, pause, restart-group)"),
		rev:      flag.String("chaos-rev", "", "chaos: build the services from this git revision instead of the working tree"),
		keep:     flag.Bool("chaos-keep", false, "chaos: keep the run directory of a passing run"),
		pgFast:   flag.Bool("chaos-pg-fast", false, "chaos: run Postgres without fsync and synchronous_commit (noetl dev's fast mode)"),
	}
}

// runChaos runs the chaos harness with executions executions when --executions was given
// (the harness's default, 1,000, otherwise); it fails when the checker does.
func runChaos(ctx context.Context, o chaosOptions, executions int) error {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "executions" })
	if !given {
		executions = 0
	}
	var kinds []string
	if *o.kinds != "" {
		kinds = strings.Split(*o.kinds, ",")
	}
	_, err := chaos.Run(ctx, chaos.Options{
		Executions: executions, Faults: *o.faults, Seed: *o.seed, Kinds: kinds, Tenants: *o.tenants, InFlight: *o.inFlight,
		Drain: *o.drain, Dir: *o.dir, Keep: *o.keep, Rev: *o.rev, PGFast: *o.pgFast,
	})
	return err
}
