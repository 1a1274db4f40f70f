package mesh_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

const loggingSteps = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: logging, path: tests/logging}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        import sys
        print("hello from step logs")
        print("a warning", file=sys.stderr)
        result = {"ok": True}
    next: [{step: big}]
  - step: big
    tool:
      kind: python
      code: |
        for i in range(2000):
            print("line %04d " % i + "x" * 40)
        print("the end")
        result = 1
    next: [{step: end}]
  - step: end
    tool: {kind: noop}
`

// TestStepLogs runs a playbook whose python steps print and reads their logs: over REST
// (a page, the step filter, follow=true as Server-Sent Events while it runs) and over gRPC
// (pages). The big step's stdout is over the inline budget and the stream bound: it comes
// back from the resultstore, its tail only, marked truncated, with its total size. Another
// tenant cannot read them; bad parameters are 400s naming the field.
func TestStepLogs(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	a := newClient(t, m, m.AdminKey)
	bKey, _ := a.createKey(map[string]any{"tenant": "logs-b", "roles": []string{"admin"}})
	b := newClient(t, m, bKey)
	ctx := context.Background()

	reg, err := a.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: loggingSteps})
	require.NoError(t, err)
	started, err := a.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath()})
	require.NoError(t, err)
	id := started.GetExecutionId()

	var wg sync.WaitGroup
	var followCode int
	var followed []sseEvent
	wg.Go(func() {
		followCode, followed = streamSSE(t, m, m.AdminKey, "/v1/executions/"+id+"/logs?follow=true", nil)
	})
	done, err := a.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(time.Minute)})
	require.NoError(t, err)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, done.GetExecution().GetStatus())
	wg.Wait()

	// REST: every entry, in the order the commands ended.
	page := a.wantREST(http.StatusOK, http.MethodGet, "/v1/executions/"+id+"/logs", nil)
	entries := restEntries(t, page)
	require.Len(t, entries, 3)
	require.Equal(t, "start", entries[0].Step)
	require.Equal(t, "stdout", entries[0].Stream)
	require.Equal(t, "hello from step logs\n", entries[0].Text)
	require.Equal(t, "python", entries[0].Tool)
	require.NotEmpty(t, entries[0].CommandID)
	require.Equal(t, 1, entries[0].Attempt)
	require.NotEmpty(t, entries[0].Time)
	require.Equal(t, "stderr", entries[1].Stream)
	require.Equal(t, "a warning\n", entries[1].Text)
	big := entries[2]
	require.Equal(t, "big", big.Step)
	require.True(t, big.Truncated)
	require.Equal(t, "102008", big.TotalBytes, "2000 lines of 51 bytes and the last")
	require.LessOrEqual(t, len(big.Text), 64<<10)
	require.Greater(t, len(big.Text), 60<<10, "the whole tail, read back from the resultstore")
	require.True(t, strings.HasSuffix(big.Text, "x\nthe end\n"))
	require.NotContains(t, big.Text, "line 0000 ", "the head is cut")

	// The step filter, and follow=false is a page too.
	page = a.wantREST(http.StatusOK, http.MethodGet, "/v1/executions/"+id+"/logs?step=big&follow=false", nil)
	require.Len(t, restEntries(t, page), 1)

	// follow=true streamed the same entries while the execution ran, then its end, whose id
	// a reconnecting EventSource sends back and is told there is no more (204).
	require.Equal(t, http.StatusOK, followCode)
	require.Len(t, followed, 4)
	require.Equal(t, "log", followed[0].event)
	end := followed[3]
	require.Equal(t, "end", end.event)
	require.Equal(t, done.GetExecution().GetLastSeq(), mustInt(t, end.id))
	code, _ := streamSSE(t, m, m.AdminKey, "/v1/executions/"+id+"/logs?follow=true", map[string]string{"Last-Event-ID": end.id})
	require.Equal(t, http.StatusNoContent, code)
	code, again := streamSSE(t, m, m.AdminKey, "/v1/executions/"+id+"/logs:watch?step=start", nil)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, again, 3, "the step's two entries and the end")
	require.Contains(t, followed[0].data, `"text":"hello from step logs\n"`)
	require.Empty(t, followed[0].id, "a command's first entry carries no id")
	require.NotEmpty(t, followed[1].id, "its last one carries its event's seq")

	// gRPC, a page at a time: a command's entries stay together.
	got, err := a.exe.ListExecutionLogs(ctx, &apiv1.ListExecutionLogsRequest{ExecutionId: id, PageSize: 1})
	require.NoError(t, err)
	require.Len(t, got.GetEntries(), 2)
	require.NotEmpty(t, got.GetNextPageToken())
	got, err = a.exe.ListExecutionLogs(ctx, &apiv1.ListExecutionLogsRequest{ExecutionId: id, PageSize: 1, PageToken: got.GetNextPageToken()})
	require.NoError(t, err)
	require.Len(t, got.GetEntries(), 1)
	require.Equal(t, "big", got.GetEntries()[0].GetStep())
	require.EqualValues(t, 102008, got.GetEntries()[0].GetTotalBytes())

	// Tenant-scoped, and bad parameters are refused naming the field.
	_, err = b.exe.ListExecutionLogs(ctx, &apiv1.ListExecutionLogsRequest{ExecutionId: id})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	code, _ = streamSSE(t, m, bKey, "/v1/executions/"+id+"/logs?follow=true", nil)
	require.Equal(t, http.StatusNotFound, code)
	out := a.wantREST(http.StatusBadRequest, http.MethodGet, "/v1/executions/"+id+"/logs?follow=sometimes", nil)
	require.Contains(t, out["message"], "follow")
	out = a.wantREST(http.StatusBadRequest, http.MethodGet, "/v1/executions/"+id+"/logs?step="+url.QueryEscape(strings.Repeat("s", 300)), nil)
	require.Contains(t, out["message"], "step")
	out = a.wantREST(http.StatusBadRequest, http.MethodGet, "/v1/executions/"+id+"/logs?pageToken=x", nil)
	require.Contains(t, out["message"], "page_token")
}

// restEntry is a LogEntry as REST returns it (an int64 as a string).
type restEntry struct {
	Step       string `json:"step"`
	CommandID  string `json:"commandId"`
	Tool       string `json:"tool"`
	Stream     string `json:"stream"`
	Text       string `json:"text"`
	TotalBytes string `json:"totalBytes"`
	Time       string `json:"time"`
	Attempt    int    `json:"attempt"`
	Truncated  bool   `json:"truncated"`
}

func restEntries(t *testing.T, page map[string]any) []restEntry {
	t.Helper()
	raw, err := json.Marshal(page["entries"])
	require.NoError(t, err)
	var out []restEntry
	require.NoError(t, json.Unmarshal(raw, &out))
	return out
}
