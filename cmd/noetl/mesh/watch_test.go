package mesh_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	id, event, data string
}

// watchSSE opens the SSE watch of an execution with key and returns the response status
// and the events of the stream until it ends.
func watchSSE(t *testing.T, m *mesh.Mesh, key, id string, header map[string]string) (int, []sseEvent) {
	t.Helper()
	return streamSSE(t, m, key, "/v1/executions/"+id+"/events:watch", header)
}

// streamSSE opens an SSE route with key and returns the response status and the events of
// the stream until it ends.
func streamSSE(t *testing.T, m *mesh.Mesh, key, path string, header map[string]string) (int, []sseEvent) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+m.HTTPAddr+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur != (sseEvent{}) {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"): // comment (keep-alive)
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				cur.id = value
			case "event":
				cur.event = value
			case "data":
				cur.data += value
			}
		}
	}
	require.NoError(t, sc.Err())
	return resp.StatusCode, out
}

// watchGRPC collects the events of a gRPC watch until it ends.
func watchGRPC(exe apiv1.ExecutionServiceClient, id string, after int64) ([]*apiv1.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := exe.WatchExecution(ctx, &apiv1.WatchExecutionRequest{ExecutionId: id, AfterSeq: after})
	if err != nil {
		return nil, err
	}
	var out []*apiv1.Event
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, m.GetEvent())
	}
}

// TestWatchExecution watches a three-step run over gRPC and over Server-Sent Events while it
// runs: both see every committed event once, in seq order, ending with playbook.completed,
// exactly as the log lists them. Another tenant cannot watch it (NotFound, HTTP 404).
func TestWatchExecution(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	a := newClient(t, m, m.AdminKey)
	bKey, _ := a.createKey(map[string]any{"tenant": "watch-b", "roles": []string{"admin"}})
	b := newClient(t, m, bKey)
	ctx := context.Background()

	reg, err := a.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: threeSteps})
	require.NoError(t, err)
	started, err := a.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: reg.GetPlaybook().GetPath()})
	require.NoError(t, err)
	id := started.GetExecutionId()

	var wg sync.WaitGroup
	var viaGRPC []*apiv1.Event
	var grpcErr error
	var sseCode int
	var viaSSE []sseEvent
	wg.Go(func() { viaGRPC, grpcErr = watchGRPC(a.exe, id, 0) })
	wg.Go(func() { sseCode, viaSSE = watchSSE(t, m, m.AdminKey, id, nil) })
	wg.Wait()
	require.NoError(t, grpcErr)
	require.Equal(t, http.StatusOK, sseCode)

	// The log, read after the end, is what both watches must have seen.
	done, err := a.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(time.Minute)})
	require.NoError(t, err)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, done.GetExecution().GetStatus())
	h := &harness{m: m, cat: a.cat, exe: a.exe}
	logged := h.events(t, id)
	require.Equal(t, "playbook.completed", logged[len(logged)-1].GetType())
	require.Len(t, viaGRPC, len(logged))
	require.Len(t, viaSSE, len(logged))
	steps := map[string]bool{}
	for i, want := range logged {
		require.Equal(t, int64(i+1), want.GetSeq())
		got := viaGRPC[i]
		require.Equal(t, want.GetSeq(), got.GetSeq(), "gRPC: every event in seq order")
		require.Equal(t, want.GetEventId(), got.GetEventId())
		require.Equal(t, want.GetType(), got.GetType())
		steps[got.GetStep()] = true

		e := viaSSE[i]
		require.Equal(t, strconv.FormatInt(want.GetSeq(), 10), e.id, "SSE: every event in seq order")
		require.Equal(t, want.GetType(), e.event)
		var ev apiv1.Event
		require.NoError(t, protojson.Unmarshal([]byte(e.data), &ev), e.data)
		require.Equal(t, want.GetEventId(), ev.GetEventId())
		require.Equal(t, want.GetSeq(), ev.GetSeq())
	}
	for _, s := range []string{"start", "double", "end"} {
		require.True(t, steps[s], "step %s watched", s)
	}

	// Resuming: after a seq, only what follows; after the end, nothing (204 tells an
	// EventSource to stop reconnecting).
	last := int64(len(logged))
	tail, err := watchGRPC(a.exe, id, last-2)
	require.NoError(t, err)
	require.Len(t, tail, 2)
	require.Equal(t, last-1, tail[0].GetSeq())
	code, evs := watchSSE(t, m, m.AdminKey, id, map[string]string{"Last-Event-ID": strconv.FormatInt(last-1, 10)})
	require.Equal(t, http.StatusOK, code)
	require.Len(t, evs, 1)
	require.Equal(t, "playbook.completed", evs[0].event)
	tail, err = watchGRPC(a.exe, id, last)
	require.NoError(t, err)
	require.Empty(t, tail)
	code, _ = watchSSE(t, m, m.AdminKey, id, map[string]string{"Last-Event-ID": strconv.FormatInt(last, 10)})
	require.Equal(t, http.StatusNoContent, code)

	// Tenant B cannot watch tenant A's execution: it does not exist for B.
	_, err = watchGRPC(b.exe, id, 0)
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	code, _ = watchSSE(t, m, bKey, id, nil)
	require.Equal(t, http.StatusNotFound, code)
	code, _ = watchSSE(t, m, "noetl_not_a_key", id, nil)
	require.Equal(t, http.StatusUnauthorized, code)
}
