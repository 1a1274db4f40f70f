package chaos

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// faults.jsonl holds the faults that ran, timed on history.jsonl's clock and the wall
// clock; a fault that never started is not in it.
func TestFaultsAreWrittenOnTheHistorysClock(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 1, 24, 11, 0, time.UTC)
	ran := &fault{N: 1, Kind: faultKillNATS, Targets: []string{"nats-0"}, start: t0.Add(48500 * time.Millisecond), healed: t0.Add(52 * time.Second)}
	running := &fault{N: 2, Kind: faultPause, Targets: []string{"worker-shared-0"}, start: t0.Add(60 * time.Second)}
	never := &fault{N: 3, Kind: faultKillGateway, Targets: []string{"gateway-0"}}
	path := filepath.Join(t.TempDir(), "faults.jsonl")
	if err := writeFaults(path, []*fault{ran, running, never}, t0); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var lines []map[string]any
	s := bufio.NewScanner(f)
	for s.Scan() {
		var m map[string]any
		if err := json.Unmarshal(s.Bytes(), &m); err != nil {
			t.Fatalf("%q: %v", s.Text(), err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 {
		t.Fatalf("%d lines, want the two faults that started: %v", len(lines), lines)
	}
	first, second := lines[0], lines[1]
	if first["n"] != 1.0 || first["kind"] != faultKillNATS || first["t"] != 48.5 || first["t_heal"] != 52.0 ||
		first["at"] != "2026-12-07T01:24:59.5Z" || first["heal_at"] != "2026-12-07T01:25:03Z" {
		t.Errorf("first line %v", first)
	}
	if second["n"] != 2.0 || second["t"] != 60.0 || second["t_heal"] != nil || second["heal_at"] != nil {
		t.Errorf("second line %v: a fault not healed has no heal times", second)
	}
}
