package mesh_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/testkit"
	"github.com/noetl/noetl/services/orchestrator"
)

// A schedule of one second, ticked by two orchestrators (the mesh's and a second replica
// on the same database), starts one execution per tick, and they complete, each labelled
// with the schedule; pausing stops them; bad timings are refused naming the field over gRPC and
// REST; a viewer may list schedules but not create them.
func TestScheduleStartsExecutionsThatComplete(t *testing.T) {
	m := startAuthMesh(t, mesh.Config{})
	ctx := context.Background()
	admin := newClient(t, m, m.AdminKey)
	_, err := admin.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: quick})
	require.NoError(t, err)
	sched := apiv1.NewScheduleServiceClient(admin.conn)

	// A second orchestrator replica, with its own scheduler loop.
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	t.Cleanup(func() { cancel(); <-done })
	lis := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		return l
	}
	go func() {
		done <- orchestrator.Run(rctx, orchestrator.Config{PostgresURL: m.PostgresURLs.Orchestrator, InternalSecret: m.InternalSecret, NATSURL: m.NATSURL,
			StatebuilderAddr: m.StatebuilderAddr, GRPCListener: lis(), AdminListener: lis(), ScheduleEvery: 100 * time.Millisecond}, slog.New(slog.DiscardHandler))
	}()

	created, err := sched.CreateSchedule(ctx, &apiv1.CreateScheduleRequest{Schedule: &apiv1.Schedule{Name: "quick-every-second", Path: "tests/quick", Interval: durationpb.New(time.Second)}})
	require.NoError(t, err)
	require.NotEmpty(t, created.GetSchedule().GetId())

	completed := func() int {
		resp, err := admin.exe.ListExecutions(ctx, &apiv1.ListExecutionsRequest{Labels: map[string]string{"schedule": "quick-every-second"}, Status: eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, PageSize: 100})
		require.NoError(t, err)
		return len(resp.GetExecutions())
	}
	testkit.WaitFor(t, 60*time.Second, func() error {
		if n := completed(); n < 2 {
			return fmt.Errorf("%d scheduled executions completed, want 2", n)
		}
		return nil
	})
	// One execution per recorded tick: the ticks' executions are all distinct, and they are
	// every execution of the schedule.
	db, err := pgxext.Open(ctx, m.PostgresURLs.Orchestrator, 2)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	testkit.WaitFor(t, 30*time.Second, func() error {
		var ticks, started, distinct int
		if err := db.QueryRow(ctx, `SELECT count(*), count(execution_id), count(DISTINCT execution_id) FROM noetl.schedule_tick`).Scan(&ticks, &started, &distinct); err != nil {
			return err
		}
		resp, err := admin.exe.ListExecutions(ctx, &apiv1.ListExecutionsRequest{Labels: map[string]string{"schedule": "quick-every-second"}, PageSize: 500})
		if err != nil {
			return err
		}
		if ticks < 2 || ticks != started || started != distinct || distinct != len(resp.GetExecutions()) {
			return fmt.Errorf("%d ticks, %d started, %d distinct executions, %d executions of the schedule", ticks, started, distinct, len(resp.GetExecutions()))
		}
		return nil
	})
	got, err := sched.GetSchedule(ctx, &apiv1.GetScheduleRequest{Name: "quick-every-second"})
	require.NoError(t, err)
	require.NotEmpty(t, got.GetSchedule().GetLastExecutionId())
	require.Len(t, got.GetNextFireTimes(), 5)

	// Paused, it stops ticking: once the last started tick is done, the count holds.
	_, err = sched.PauseSchedule(ctx, &apiv1.PauseScheduleRequest{Name: "quick-every-second"})
	require.NoError(t, err)
	var all int
	testkit.WaitFor(t, 30*time.Second, func() error {
		resp, err := admin.exe.ListExecutions(ctx, &apiv1.ListExecutionsRequest{Labels: map[string]string{"schedule": "quick-every-second"}, PageSize: 500})
		require.NoError(t, err)
		all = len(resp.GetExecutions())
		if n := completed(); n != all {
			return fmt.Errorf("%d of %d scheduled executions completed", n, all)
		}
		return nil
	})
	list, err := sched.ListSchedules(ctx, &apiv1.ListSchedulesRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetSchedules(), 1)
	require.True(t, list.GetSchedules()[0].GetPaused())
	require.Nil(t, list.GetSchedules()[0].GetNextFireTime())

	_, err = sched.CreateSchedule(ctx, &apiv1.CreateScheduleRequest{Schedule: &apiv1.Schedule{Name: "bad", Path: "tests/quick", Cron: "* * *"}})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "cron:")
	out := admin.wantREST(http.StatusBadRequest, http.MethodPost, "/v1/schedules", map[string]any{"name": "bad", "path": "tests/quick", "cron": "0 9 * * *", "timeZone": "Mars/Base"})
	require.Contains(t, fmt.Sprint(out["message"]), "time_zone:")
	out = admin.wantREST(http.StatusOK, http.MethodPost, "/v1/schedules:preview", map[string]any{"schedule": map[string]any{"cron": "30 9 * * *", "timeZone": "America/New_York"}, "count": 2})
	require.Len(t, out["nextFireTimes"], 2, "%v", out)
	admin.wantREST(http.StatusOK, http.MethodGet, "/v1/schedules/quick-every-second", nil)

	viewerKey, _ := admin.createKey(map[string]any{"roles": []string{"viewer"}})
	viewer := newClient(t, m, viewerKey)
	viewer.wantREST(http.StatusOK, http.MethodGet, "/v1/schedules", nil)
	viewer.wantREST(http.StatusForbidden, http.MethodPost, "/v1/schedules", map[string]any{"name": "v", "path": "tests/quick", "cron": "@daily"})
	viewer.wantREST(http.StatusForbidden, http.MethodPost, "/v1/schedules/quick-every-second:resume", map[string]any{})

	admin.wantREST(http.StatusOK, http.MethodDelete, "/v1/schedules/quick-every-second", nil)
	admin.wantREST(http.StatusNotFound, http.MethodDelete, "/v1/schedules/quick-every-second", nil)
}
