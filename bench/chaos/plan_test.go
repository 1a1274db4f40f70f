package chaos

import (
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// The schedule is a function of the seed, and covers every kind F/10 times.
func TestPlanIsReplayableAndCoversEveryKind(t *testing.T) {
	for _, f := range []int{10, 50, 13} {
		a := plan(f, mrand.New(mrand.NewPCG(42, 1)), 2, 1, nil)
		b := plan(f, mrand.New(mrand.NewPCG(42, 1)), 2, 1, nil)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("F=%d: two plans from one seed differ", f)
		}
		if len(a) != f {
			t.Fatalf("F=%d: %d faults", f, len(a))
		}
		count := map[string]int{}
		for _, ft := range a {
			count[ft.Kind]++
			if ft.Hold <= 0 || ft.Gap <= 0 {
				t.Fatalf("fault %+v: no hold or gap", ft)
			}
			if ft.Kind == faultPause && ft.Hold <= 15e9 {
				t.Fatalf("pause %+v is not longer than any ack wait or lease", ft)
			}
			if ft.Kind != faultPause && ft.Kind != faultRestartGroup && (ft.Hold < 1e9 || ft.Hold > 20e9) {
				t.Fatalf("kill %+v: down outside 1-20 s", ft)
			}
		}
		for _, k := range faultKinds {
			if count[k] < f/len(faultKinds) {
				t.Fatalf("F=%d: %d of %s", f, count[k], k)
			}
		}
	}
	only := plan(7, mrand.New(mrand.NewPCG(42, 1)), 2, 1, []string{faultKillPostgres, faultPause})
	for _, ft := range only {
		if ft.Kind != faultKillPostgres && ft.Kind != faultPause {
			t.Fatalf("restricted plan has %s", ft.Kind)
		}
	}
	c := plan(10, mrand.New(mrand.NewPCG(43, 1)), 2, 1, nil)
	if reflect.DeepEqual(plan(10, mrand.New(mrand.NewPCG(42, 1)), 2, 1, nil), c) {
		t.Fatal("two seeds gave one plan")
	}
}

// Every playbook appears in a load of at least eight executions, and the mix is a function
// of the seed.
func TestPlanLoad(t *testing.T) {
	ts := []*tenant{{name: "a"}, {name: "b"}}
	a := planLoad(50, ts, 9, mrand.New(mrand.NewPCG(9, 2)))
	b := planLoad(50, ts, 9, mrand.New(mrand.NewPCG(9, 2)))
	seen := map[string]bool{}
	for i := range a {
		if a[i].path != b[i].path || a[i].key != b[i].key || a[i].tenant != b[i].tenant {
			t.Fatalf("execution %d differs between two plans of one seed", i)
		}
		seen[a[i].path] = true
	}
	for _, p := range loadPlaybooks {
		if !seen[p] {
			t.Fatalf("playbook %s never started", p)
		}
	}
}

// The sentinel is found raw and base64-encoded, also across the 1 MiB pieces a file is
// read in, and not found twice.
func TestGrepFindsTheSentinelAcrossPieces(t *testing.T) {
	dir := t.TempDir()
	forms := secretForms("SENTINEL-SECRET-abc123")
	big := make([]byte, 1<<20-5)
	for i := range big {
		big[i] = 'x'
	}
	content := append(append(big, []byte("SENTINEL-SECRET-abc123")...), []byte(" and "+string(forms[1]))...)
	if err := os.WriteFile(filepath.Join(dir, "a.log"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "skipped"), []byte("SENTINEL-SECRET-abc123"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "clean"), []byte("SENTINEL-SECRET-***"), 0o644); err != nil {
		t.Fatal(err)
	}
	hits, files, err := grepDir(dir, []string{"bin"}, forms)
	if err != nil {
		t.Fatal(err)
	}
	if files != 2 || len(hits) != 1 || hits["a.log"] != 2 {
		t.Fatalf("files %d, hits %v", files, hits)
	}
}

// The cluster's NATS nodes fsync every write before acknowledging it, as
// docs/operations.md recommends for a 3-node cluster: their configuration file parses to
// JetStream's SyncAlways.
func TestNATSNodesSyncAlways(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats-0.conf")
	text := natsNodeConf("nats-0", "127.0.0.1:4222", "127.0.0.1:8222", filepath.Join(dir, "store"), "127.0.0.1:6222", []string{"nats://127.0.0.1:6223", "nats://127.0.0.1:6224"})
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if !opts.JetStream || !opts.SyncAlways {
		t.Fatalf("JetStream %v, SyncAlways %v; want both", opts.JetStream, opts.SyncAlways)
	}
	if len(opts.Routes) != 2 || opts.Cluster.Name != "noetl-chaos" {
		t.Fatalf("routes %v, cluster %q", opts.Routes, opts.Cluster.Name)
	}
}
