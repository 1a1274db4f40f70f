package mesh_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// chain is four steps: start's small result stays inline, big's is held by reference, c
// reads both (big's payload, which the worker loads), d reports c.
const chain = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: chain, path: tests/chain}
workload: {base: 5}
workflow:
  - step: start
    tool:
      kind: python
      input: {base: "{{ workload.base }}"}
      code: |
        result = {"n": base + 1}
    next: [{step: big}]
  - step: big
    tool:
      kind: python
      code: |
        result = {"blob": "x" * 100000, "k": 3}
    next: [{step: c, set: {after_big: "{{ big.k }}"}}]
  - step: c
    tool:
      kind: python
      input: {n: "{{ start.n }}", blob: "{{ big.blob }}", k: "{{ ctx.after_big }}"}
      code: |
        result = {"sum": n + len(blob) + int(k)}
    next: {arcs: [{step: d}, {step: never, when: "{{ false }}"}]}
  - step: d
    tool: {kind: noop, result: {sum: "{{ c.sum }}"}}
  - step: never
    tool: {kind: noop}
`

// commandsOf lists the steps the execution issued commands for, in log order.
func commandsOf(t *testing.T, c *client, id string) []string {
	t.Helper()
	var out []string
	token := ""
	for {
		resp, err := c.exe.ListExecutionEvents(context.Background(), &apiv1.ListExecutionEventsRequest{ExecutionId: id, PageSize: 100, PageToken: token})
		require.NoError(t, err)
		for _, ev := range resp.GetEvents() {
			if ev.GetType() == "command.issued" {
				out = append(out, ev.GetStep())
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			return out
		}
	}
}

func waitDone(t *testing.T, c *client, id string) *apiv1.Execution {
	t.Helper()
	done, err := c.exe.WaitExecution(context.Background(), &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(60 * time.Second)})
	require.NoError(t, err)
	x := done.GetExecution()
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
	return x
}

// TestRerunFromAStepReusesTheStepsBeforeIt runs a four-step chain, reruns it from its third
// step and checks that the rerun issued no command for the first two (their tools did not
// run again), kept the first's inline result and the second's reference (the same URI and
// digest, not a copy), started from the ctx the original had, and ran the rest to the same
// result. A plain rerun runs every step again; a step the playbook lacks, or the original
// never entered, is refused naming it; another tenant's execution is not found.
func TestRerunFromAStepReusesTheStepsBeforeIt(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	ctx := context.Background()
	def := newClient(t, m, m.AdminKey)
	reg, err := def.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: chain})
	require.NoError(t, err)
	started, err := def.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath(), Labels: map[string]string{"team": "data"}})
	require.NoError(t, err)
	orig := waitDone(t, def, started.GetExecutionId())
	require.Equal(t, []string{"start", "big", "c", "d"}, commandsOf(t, def, orig.GetExecutionId()))
	origRef := orig.GetSteps()["big"].GetResultRef()
	require.NotNil(t, origRef, "big's result is held by reference")

	rr, err := def.exe.RerunExecution(ctx, &apiv1.RerunExecutionRequest{ExecutionId: orig.GetExecutionId(), FromStep: "c"})
	require.NoError(t, err)
	require.Equal(t, []string{"big", "start"}, rr.GetReusedSteps())
	require.Equal(t, orig.GetVersion(), rr.GetVersion())
	re := waitDone(t, def, rr.GetExecutionId())
	require.Equal(t, []string{"c", "d"}, commandsOf(t, def, re.GetExecutionId()), "the reused steps issued no command")
	require.Equal(t, orig.GetExecutionId(), re.GetRerunOf())
	require.Equal(t, "c", re.GetFromStep())
	require.Equal(t, map[string]string{"team": "data"}, re.GetLabels(), "a rerun keeps the original's labels")
	require.True(t, re.GetSteps()["start"].GetReused())
	require.True(t, re.GetSteps()["big"].GetReused())
	require.False(t, re.GetSteps()["c"].GetReused())
	require.True(t, proto.Equal(orig.GetSteps()["start"].GetResult(), re.GetSteps()["start"].GetResult()), "the inline result stays inline")
	require.True(t, proto.Equal(origRef, re.GetSteps()["big"].GetResultRef()), "the reference is the original's")
	require.Nil(t, re.GetSteps()["big"].GetResult())
	require.EqualValues(t, 6+100000+3, re.GetSteps()["c"].GetResult().GetStructValue().GetFields()["sum"].GetNumberValue(), "c read start's result, big's payload and the ctx")
	require.True(t, proto.Equal(orig.GetResult(), re.GetResult()), "the rerun ends with the original's result")

	t.Run("plain rerun", func(t *testing.T) {
		rr, err := def.exe.RerunExecution(ctx, &apiv1.RerunExecutionRequest{ExecutionId: orig.GetExecutionId()})
		require.NoError(t, err)
		require.Empty(t, rr.GetReusedSteps())
		x := waitDone(t, def, rr.GetExecutionId())
		require.Equal(t, []string{"start", "big", "c", "d"}, commandsOf(t, def, x.GetExecutionId()))
		require.Equal(t, orig.GetExecutionId(), x.GetRerunOf())
		require.Empty(t, x.GetFromStep())
		require.True(t, proto.Equal(orig.GetResult(), x.GetResult()))
	})

	t.Run("a rerun of a rerun", func(t *testing.T) {
		rr2, err := def.exe.RerunExecution(ctx, &apiv1.RerunExecutionRequest{ExecutionId: re.GetExecutionId(), FromStep: "d"})
		require.NoError(t, err)
		require.Equal(t, []string{"big", "c", "start"}, rr2.GetReusedSteps())
		x := waitDone(t, def, rr2.GetExecutionId())
		require.Equal(t, []string{"d"}, commandsOf(t, def, x.GetExecutionId()))
		require.True(t, proto.Equal(origRef, x.GetSteps()["big"].GetResultRef()), "the reference passes on unchanged")
	})

	t.Run("idempotency key", func(t *testing.T) {
		a, err := def.exe.RerunExecution(ctx, &apiv1.RerunExecutionRequest{ExecutionId: orig.GetExecutionId(), FromStep: "d", IdempotencyKey: "rerun-once"})
		require.NoError(t, err)
		b, err := def.exe.RerunExecution(ctx, &apiv1.RerunExecutionRequest{ExecutionId: orig.GetExecutionId(), FromStep: "d", IdempotencyKey: "rerun-once"})
		require.NoError(t, err)
		require.Equal(t, a.GetExecutionId(), b.GetExecutionId())
		waitDone(t, def, a.GetExecutionId())
	})

	t.Run("bad steps", func(t *testing.T) {
		for step, want := range map[string]string{
			"nope":  `from_step: playbook "tests/chain" version 1 has no step "nope"`,
			"never": `never entered step "never"`,
		} {
			_, err := def.exe.RerunExecution(ctx, &apiv1.RerunExecutionRequest{ExecutionId: orig.GetExecutionId(), FromStep: step})
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), want)
		}
	})

	t.Run("REST", func(t *testing.T) {
		out := def.wantREST(http.StatusOK, http.MethodPost, "/v1/executions/"+orig.GetExecutionId()+":rerun", map[string]any{"fromStep": "c"})
		id, _ := out["executionId"].(string)
		require.NotEmpty(t, id, "%v", out)
		x := waitDone(t, def, id)
		require.Equal(t, "c", x.GetFromStep())
		out = def.wantREST(http.StatusBadRequest, http.MethodPost, "/v1/executions/"+orig.GetExecutionId()+":rerun", map[string]any{"fromStep": "nope"})
		require.Contains(t, out["message"], `"nope"`)
	})

	t.Run("a seed over the start's limit", func(t *testing.T) {
		// Four inline results of 62,000 bytes before the last step: more than a start may
		// record. From the fourth step, three of them fit.
		var b strings.Builder
		b.WriteString("apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: wide, path: tests/wide}\nworkflow:\n")
		for i := 1; i <= 4; i++ {
			name := fmt.Sprintf("s%d", i)
			if i == 1 {
				name = "start"
			}
			fmt.Fprintf(&b, "  - step: %s\n    tool: {kind: python, code: 'result = {\"blob\": \"x\" * 62000}'}\n    next: [{step: s%d}]\n", name, i+1)
		}
		b.WriteString("  - step: s5\n    tool: {kind: noop, result: {ok: true}}\n")
		reg, err := def.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: b.String()})
		require.NoError(t, err)
		started, err := def.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath()})
		require.NoError(t, err)
		x := waitDone(t, def, started.GetExecutionId())
		require.NotNil(t, x.GetSteps()["s4"].GetResult(), "the results stay inline")
		_, err = def.exe.RerunExecution(ctx, &apiv1.RerunExecutionRequest{ExecutionId: x.GetExecutionId(), FromStep: "s5"})
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), "exceeds the limit of 245760 bytes")
		rr, err := def.exe.RerunExecution(ctx, &apiv1.RerunExecutionRequest{ExecutionId: x.GetExecutionId(), FromStep: "s4"})
		require.NoError(t, err)
		require.Equal(t, []string{"s2", "s3", "start"}, rr.GetReusedSteps())
		require.Equal(t, []string{"s4", "s5"}, commandsOf(t, def, waitDone(t, def, rr.GetExecutionId()).GetExecutionId()))
	})

	t.Run("from the step that failed", func(t *testing.T) {
		// The step fails until a file exists: fix the cause, rerun from the failed step,
		// and the steps before it do not run again.
		flag := filepath.Join(t.TempDir(), "ready")
		reg, err := def.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: flaky, path: tests/flaky}
workload: {flag: ""}
workflow:
  - step: start
    tool: {kind: noop, result: {n: 1}}
    next: [{step: check}]
  - step: check
    tool:
      kind: python
      input: {flag: "{{ workload.flag }}", n: "{{ start.n }}"}
      code: |
        import os
        if not os.path.exists(flag):
            raise RuntimeError("not ready")
        result = {"n": n + 1}
`})
		require.NoError(t, err)
		w, err := structpb.NewStruct(map[string]any{"flag": flag})
		require.NoError(t, err)
		started, err := def.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath(), Workload: w})
		require.NoError(t, err)
		done, err := def.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: started.GetExecutionId(), Timeout: durationpb.New(60 * time.Second)})
		require.NoError(t, err)
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, done.GetExecution().GetStatus())
		require.NoError(t, os.WriteFile(flag, nil, 0o600))
		rr, err := def.exe.RerunExecution(ctx, &apiv1.RerunExecutionRequest{ExecutionId: started.GetExecutionId(), FromStep: "check"})
		require.NoError(t, err)
		require.Equal(t, []string{"start"}, rr.GetReusedSteps())
		x := waitDone(t, def, rr.GetExecutionId())
		require.Equal(t, []string{"check"}, commandsOf(t, def, x.GetExecutionId()))
		require.EqualValues(t, 2, x.GetSteps()["check"].GetResult().GetStructValue().GetFields()["n"].GetNumberValue())
	})

	t.Run("another tenant", func(t *testing.T) {
		acmeKey, _ := def.createKey(map[string]any{"tenant": "acme", "roles": []string{"admin"}})
		acme := newClient(t, m, acmeKey)
		_, err := acme.exe.RerunExecution(ctx, &apiv1.RerunExecutionRequest{ExecutionId: orig.GetExecutionId(), FromStep: "c"})
		require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
		_, err = acme.exe.RerunExecution(ctx, &apiv1.RerunExecutionRequest{ExecutionId: orig.GetExecutionId()})
		require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	})
}

// TestLabelsAreSetListedAndFiltered starts executions with labels over gRPC and REST, reads
// them back in the execution view and the listing, filters the listing by one and by
// several labels (all must match) over both, and checks that bad labels are refused
// naming the field and the label.
func TestLabelsAreSetListedAndFiltered(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	ctx := context.Background()
	def := newClient(t, m, m.AdminKey)
	reg, err := def.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: quick})
	require.NoError(t, err)
	path := reg.GetPlaybook().GetPath()
	startWith := func(labels map[string]string) string {
		resp, err := def.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: path, Labels: labels})
		require.NoError(t, err)
		waitDone(t, def, resp.GetExecutionId())
		return resp.GetExecutionId()
	}
	a := startWith(map[string]string{"team": "data", "env": "prod"})
	b := startWith(map[string]string{"team": "data", "env": "dev"})
	_ = startWith(nil)
	out := def.wantREST(http.StatusOK, http.MethodPost, "/v1/executions", map[string]any{"path": path, "labels": map[string]string{"team": "web", "env": "prod"}})
	c, _ := out["executionId"].(string)
	require.NotEmpty(t, c)
	waitDone(t, def, c)

	got, err := def.exe.GetExecution(ctx, &apiv1.GetExecutionRequest{ExecutionId: a})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"team": "data", "env": "prod"}, got.GetExecution().GetLabels())

	list := func(labels map[string]string) []string {
		resp, err := def.exe.ListExecutions(ctx, &apiv1.ListExecutionsRequest{Labels: labels})
		require.NoError(t, err)
		var ids []string
		for _, x := range resp.GetExecutions() {
			ids = append(ids, x.GetExecutionId())
			if x.GetExecutionId() == a {
				require.Equal(t, map[string]string{"team": "data", "env": "prod"}, x.GetLabels(), "the listing shows the labels")
			}
		}
		sort.Strings(ids)
		return ids
	}
	sorted := func(ids ...string) []string { sort.Strings(ids); return ids }
	require.Len(t, list(nil), 4)
	require.Equal(t, sorted(a, b), list(map[string]string{"team": "data"}))
	require.Equal(t, sorted(a, c), list(map[string]string{"env": "prod"}))
	require.Equal(t, []string{a}, list(map[string]string{"team": "data", "env": "prod"}))
	require.Empty(t, list(map[string]string{"team": "ops"}))

	// REST: labels as a query map, labels[key]=value.
	q := url.Values{}
	q.Set("labels[team]", "data")
	q.Set("labels[env]", "dev")
	out = def.wantREST(http.StatusOK, http.MethodGet, "/v1/executions?"+q.Encode(), nil)
	xs, _ := out["executions"].([]any)
	require.Len(t, xs, 1, "%v", out)
	require.Equal(t, b, xs[0].(map[string]any)["executionId"])

	for labels, want := range map[string]map[string]string{
		`labels: label key "Team" must match`: {"Team": "x"},
		`labels: label "k": value of 257`:     {"k": strings.Repeat("v", 257)},
	} {
		_, err := def.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: path, Labels: want})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), labels)
		_, err = def.exe.ListExecutions(ctx, &apiv1.ListExecutionsRequest{Labels: want})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	}
}
