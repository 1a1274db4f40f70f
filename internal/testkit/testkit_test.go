package testkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { Main(m) }

func TestPostgresDatabasesAreIsolated(t *testing.T) {
	t0 := time.Now()
	a := StartPostgres(t)
	t.Logf("first StartPostgres (shared cluster start): %v", time.Since(t0))
	t0 = time.Now()
	b := StartPostgres(t)
	t.Logf("second StartPostgres (create database): %v", time.Since(t0))
	require.NotEqual(t, a, b)

	ctx := context.Background()
	ca, err := pgx.Connect(ctx, a)
	require.NoError(t, err)
	defer func() { _ = ca.Close(ctx) }()
	cb, err := pgx.Connect(ctx, b)
	require.NoError(t, err)
	defer func() { _ = cb.Close(ctx) }()

	_, err = ca.Exec(ctx, "CREATE TABLE only_in_a (id int)")
	require.NoError(t, err)
	_, err = cb.Exec(ctx, "SELECT * FROM only_in_a")
	require.Error(t, err, "table from database a visible in database b")

	var dbA, dbB string
	require.NoError(t, ca.QueryRow(ctx, "SELECT current_database()").Scan(&dbA))
	require.NoError(t, cb.QueryRow(ctx, "SELECT current_database()").Scan(&dbB))
	require.NotEqual(t, dbA, dbB)
	require.True(t, strings.HasPrefix(dbA, "t_testpostgresdatabasesareisolated_"), dbA)
}

func TestPostgresDatabaseDroppedAtCleanup(t *testing.T) {
	var name string
	t.Run("inner", func(t *testing.T) {
		u := StartPostgres(t)
		ctx := context.Background()
		c, err := pgx.Connect(ctx, u)
		require.NoError(t, err)
		require.NoError(t, c.QueryRow(ctx, "SELECT current_database()").Scan(&name))
		// Deliberately left open: cleanup must still drop the database.
	})
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pgAdmin)
	require.NoError(t, err)
	defer func() { _ = c.Close(ctx) }()
	var n int
	require.NoError(t, c.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n))
	require.Zero(t, n, "database %s still exists", name)
}

func TestPostgresMissingBinaries(t *testing.T) {
	if os.Getenv("TESTKIT_CHILD") != "" {
		t.Skip("child process")
	}
	run := func(ci string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPostgresDatabasesAreIsolated$", "-test.v", "-test.count=1")
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "CI=") && !strings.HasPrefix(kv, EnvPGURL+"=") {
				env = append(env, kv)
			}
		}
		env = append(env, "TESTKIT_CHILD=1", "NOETL_PG_BIN=/nonexistent/bin")
		if ci != "" {
			env = append(env, "CI="+ci)
		}
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("")
	require.NoError(t, err, out)
	require.Contains(t, out, "--- SKIP")
	require.Contains(t, out, "postgres binaries not found: install postgresql (apt-get install -y postgresql) or set NOETL_PG_URL")

	out, err = run("true")
	require.Error(t, err, out)
	require.Contains(t, out, "--- FAIL")
	require.Contains(t, out, "postgres binaries not found")
}

func TestStartNATS(t *testing.T) {
	u := StartNATS(t)
	nc, err := nats.Connect(u)
	require.NoError(t, err)
	defer nc.Close()
	sub, err := nc.SubscribeSync("x")
	require.NoError(t, err)
	require.NoError(t, nc.Publish("x", []byte("hi")))
	msg, err := sub.NextMsg(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "hi", string(msg.Data))
	require.NotEqual(t, u, StartNATS(t), "each call gets its own server")
}

func TestWaitFor(t *testing.T) {
	calls := 0
	WaitFor(t, 5*time.Second, func() error {
		calls++
		if calls < 5 {
			return errors.New("not yet")
		}
		return nil
	})
	require.Equal(t, 5, calls, "polled until the condition held, and no more")

	ft := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() { // Fatalf ends the goroutine like the real one does
		defer close(done)
		WaitFor(ft, 50*time.Millisecond, func() error { return errors.New("still down") })
	}()
	<-done
	require.Contains(t, ft.msg, "still down")
	require.Contains(t, ft.msg, "50ms")
}

func TestFreePort(t *testing.T) {
	p := FreePort(t)
	require.Greater(t, p, 0)
}

func TestDBName(t *testing.T) {
	n := dbName("TestX/sub_test#01" + strings.Repeat("y", 100))
	require.LessOrEqual(t, len(n), 63)
	require.True(t, strings.HasPrefix(n, "t_testx_sub_test_01y"), n)
	require.NotEqual(t, n, dbName("TestX/sub_test#01"+strings.Repeat("y", 100)))
}

func TestWithDatabase(t *testing.T) {
	u, err := withDatabase("postgres://u:p@h:5/old?sslmode=disable", "new")
	require.NoError(t, err)
	require.Equal(t, "postgres://u:p@h:5/new?sslmode=disable", u)
	_, err = withDatabase("host=h dbname=x", "new")
	require.Error(t, err)
}

// fakeTB records Fatalf instead of failing the real test.
type fakeTB struct {
	testing.TB
	msg string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
