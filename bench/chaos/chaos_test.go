//go:build chaos

package chaos

import (
	"context"
	"flag"
	"os"
	"strings"
	"testing"
	"time"
)

var (
	executions = flag.Int("executions", 100, "executions of the load")
	faults     = flag.Int("faults", 10, "faults of the nemesis (10 covers every kind once)")
	seed       = flag.Uint64("seed", 1, "seed of the fault schedule and the load (0: a random one, printed)")
	dir        = flag.String("dir", "", "run directory (default: a temporary one, kept when the run fails)")
	drain      = flag.Duration("drain", 10*time.Minute, "bound of the drain after the last fault healed")
	kinds      = flag.String("kinds", "", "comma-separated fault kinds to restrict the nemesis to (default: all ten)")
	pgFast     = flag.Bool("pg-fast", false, "run Postgres without fsync and synchronous_commit")
	rev        = flag.String("rev", "", "build the services from this git revision instead of the working tree")
)

// TestChaos is the short chaos run of CI (go test -tags chaos ./bench/chaos): 100
// executions, 10 faults (one of each kind), seed 1. It fails when the checker does.
func TestChaos(t *testing.T) {
	var only []string
	if *kinds != "" {
		only = strings.Split(*kinds, ",")
	}
	res, err := Run(context.Background(), Options{
		Executions: *executions, Faults: *faults, Seed: *seed, Dir: *dir, Drain: *drain, Kinds: only, PGFast: *pgFast, Rev: *rev,
		Out: os.Stdout, Err: os.Stderr,
	})
	if err != nil {
		t.Fatalf("seed %d: %v", res.Seed, err)
	}
}
