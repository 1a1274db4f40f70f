package schedule

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/failpoint"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// clock is a settable clock shared by a test's services and loops.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

// starter records the starts it is asked for, by key, and answers with an execution id of
// the key, as StartExecution does; fail, when set, decides the error of a call.
type starter struct {
	mu    sync.Mutex
	calls map[string]int
	fail  func(t Tick, call int) error
}

func (s *starter) Start(_ context.Context, t Tick) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.calls[t.Key]++
	if s.fail != nil {
		if err := s.fail(t, s.calls[t.Key]); err != nil {
			return "", err
		}
	}
	return "exec:" + t.Key, nil
}

func (s *starter) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

func openDB(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	db, err := pgxext.Open(context.Background(), url, 8)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

var admin = auth.NewContext(context.Background(), &auth.Principal{Tenant: "acme", Subject: "apikey:a", Roles: []string{auth.RoleAdmin}})

func create(t *testing.T, svc *Service, s *orchv1.Schedule) *orchv1.Schedule {
	t.Helper()
	resp, err := svc.CreateSchedule(admin, &orchv1.CreateScheduleRequest{Tenant: "acme", Schedule: s})
	require.NoError(t, err)
	return resp.GetSchedule()
}

func pendingTicks(t *testing.T, db *pgxpool.Pool, id string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM noetl.schedule_tick WHERE schedule_id = $1 AND started_at IS NULL`, id).Scan(&n))
	return n
}

// Two loops on one database (two orchestrator replicas) start each tick exactly once.
func TestTwoLoopsStartEachTickOnce(t *testing.T) {
	url := testkit.StartMigratedPostgres(t)
	t0 := time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)
	c := &clock{t: t0}
	svc := &Service{DB: openDB(t, url), Now: c.Now}
	sc := create(t, svc, &orchv1.Schedule{Name: "every-second", Interval: durationpb.New(time.Second), Path: "demo/hello", CatchUp: CatchUpAll, MaxCatchUp: 100})
	st := &starter{}
	loops := []*Loop{
		{DB: openDB(t, url), Start: st.Start, Now: c.Now},
		{DB: openDB(t, url), Start: st.Start, Now: c.Now},
	}
	for step := 1; step <= 20; step++ {
		c.Set(t0.Add(time.Duration(step)*time.Second + 500*time.Millisecond))
		var wg sync.WaitGroup
		for _, l := range loops {
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					require.NoError(t, l.Round(context.Background()))
				}()
			}
		}
		wg.Wait()
	}
	calls := st.snapshot()
	require.Len(t, calls, 20, "one start per tick, ticks 1..20")
	for k, n := range calls {
		require.Equal(t, 1, n, "tick %s started %d times", k, n)
	}
	require.Contains(t, calls, Key(sc.GetId(), t0.Add(20*time.Second)))
	got, err := svc.GetSchedule(admin, &orchv1.GetScheduleRequest{Tenant: "acme", Name: "every-second", Preview: 3})
	require.NoError(t, err)
	require.Equal(t, "exec:"+Key(sc.GetId(), t0.Add(20*time.Second)), got.GetSchedule().GetLastExecutionId())
	require.Equal(t, t0.Add(21*time.Second), got.GetSchedule().GetNextFireTime().AsTime())
	require.Len(t, got.GetNextFireTimes(), 3)
	require.Equal(t, t0.Add(23*time.Second), got.GetNextFireTimes()[2].AsTime())
}

// A replica that crashes after recording a tick and before starting it leaves the tick
// pending; another replica starts it. A start whose acknowledgement is lost is retried
// with the same idempotency key, which finds the same execution.
func TestCrashBetweenTickAndStart(t *testing.T) {
	url := testkit.StartMigratedPostgres(t)
	t0 := time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)
	c := &clock{t: t0}
	db := openDB(t, url)
	svc := &Service{DB: db, Now: c.Now}
	sc := create(t, svc, &orchv1.Schedule{Name: "nightly", Cron: "0 2 * * *", TimeZone: "Europe/Berlin", Path: "demo/hello"})
	fire := time.Date(2026, 3, 8, 1, 0, 0, 0, time.UTC) // 02:00 in Berlin
	require.Equal(t, fire, sc.GetNextFireTime().AsTime())

	st := &starter{fail: func(_ Tick, call int) error {
		if call == 1 {
			return status.Error(codes.Unavailable, "start was published but not acknowledged")
		}
		return nil
	}}
	crashed := &Loop{DB: db, Start: st.Start, Now: c.Now}
	c.Set(fire.Add(2 * time.Second))
	failpoint.Enable(failpoint.OrchestratorAfterTick, 1)
	t.Cleanup(failpoint.Reset)
	require.ErrorIs(t, crashed.Round(context.Background()), failpoint.ErrInjected)
	require.Empty(t, st.snapshot(), "recorded, not started")
	require.Equal(t, 1, pendingTicks(t, db, sc.GetId()))

	other := &Loop{DB: openDB(t, url), Start: st.Start, Now: c.Now}
	require.NoError(t, other.Round(context.Background())) // the start's ack is lost
	require.Equal(t, 1, pendingTicks(t, db, sc.GetId()))
	require.NoError(t, other.Round(context.Background())) // retried with the same key
	require.Equal(t, 0, pendingTicks(t, db, sc.GetId()))
	require.Equal(t, map[string]int{Key(sc.GetId(), fire): 2}, st.snapshot())
	var exec string
	require.NoError(t, db.QueryRow(context.Background(), `SELECT execution_id FROM noetl.schedule_tick WHERE schedule_id = $1`, sc.GetId()).Scan(&exec))
	require.Equal(t, "exec:"+Key(sc.GetId(), fire), exec)
	// The recorded tick advanced the schedule: the next round starts nothing more.
	require.NoError(t, crashed.Round(context.Background()))
	require.Len(t, st.snapshot(), 1)
}

// A start refused for good (the playbook is gone) is not retried.
func TestRefusedStartIsNotRetried(t *testing.T) {
	url := testkit.StartMigratedPostgres(t)
	t0 := time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)
	c := &clock{t: t0}
	db := openDB(t, url)
	svc := &Service{DB: db, Now: c.Now}
	sc := create(t, svc, &orchv1.Schedule{Name: "gone", Interval: durationpb.New(time.Minute), Path: "demo/gone"})
	st := &starter{fail: func(Tick, int) error {
		return status.Error(codes.NotFound, `playbook "demo/gone" (version 0) not found`)
	}}
	l := &Loop{DB: db, Start: st.Start, Now: c.Now}
	c.Set(t0.Add(61 * time.Second))
	require.NoError(t, l.Round(context.Background()))
	require.NoError(t, l.Round(context.Background()))
	require.Len(t, st.snapshot(), 1)
	var msg string
	require.NoError(t, db.QueryRow(context.Background(), `SELECT error FROM noetl.schedule_tick WHERE schedule_id = $1`, sc.GetId()).Scan(&msg))
	require.Contains(t, msg, "not found")
}

func TestPauseResumeAndCatchUpSkip(t *testing.T) {
	url := testkit.StartMigratedPostgres(t)
	t0 := time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)
	c := &clock{t: t0}
	db := openDB(t, url)
	svc := &Service{DB: db, Now: c.Now}
	sc := create(t, svc, &orchv1.Schedule{Name: "minutely", Cron: "* * * * *", Path: "demo/hello"})
	st := &starter{}
	l := &Loop{DB: db, Start: st.Start, Now: c.Now}

	p, err := svc.PauseSchedule(admin, &orchv1.PauseScheduleRequest{Tenant: "acme", Name: "minutely"})
	require.NoError(t, err)
	require.True(t, p.GetSchedule().GetPaused())
	require.Nil(t, p.GetSchedule().GetNextFireTime())
	c.Set(t0.Add(10 * time.Minute))
	require.NoError(t, l.Round(context.Background()))
	require.Empty(t, st.snapshot(), "a paused schedule does not tick")

	r, err := svc.ResumeSchedule(admin, &orchv1.ResumeScheduleRequest{Tenant: "acme", Name: "minutely"})
	require.NoError(t, err)
	require.False(t, r.GetSchedule().GetPaused())
	require.Equal(t, t0.Add(11*time.Minute), r.GetSchedule().GetNextFireTime().AsTime(), "resumed from the first tick after now")
	require.NoError(t, l.Round(context.Background()))
	require.Empty(t, st.snapshot(), "ticks missed while paused are not run")

	// Down for an hour under the default policy (skip): nothing late runs; the schedule
	// picks up at the next tick.
	c.Set(t0.Add(70*time.Minute + 5*time.Second))
	require.NoError(t, l.Round(context.Background()))
	require.Equal(t, map[string]int{Key(sc.GetId(), t0.Add(70*time.Minute)): 1}, st.snapshot(), "skip runs the tick within the grace")
	c.Set(t0.Add(75*time.Minute + 30*time.Second))
	require.NoError(t, l.Round(context.Background()))
	require.Len(t, st.snapshot(), 2, "one more: the 75th minute, within the grace; the 71st to 74th are skipped")
}

func TestServiceRefusesBadSchedules(t *testing.T) {
	url := testkit.StartMigratedPostgres(t)
	svc := &Service{DB: openDB(t, url)}
	cases := []struct {
		s     *orchv1.Schedule
		field string
	}{
		{&orchv1.Schedule{Name: "Bad Name", Cron: "* * * * *", Path: "a/b"}, "name:"},
		{&orchv1.Schedule{Name: "x", Cron: "* * * * *"}, "path:"},
		{&orchv1.Schedule{Name: "x", Cron: "* * *", Path: "a/b"}, "cron:"},
		{&orchv1.Schedule{Name: "x", Cron: "* * * * *", TimeZone: "Nowhere/City", Path: "a/b"}, "time_zone:"},
		{&orchv1.Schedule{Name: "x", Interval: durationpb.New(time.Millisecond), Path: "a/b"}, "interval:"},
		{&orchv1.Schedule{Name: "x", Cron: "* * * * *", Path: "a/b", CatchUp: "never"}, "catch_up:"},
		{&orchv1.Schedule{Name: "x", Cron: "* * * * *", Path: "a/b", CatchUp: "all", MaxCatchUp: 5000}, "max_catch_up:"},
	}
	for _, tc := range cases {
		_, err := svc.CreateSchedule(admin, &orchv1.CreateScheduleRequest{Tenant: "acme", Schedule: tc.s})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", tc.s)
		require.Contains(t, status.Convert(err).Message(), tc.field)
	}
	_, err := svc.CreateSchedule(admin, &orchv1.CreateScheduleRequest{Tenant: "acme", Schedule: &orchv1.Schedule{Name: "sys", Cron: "@hourly", Path: "system/retention"}})
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	create(t, svc, &orchv1.Schedule{Name: "dup", Cron: "@hourly", Path: "a/b"})
	_, err = svc.CreateSchedule(admin, &orchv1.CreateScheduleRequest{Tenant: "acme", Schedule: &orchv1.Schedule{Name: "dup", Cron: "@hourly", Path: "a/b"}})
	require.Equal(t, codes.AlreadyExists, status.Code(err))

	prev, err := svc.PreviewSchedule(admin, &orchv1.PreviewScheduleRequest{Schedule: &orchv1.Schedule{Cron: "0 9 * * 1-5", TimeZone: "Asia/Tokyo"}, Count: 4})
	require.NoError(t, err)
	require.Len(t, prev.GetNextFireTimes(), 4)
	for _, ts := range prev.GetNextFireTimes() {
		tk := ts.AsTime().In(mustLoc(t, "Asia/Tokyo"))
		require.Equal(t, 9, tk.Hour())
		require.NotContains(t, []time.Weekday{time.Saturday, time.Sunday}, tk.Weekday())
	}
	list, err := svc.ListSchedules(admin, &orchv1.ListSchedulesRequest{Tenant: "acme"})
	require.NoError(t, err)
	require.Len(t, list.GetSchedules(), 1)
	_, err = svc.DeleteSchedule(admin, &orchv1.DeleteScheduleRequest{Tenant: "acme", Name: "dup"})
	require.NoError(t, err)
	_, err = svc.DeleteSchedule(admin, &orchv1.DeleteScheduleRequest{Tenant: "acme", Name: "dup"})
	require.Equal(t, codes.NotFound, status.Code(err))
	_, err = svc.GetSchedule(admin, &orchv1.GetScheduleRequest{Tenant: "other", Name: "dup"})
	require.Equal(t, codes.NotFound, status.Code(err))
}

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}
