package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/internal/testkit"
)

// TestProgressPrintsOneLinePerStepTransition feeds the printer a run with a loop step, a
// retried step and a skipped step.
func TestProgressPrintsOneLinePerStepTransition(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	seq := int64(0)
	ev := func(typ, step string, ms int, payload map[string]any, attempt int32) *apiv1.Event {
		seq++
		e := &apiv1.Event{Seq: seq, Type: typ, Step: step, Attempt: attempt, CommitTime: timestamppb.New(t0.Add(time.Duration(ms) * time.Millisecond))}
		if payload != nil {
			v, err := structpb.NewValue(payload)
			require.NoError(t, err)
			e.Payload = v
		}
		return e
	}
	run := []*apiv1.Event{
		ev("playbook.started", "", 0, nil, 0),
		// A step of one command is entered by its command.issued; a loop by a step.enter.
		ev("command.issued", "start", 10, map[string]any{"enter": map[string]any{"epoch": 1}}, 1),
		ev("command.completed", "start", 250, nil, 1),
		ev("step.exit", "start", 260, nil, 0),
		ev("step.enter", "fetch", 270, map[string]any{"epoch": 1, "loop": map[string]any{"items": []any{1, 2, 3}}}, 0),
		ev("command.completed", "fetch", 300, nil, 1),
		ev("command.completed", "fetch", 310, nil, 1),
		ev("command.failed", "flaky", 320, map[string]any{"retry": map[string]any{"attempts": 3}}, 1),
		ev("command.completed", "fetch", 330, nil, 1),
		ev("step.skipped", "never", 340, nil, 0),
		ev("command.failed", "flaky", 400, nil, 2),
		ev("playbook.failed", "", 1500, nil, 0),
	}

	var plain bytes.Buffer
	p := newProgress(&plain, false, 4)
	for _, e := range run {
		p.apply(e)
	}
	p.finish()
	require.Equal(t, strings.Join([]string{
		"  +0.01s  start        running",
		"  +0.25s  start        completed",
		"  +0.27s  fetch        running, 3 items",
		"  +0.32s  flaky        failed, retrying (attempt 2 of 3)",
		"  +0.33s  fetch        completed",
		"  +0.34s  never        skipped",
		"  +0.40s  flaky        failed",
		"  +1.50s  playbook failed",
	}, "\n")+"\n", plain.String())

	// On a terminal the same lines, with a bar redrawn below them and removed at the end.
	var tty bytes.Buffer
	p = newProgress(&tty, true, 4)
	for _, e := range run {
		p.apply(e)
	}
	p.finish()
	out := tty.String()
	require.Contains(t, out, "[######------------------] 1/4 steps  running: fetch")
	require.Contains(t, out, "[########################] 4/4 steps")
	require.True(t, strings.HasSuffix(out, "\r\x1b[K"), "the bar is removed at the end: %q", out[len(out)-40:])
	clean := regexp.MustCompile(`\r\x1b\[K|\[[#-]+\][^\n\r]*`).ReplaceAllString(out, "")
	require.Equal(t, plain.String(), clean)
}

// TestRunWatch runs a playbook with `noetl run --watch` against a mesh: the output shows each
// step's transitions as they happen, then the outcome.
func TestRunWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := mesh.Start(ctx, mesh.Config{StateDir: t.TempDir(), PostgresURL: testkit.StartPostgres(t), NATSURL: testkit.StartNATS(t)})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	file := filepath.Join(t.TempDir(), "watched.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: watched, path: tests/watched}
workflow:
  - step: start
    tool: {kind: noop, result: {n: 1}}
    next: [{step: middle}]
  - step: middle
    loop: {in: [1, 2, 3], iterator: x}
    tool: {kind: noop, result: {x: "{{ x }}"}}
    next: [{step: end}]
  - step: end
    tool: {kind: noop, result: {done: true}}
`), 0o644))
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"--gateway", m.GRPCAddr, "--api-key", m.AdminKey, "run", file, "--watch"})
	require.NoError(t, root.ExecuteContext(ctx), errOut.String())

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var progress []string
	at := 0
	for i, l := range lines {
		if strings.HasPrefix(l, "{") {
			at = i
			break
		}
		progress = append(progress, regexp.MustCompile(`^\s*\+\d+\.\d\ds\s+`).ReplaceAllString(l, ""))
	}
	require.Equal(t, []string{
		"start        running",
		"start        completed",
		"middle       running, 3 items",
		"middle       completed",
		"end          running",
		"end          completed",
		"playbook completed",
	}, progress, out.String())
	var outcome Outcome
	require.NoError(t, json.Unmarshal([]byte(strings.Join(lines[at:], "\n")), &outcome))
	require.Equal(t, "COMPLETED", outcome.Status)
	require.Equal(t, "tests/watched", outcome.Path)
}
