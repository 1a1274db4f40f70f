package mesh_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// lockedBuffer collects every service's logs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestHostileInputGetsClearErrorsAndLosesNothing sends the bad inputs of the security
// plan that the other tests do not cover, then checks the mesh still runs playbooks.
func TestHostileInputGetsClearErrorsAndLosesNothing(t *testing.T) {
	logs := &lockedBuffer{}
	m := startAuthMesh(t, mesh.Config{Log: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	c := newClient(t, m, m.AdminKey)
	ctx := context.Background()

	t.Run("a 50 MB body is refused before parsing", func(t *testing.T) {
		body := map[string]any{"content": strings.Repeat("a", 50<<20)}
		code, _, _ := c.rest(http.MethodPost, "/v1/playbooks", body)
		require.Equal(t, http.StatusRequestEntityTooLarge, code)
	})
	t.Run("wrong types name the field", func(t *testing.T) {
		code, out, _ := c.rest(http.MethodPost, "/v1/executions", map[string]any{"path": 42})
		require.Equal(t, http.StatusBadRequest, code)
		require.Contains(t, fmt.Sprint(out["message"]), "path")
	})
	t.Run("a 20,000-deep JSON workload is refused", func(t *testing.T) {
		deep := strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000)
		req, err := http.NewRequest(http.MethodPost, "http://"+m.HTTPAddr+"/v1/executions", strings.NewReader(`{"path":"x","workload":`+deep+`}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+m.AdminKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	})
	t.Run("an oversized gRPC message is refused", func(t *testing.T) {
		_, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: strings.Repeat("a", 9<<20)})
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	})
	t.Run("path traversal in a playbook path is refused", func(t *testing.T) {
		_, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: x, path: ../../etc/passwd}\nworkflow:\n  - step: start\n    tool: {kind: noop}\n"})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), "metadata.path")
	})
	t.Run("templates in user input are data, and internals are out of reach", func(t *testing.T) {
		_, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: echo, path: tests/echo}
workflow:
  - step: start
    tool: {kind: noop, result: {said: "{{ workload.text }}"}}
`})
		require.NoError(t, err)
		w, err := structpb.NewStruct(map[string]any{"text": "{{ 9*9 }} {% for i in range(10) %}x{% endfor %}"})
		require.NoError(t, err)
		started, err := c.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "tests/echo", Workload: w})
		require.NoError(t, err)
		done, err := c.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: started.GetExecutionId(), Timeout: durationpb.New(30 * time.Second)})
		require.NoError(t, err)
		require.Equal(t, "{{ 9*9 }} {% for i in range(10) %}x{% endfor %}", done.GetExecution().GetResult().GetStructValue().GetFields()["said"].GetStringValue(), "rendered literally")

		// Reaching for internals fails the render, naming the attribute: registration warns,
		// and the run ends FAILED instead of completing with null.
		for _, probe := range []string{"{{ workload.__class__ }}", "{{ lipsum.__globals__ }}", "{{ config }}"} {
			reg, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: fmt.Sprintf(`
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: peek, path: tests/peek}
workflow:
  - step: start
    tool: {kind: noop, result: "%s"}
`, probe)})
			require.NoError(t, err, probe)
			if !strings.Contains(probe, "config") { // a bare name may be a step's: only the run can tell
				require.Contains(t, strings.Join(reg.GetPlaybook().GetWarnings(), "\n"), "template: forbidden attribute", probe)
			}
			started, err := c.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "tests/peek"})
			require.NoError(t, err)
			done, err := c.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: started.GetExecutionId(), Timeout: durationpb.New(30 * time.Second)})
			require.NoError(t, err)
			x := done.GetExecution()
			require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, x.GetStatus(), probe)
			require.Contains(t, x.GetError().GetMessage(), "template: forbidden attribute", probe)
			require.Nil(t, x.GetResult(), probe)
		}
	})
	t.Run("YAML tags outside the core schema are refused with their line", func(t *testing.T) {
		for tag, line := range map[string]string{`!!python/object/apply:os.system ["id"]`: "line 5", "!custom 1": "line 5"} {
			src := "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: tagged, path: tests/tagged}\nworkload:\n  x: " + tag + "\nworkflow:\n  - step: start\n    tool: {kind: noop}\n"
			_, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: src})
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), "is not allowed", tag)
			require.Contains(t, status.Convert(err).Message(), line, tag)
			code, out, _ := c.rest(http.MethodPost, "/v1/playbooks", map[string]any{"content": src})
			require.Equal(t, http.StatusBadRequest, code, "%v", out)
			require.Contains(t, fmt.Sprint(out["message"]), "YAML tag")
		}
		_, err := c.cat.GetPlaybook(ctx, &apiv1.GetPlaybookRequest{Path: "tests/tagged"})
		require.Equal(t, codes.NotFound, status.Code(err), "nothing was registered")
	})
	t.Run("a credential's secret appears in no event, message or log", func(t *testing.T) {
		const sentinel = "SENTINEL-s3cr3t-7f1c"
		u, err := url.Parse(m.PostgresURL)
		require.NoError(t, err)
		c.wantREST(http.StatusOK, http.MethodPost, "/v1/credentials", map[string]any{"name": "pg_sentinel", "type": "postgres", "data": map[string]any{
			"host": u.Hostname(), "port": u.Port(), "user": u.User.Username(), "password": sentinel, "database": strings.TrimPrefix(u.Path, "/"),
		}})
		_, err = c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: pgs, path: tests/pgs}
workflow:
  - step: start
    tool: {kind: postgres, auth: pg_sentinel, query: "SELECT current_user AS who"}
    next: [{step: broken}]
  - step: broken
    tool: {kind: postgres, auth: pg_sentinel, query: "SELEC nonsense"}
`})
		require.NoError(t, err)
		started, err := c.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "tests/pgs"})
		require.NoError(t, err)
		done, err := c.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: started.GetExecutionId(), Timeout: durationpb.New(30 * time.Second)})
		require.NoError(t, err)
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, done.GetExecution().GetStatus(), "the second step fails on purpose")
		raw, err := json.Marshal(done.GetExecution())
		require.NoError(t, err)
		require.NotContains(t, string(raw), sentinel)

		conn, err := pgx.Connect(ctx, m.PostgresURL)
		require.NoError(t, err)
		defer func() { _ = conn.Close(ctx) }()
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM noetl.event WHERE position($1::bytea IN body) > 0`, []byte(sentinel)).Scan(&n))
		require.Zero(t, n, "event log")
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM noetl.result_chunk WHERE position($1::bytea IN data) > 0`, []byte(sentinel)).Scan(&n))
		require.Zero(t, n, "result store")

		nc, err := nats.Connect(m.NATSURL)
		require.NoError(t, err)
		defer nc.Close()
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		for _, name := range []string{"NOETL_EVENTS", "NOETL_COMMANDS", "NOETL_COMMITTED"} {
			s, err := js.Stream(ctx, name)
			require.NoError(t, err)
			info, err := s.Info(ctx)
			require.NoError(t, err)
			for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
				msg, err := s.GetMsg(ctx, seq)
				if err != nil {
					continue // removed (work queue) or expired
				}
				require.False(t, bytes.Contains(msg.Data, []byte(sentinel)), "%s message %d", name, seq)
			}
		}
		require.NotContains(t, logs.String(), sentinel, "logs")
	})
}
