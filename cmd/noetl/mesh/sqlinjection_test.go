package mesh_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/testkit"
)

// injectedTable is the exact input of issue 12, item 2: it closes the identifier's quotes
// and appends a statement.
const injectedTable = `users"; drop table victim; --`

// sqlPlaybook is a one-step playbook whose postgres tool runs against the target database.
func sqlPlaybook(path, toolKeys string) string {
	return fmt.Sprintf(`apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: sql, path: %s}
workflow:
  - step: start
    tool:
      kind: postgres
      auth: pg_target
%s`, path, toolKeys)
}

// registerBoth registers content over gRPC and over REST and returns the warnings each
// answered (the second registration finds the same version).
func registerBoth(t *testing.T, c *client, content string) (grpcWarnings, restWarnings string) {
	t.Helper()
	reg, err := c.cat.RegisterPlaybook(context.Background(), &apiv1.RegisterPlaybookRequest{Content: content})
	require.NoError(t, err)
	out := c.wantREST(http.StatusOK, http.MethodPost, "/v1/playbooks", map[string]any{"content": content})
	pb, _ := out["playbook"].(map[string]any)
	require.Equal(t, reg.GetPlaybook().GetVersion(), mustInt(t, pb["version"]), "the same version")
	var rest []string
	ws, _ := pb["warnings"].([]any)
	for _, w := range ws {
		rest = append(rest, fmt.Sprint(w))
	}
	return strings.Join(reg.GetPlaybook().GetWarnings(), "\n"), strings.Join(rest, "\n")
}

func mustInt(t *testing.T, v any) int64 {
	t.Helper()
	var n int64
	_, err := fmt.Sscan(fmt.Sprint(v), &n)
	require.NoError(t, err, "%v", v)
	return n
}

// runGRPC starts path over gRPC and waits for its end.
func runGRPC(t *testing.T, c *client, path string, workload map[string]any) *apiv1.Execution {
	t.Helper()
	ctx := context.Background()
	w, err := structpb.NewStruct(workload)
	require.NoError(t, err)
	started, err := c.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: path, Workload: w})
	require.NoError(t, err)
	done, err := c.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: started.GetExecutionId(), Timeout: durationpb.New(60 * time.Second)})
	require.NoError(t, err)
	x := done.GetExecution()
	require.NotEqual(t, eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, x.GetStatus(), "the wait ended before the execution")
	return x
}

// runREST starts path over REST and waits for its end; it returns the execution as JSON.
func runREST(t *testing.T, c *client, path string, workload map[string]any) map[string]any {
	t.Helper()
	started := c.wantREST(http.StatusOK, http.MethodPost, "/v1/executions", map[string]any{"path": path, "workload": workload})
	id, _ := started["executionId"].(string)
	require.NotEmpty(t, id, "%v", started)
	done := c.wantREST(http.StatusOK, http.MethodGet, "/v1/executions/"+id+":wait?timeout=60s", nil)
	x, _ := done["execution"].(map[string]any)
	require.NotEqual(t, "EXECUTION_STATUS_RUNNING", x["status"], "the wait ended before the execution")
	return x
}

func TestSQLInjectionThroughTemplatesIsRefused(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	c := newClient(t, m, m.AdminKey)
	ctx := context.Background()

	// The target database, reached through a stored credential.
	target := testkit.StartPostgres(t)
	u, err := url.Parse(target)
	require.NoError(t, err)
	c.wantREST(http.StatusOK, http.MethodPost, "/v1/credentials", map[string]any{"name": "pg_target", "type": "postgres", "data": map[string]any{
		"host": u.Hostname(), "port": u.Port(), "user": u.User.Username(), "database": strings.TrimPrefix(u.Path, "/"), "sslmode": "disable",
	}})
	db, err := pgx.Connect(ctx, target)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	_, err = db.Exec(ctx, `
		CREATE TABLE users (id int); INSERT INTO users VALUES (1), (2), (3);
		CREATE TABLE victim (id int, secret text); INSERT INTO victim VALUES (1, 'victim-secret-0451');
		CREATE TABLE "users""; drop table victim; --" (id int); INSERT INTO "users""; drop table victim; --" VALUES (1), (2);
		CREATE TABLE profile (id text PRIMARY KEY, user_name text);
		CREATE TABLE notes (n int);`)
	require.NoError(t, err)
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, db.QueryRow(ctx, q, args...).Scan(&n))
		return n
	}
	tables := count(`SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`)
	victimIntact := func() {
		t.Helper()
		require.Equal(t, 1, count(`SELECT count(*) FROM victim WHERE secret = 'victim-secret-0451'`), "the victim table and its row are intact")
		require.Equal(t, 3, count(`SELECT count(*) FROM users`))
		require.Equal(t, tables, count(`SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`), "no table made or dropped")
	}
	const multiple = "cannot insert multiple commands into a prepared statement (SQLSTATE 42601)"
	const why = "the SQL text is not the playbook's own literal text (it holds a template), so it runs as exactly one statement and nothing ran"

	t.Run("the injection of issue 12 fails the step and drops nothing", func(t *testing.T) {
		src := sqlPlaybook("tests/sql/inject", `      query: 'select count(*) from "{{ workload.t }}"'`+"\n")
		gw, rw := registerBoth(t, c, src)
		want := `line 9: step "start": template {{ workload.t }} is spliced into SQL text (tool.query); pass it through sql_literal or sql_ident, or bind it with params`
		require.Equal(t, want, gw, "gRPC registration warns")
		require.Equal(t, want, rw, "REST registration warns")

		x := runGRPC(t, c, "tests/sql/inject", map[string]any{"t": injectedTable})
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, x.GetStatus())
		require.Equal(t, []string{"start"}, x.GetFailedSteps())
		require.Equal(t, "step_failed", x.GetError().GetCode())
		require.Equal(t, "step start: tool postgres: postgres: "+multiple+"; "+why+
			"; quote values with sql_literal or sql_ident or bind them with tool.params, and set tool.multi_statement: true to run several statements of your own",
			x.GetError().GetMessage())
		require.Nil(t, x.GetResult(), "no result")
		require.Nil(t, x.GetSteps()["start"].GetResult(), "no step result")
		require.NotContains(t, fmt.Sprint(x), "victim-secret-0451")
		victimIntact()

		r := runREST(t, c, "tests/sql/inject", map[string]any{"t": injectedTable})
		require.Equal(t, "EXECUTION_STATUS_FAILED", r["status"])
		require.Equal(t, []any{"start"}, r["failedSteps"])
		e, _ := r["error"].(map[string]any)
		require.Equal(t, "step_failed", e["code"])
		require.Equal(t, x.GetError().GetMessage(), e["message"])
		require.Nil(t, r["result"])
		require.NotContains(t, fmt.Sprint(r), "victim-secret-0451")
		victimIntact()
	})

	t.Run("the same query through sql_ident counts the table named", func(t *testing.T) {
		src := sqlPlaybook("tests/sql/ident", `      query: 'select count(*) AS n from {{ workload.t | sql_ident }}'`+"\n")
		gw, rw := registerBoth(t, c, src)
		require.Empty(t, gw)
		require.Empty(t, rw)
		for name, want := range map[string]float64{"users": 3, injectedTable: 2} {
			x := runGRPC(t, c, "tests/sql/ident", map[string]any{"t": name})
			require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "%s: %v", name, x.GetError())
			rows := x.GetResult().GetStructValue().GetFields()["rows"].GetListValue().GetValues()
			require.Len(t, rows, 1)
			require.Equal(t, want, rows[0].GetStructValue().GetFields()["n"].GetNumberValue(), name)
		}
		r := runREST(t, c, "tests/sql/ident", map[string]any{"t": "no_such_table"})
		require.Equal(t, "EXECUTION_STATUS_FAILED", r["status"])
		e, _ := r["error"].(map[string]any)
		require.Contains(t, fmt.Sprint(e["message"]), `relation "no_such_table" does not exist (SQLSTATE 42P01)`)
		victimIntact()
	})

	t.Run("NoETL's quoted literals keep running, with the warning", func(t *testing.T) {
		src := sqlPlaybook("tests/sql/values", `      command: |
        INSERT INTO profile (id, user_name)
        VALUES ('{{ execution_id }}:{{ workload.user.name }}', '{{ workload.user.name }}')
        ON CONFLICT (id) DO NOTHING;
`)
		gw, rw := registerBoth(t, c, src)
		want := `line 11: step "start": templates {{ execution_id }}, {{ workload.user.name }} are spliced into SQL text (tool.command); pass them through sql_literal or sql_ident, or bind them with params`
		require.Equal(t, want, gw)
		require.Equal(t, want, rw)
		x := runGRPC(t, c, "tests/sql/values", map[string]any{"user": map[string]any{"name": "Ann"}})
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "%v", x.GetError())
		r := runREST(t, c, "tests/sql/values", map[string]any{"user": map[string]any{"name": "Bob"}})
		require.Equal(t, "EXECUTION_STATUS_COMPLETED", r["status"], "%v", r["error"])
		require.Equal(t, 1, count(`SELECT count(*) FROM profile WHERE id = $1 AND user_name = 'Ann'`, x.GetExecutionId()+":Ann"))
		require.Equal(t, 1, count(`SELECT count(*) FROM profile WHERE id = $1 AND user_name = 'Bob'`, fmt.Sprint(r["executionId"])+":Bob"))
	})

	t.Run("a literal script of several statements runs", func(t *testing.T) {
		src := sqlPlaybook("tests/sql/script", `      command: |
        CREATE TABLE script_t (id int);
        INSERT INTO script_t VALUES (1), (2);
        SELECT count(*) AS n FROM script_t;
`)
		gw, rw := registerBoth(t, c, src)
		require.Empty(t, gw)
		require.Empty(t, rw)
		x := runGRPC(t, c, "tests/sql/script", nil)
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "%v", x.GetError())
		res := x.GetResult().GetStructValue().GetFields()
		require.Equal(t, float64(3), res["statements"].GetNumberValue())
		require.Equal(t, float64(2), res["rows"].GetListValue().GetValues()[0].GetStructValue().GetFields()["n"].GetNumberValue())
		require.Equal(t, 2, count(`SELECT count(*) FROM script_t`))
		_, err := db.Exec(ctx, `DROP TABLE script_t`)
		require.NoError(t, err)
	})

	t.Run("a templated query of two statements fails unless multi_statement", func(t *testing.T) {
		keys := `      command: "INSERT INTO notes VALUES ({{ workload.n | sql_literal }}); SELECT count(*) AS n FROM notes"` + "\n"
		registerBoth(t, c, sqlPlaybook("tests/sql/two", keys))
		x := runGRPC(t, c, "tests/sql/two", map[string]any{"n": 7})
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, x.GetStatus())
		require.Contains(t, x.GetError().GetMessage(), multiple)
		require.Contains(t, x.GetError().GetMessage(), "multi_statement: true")
		r := runREST(t, c, "tests/sql/two", map[string]any{"n": 7})
		require.Equal(t, "EXECUTION_STATUS_FAILED", r["status"])
		require.Equal(t, 0, count(`SELECT count(*) FROM notes`), "nothing was written")

		registerBoth(t, c, sqlPlaybook("tests/sql/two-allowed", keys+"      multi_statement: true\n"))
		x = runGRPC(t, c, "tests/sql/two-allowed", map[string]any{"n": 7})
		require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "%v", x.GetError())
		require.Equal(t, float64(2), x.GetResult().GetStructValue().GetFields()["statements"].GetNumberValue())
		require.Equal(t, 1, count(`SELECT count(*) FROM notes WHERE n = 7`))

		// multi_statement must be the author's literal, never a template.
		_, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: sqlPlaybook("tests/sql/two-templated", keys+`      multi_statement: "{{ workload.multi }}"`+"\n")})
		require.Error(t, err)
		require.Contains(t, err.Error(), `step "start": field "tool.multi_statement": must be a literal true or false, not a template`)
		victimIntact()
	})
}
