package mesh_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/testkit"
)

// varsFlow writes execution variables through NoETL's /api/vars from its own steps (with
// the credential noetl_api), and later steps render them as vars.<name>: the write is
// committed before the writing step completes, so the order is the log's, not timing's.
const varsFlow = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: varsflow, path: compat/varsflow}
workload: {api: "http://127.0.0.1"}
workflow:
  - step: start
    tool:
      kind: http
      method: POST
      url: "{{ api }}/api/vars/{{ execution_id }}"
      auth: noetl_api
      json:
        variables:
          - {var_name: greeting, var_value: hello}
          - {var_name: n, var_value: 41}
    next: [{step: use}]
  - step: use
    tool:
      kind: noop
      result: {greeting: "{{ vars.greeting }}", next: "{{ vars.n + 1 }}", status: "{{ start.status_code }}"}
    next: [{step: drop}]
  - step: drop
    tool:
      kind: http
      method: DELETE
      url: "{{ api }}/api/vars/{{ execution_id }}/greeting"
      auth: noetl_api
    next: [{step: after}]
  - step: after
    tool:
      kind: noop
      result: {defined: "{{ vars.greeting is defined }}", n: "{{ vars.n }}", status: "{{ drop.status_code }}"}
`

// varsWait stays running until cancelled, for writes from outside.
const varsWait = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: varswait, path: compat/varswait}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        import time
        time.sleep(120)
        result = {}
`

// TestCompatVarsAreEventSourcedAndRendered checks /api/vars end to end: a step's write is
// a vars.updated event in the log, folded into the state and rendered by later steps as
// vars.<name>; a delete unsets; reads come from the state; writes to a terminal execution
// are refused with 409; names and values are validated, bounded, and scoped to the tenant.
func TestCompatVarsAreEventSourcedAndRendered(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	def := newClient(t, m, m.AdminKey)
	acmeKey, _ := def.createKey(map[string]any{"tenant": "acme", "roles": []string{"admin"}})
	acme := newClient(t, m, acmeKey)
	ctx := context.Background()
	def.wantREST(http.StatusOK, http.MethodPost, "/v1/credentials", map[string]any{"name": "noetl_api", "type": "http_bearer", "data": map[string]any{"token": m.AdminKey}})

	reg, err := def.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: varsFlow})
	require.NoError(t, err)
	w, err := structpb.NewStruct(map[string]any{"api": "http://" + m.HTTPAddr})
	require.NoError(t, err)
	started, err := def.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath(), Workload: w})
	require.NoError(t, err)
	id := started.GetExecutionId()
	x := waitDone(t, def, id)
	use := x.GetSteps()["use"].GetResult().GetStructValue().AsMap()
	require.Equal(t, map[string]any{"greeting": "hello", "next": float64(42), "status": float64(200)}, use, "a later step renders the variables")
	after := x.GetSteps()["after"].GetResult().GetStructValue().AsMap()
	require.Equal(t, map[string]any{"defined": false, "n": float64(41), "status": float64(200)}, after, "the delete unset greeting only")

	// Each write is one vars.updated event by the orchestrator, before the step that reads it.
	evs, err := def.exe.ListExecutionEvents(ctx, &apiv1.ListExecutionEventsRequest{ExecutionId: id, PageSize: 1000})
	require.NoError(t, err)
	var writes []*apiv1.Event
	issued := map[string]int64{}
	for _, ev := range evs.GetEvents() {
		switch ev.GetType() {
		case "vars.updated":
			writes = append(writes, ev)
		case "command.issued":
			issued[ev.GetStep()] = ev.GetSeq()
		}
	}
	require.Len(t, writes, 2)
	require.Equal(t, "orchestrator", writes[0].GetProducer())
	require.Less(t, writes[0].GetSeq(), issued["use"])
	require.Less(t, writes[1].GetSeq(), issued["after"])
	require.Greater(t, writes[1].GetSeq(), issued["use"])

	// Reads come from the folded state.
	code, raw, _ := def.restRaw(http.MethodGet, "/api/vars/"+id, nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	var list []map[string]any
	require.NoError(t, json.Unmarshal(raw, &list))
	require.Len(t, list, 1)
	require.Equal(t, "n", list[0]["var_name"])
	require.EqualValues(t, 41, list[0]["var_value"])
	require.Equal(t, "user_defined", list[0]["var_type"])
	require.NotEmpty(t, list[0]["created_at"])
	one := def.wantREST(http.StatusOK, http.MethodGet, "/api/vars/"+id+"/n", nil)
	require.EqualValues(t, 41, one["var_value"])
	require.Contains(t, def.wantREST(http.StatusNotFound, http.MethodGet, "/api/vars/"+id+"/greeting", nil)["error"], "vars.greeting: not set")

	// The execution ended: writes are refused, saying why.
	ended := def.wantREST(http.StatusConflict, http.MethodPost, "/api/vars/"+id, map[string]any{"variables": map[string]any{"late": 1}})
	require.Equal(t, "FAILED_PRECONDITION", ended["code"])
	require.Contains(t, ended["error"], "can no longer change")
	def.wantREST(http.StatusConflict, http.MethodDelete, "/api/vars/"+id+"/n", nil)
	def.wantREST(http.StatusConflict, http.MethodDelete, "/api/vars/"+id, nil)

	// Another tenant finds nothing.
	acme.wantREST(http.StatusNotFound, http.MethodGet, "/api/vars/"+id, nil)
	acme.wantREST(http.StatusNotFound, http.MethodGet, "/api/vars/"+id+"/n", nil)
	acme.wantREST(http.StatusNotFound, http.MethodPost, "/api/vars/"+id, map[string]any{"variables": map[string]any{"x": 1}})
	acme.wantREST(http.StatusNotFound, http.MethodDelete, "/api/vars/"+id, nil)

	// A running execution, written from outside.
	wait, err := def.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: varsWait})
	require.NoError(t, err)
	run, err := def.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: wait.GetPlaybook().GetPath()})
	require.NoError(t, err)
	rid := run.GetExecutionId()
	t.Cleanup(func() {
		_, _ = def.exe.CancelExecution(context.Background(), &apiv1.CancelExecutionRequest{ExecutionId: rid})
	})
	set := def.wantREST(http.StatusOK, http.MethodPost, "/api/vars/"+rid, map[string]any{"variables": map[string]any{"a": "x", "b": map[string]any{"k": []any{1, 2}}}, "var_type": "computed", "source_step": "outside"})
	require.Equal(t, map[string]any{"execution_id": rid, "variables_set": float64(2), "status": "ok"}, set)
	b := def.wantREST(http.StatusOK, http.MethodGet, "/api/vars/"+rid+"/b", nil)
	require.Equal(t, map[string]any{"k": []any{float64(1), float64(2)}}, b["var_value"], "read after write")
	require.Equal(t, "computed", b["var_type"])
	require.Equal(t, "outside", b["source_step"])
	def.wantREST(http.StatusOK, http.MethodPost, "/api/vars/"+rid+"/a", map[string]any{"var_value": "y"})
	require.Equal(t, "y", def.wantREST(http.StatusOK, http.MethodGet, "/api/vars/"+rid+"/a", nil)["var_value"])
	require.Equal(t, "deleted", def.wantREST(http.StatusOK, http.MethodDelete, "/api/vars/"+rid+"/a", nil)["status"])
	require.Contains(t, def.wantREST(http.StatusNotFound, http.MethodDelete, "/api/vars/"+rid+"/a", nil)["error"], "vars.a: not set")
	require.EqualValues(t, 1, def.wantREST(http.StatusOK, http.MethodDelete, "/api/vars/"+rid, nil)["variables_deleted"])
	code, raw, _ = def.restRaw(http.MethodGet, "/api/vars/"+rid, nil)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `[]`, string(raw))

	// Bad input names the field; sizes are bounded.
	for _, tc := range []struct {
		body  any
		field string
	}{
		{map[string]any{}, "variables"},
		{map[string]any{"variables": "x"}, "variables"},
		{map[string]any{"variables": map[string]any{"a-b": 1}}, "variables"},
		{map[string]any{"variables": map[string]any{}}, "variables"},
		{map[string]any{"variables": []any{map[string]any{"var_value": 1}}}, "variables[0].var_name"},
		{map[string]any{"variables": []any{map[string]any{"var_name": "a"}}}, "variables[0].var_value"},
		{map[string]any{"variables": []any{map[string]any{"var_name": "a", "var_value": 1, "var_type": "computed"}, map[string]any{"var_name": "b", "var_value": 1, "var_type": "step_result"}}}, "variables[1].var_type"},
		{map[string]any{"variables": map[string]any{"a": 1}, "var_type": "mine"}, "type"},
	} {
		wantField(t, def.wantREST(http.StatusBadRequest, http.MethodPost, "/api/vars/"+rid, tc.body), tc.field)
	}
	wantField(t, def.wantREST(http.StatusBadRequest, http.MethodGet, "/api/vars/not-an-id", nil), "execution_id")
	wantField(t, def.wantREST(http.StatusBadRequest, http.MethodGet, "/api/vars/"+rid+"/a.b", nil), "var_name")
	wantField(t, def.wantREST(http.StatusBadRequest, http.MethodDelete, "/api/vars/"+rid+"/1x", nil), "names")
	big := strings.Repeat("x", 16<<10)
	tooBig := def.wantREST(http.StatusRequestEntityTooLarge, http.MethodPost, "/api/vars/"+rid, map[string]any{"variables": map[string]any{"a": big}})
	require.Contains(t, tooBig["error"], "variables.a")
	// Within each value's bound, but past the execution's total: refused by the
	// orchestrator against the committed state.
	vals := map[string]any{}
	for i := range 5 {
		vals[fmt.Sprintf("v%d", i)] = strings.Repeat("y", 15<<10)
	}
	total := def.wantREST(http.StatusRequestEntityTooLarge, http.MethodPost, "/api/vars/"+rid, map[string]any{"variables": vals})
	require.Contains(t, total["error"], "per execution")
	many := map[string]any{}
	for i := range 101 {
		many[fmt.Sprintf("v%d", i)] = i
	}
	wantField(t, def.wantREST(http.StatusBadRequest, http.MethodPost, "/api/vars/"+rid, map[string]any{"variables": many}), "variables")

	// Cancelled, the execution takes no more writes.
	_, err = def.exe.CancelExecution(ctx, &apiv1.CancelExecutionRequest{ExecutionId: rid})
	require.NoError(t, err)
	testkit.WaitFor(t, time.Minute, func() error {
		d, err := def.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: rid, Timeout: durationpb.New(10 * time.Second)})
		if err != nil {
			return err
		}
		if d.GetExecution().GetStatus() != eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED {
			return fmt.Errorf("status %s", d.GetExecution().GetStatus())
		}
		return nil
	})
	def.wantREST(http.StatusConflict, http.MethodPost, "/api/vars/"+rid, map[string]any{"variables": map[string]any{"a": 1}})
}
