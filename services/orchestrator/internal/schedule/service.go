package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/playbook"
)

// Service implements ScheduleService over noetl.schedule.
type Service struct {
	orchv1.UnimplementedScheduleServiceServer

	// DB is the orchestrator's pool.
	DB *pgxpool.Pool
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// invalid is the InvalidArgument error of err, a *FieldError or another.
func invalid(err error) error {
	return status.Error(codes.InvalidArgument, err.Error())
}

const columns = `name, id, cron, interval_ms, time_zone, path, version, workload, catch_up, max_catch_up, paused, anchor_at, next_fire_at, last_fire_at, last_execution_id, created_by, created_at`

// row is a stored schedule.
type row struct {
	Tenant, Name, ID, Cron, TimeZone, Path, CatchUp, LastExecutionID, CreatedBy string
	IntervalMS, Version                                                         int64
	Workload                                                                    []byte
	MaxCatchUp                                                                  int
	Paused                                                                      bool
	Anchor, NextFire, Created                                                   time.Time
	LastFire                                                                    *time.Time
}

func scanRow(r pgx.Row, tenant string) (*row, error) {
	x := &row{Tenant: tenant}
	err := r.Scan(&x.Name, &x.ID, &x.Cron, &x.IntervalMS, &x.TimeZone, &x.Path, &x.Version, &x.Workload, &x.CatchUp, &x.MaxCatchUp, &x.Paused, &x.Anchor, &x.NextFire, &x.LastFire, &x.LastExecutionID, &x.CreatedBy, &x.Created)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNotFound
	}
	return x, err
}

func (x *row) timing() (*Timing, error) {
	return ParseTiming(x.Cron, time.Duration(x.IntervalMS)*time.Millisecond, x.TimeZone, x.Anchor)
}

func (x *row) proto() *orchv1.Schedule {
	p := &orchv1.Schedule{Name: x.Name, Id: x.ID, Tenant: x.Tenant, Cron: x.Cron, TimeZone: x.TimeZone, Path: x.Path, Version: x.Version,
		CatchUp: x.CatchUp, MaxCatchUp: int32(x.MaxCatchUp), Paused: x.Paused, LastExecutionId: x.LastExecutionID, CreatedBy: x.CreatedBy, CreateTime: timestamppb.New(x.Created)}
	if x.IntervalMS > 0 {
		p.Interval = durationpb.New(time.Duration(x.IntervalMS) * time.Millisecond)
	}
	if !x.Paused {
		p.NextFireTime = timestamppb.New(x.NextFire)
	}
	if x.LastFire != nil {
		p.LastFireTime = timestamppb.New(*x.LastFire)
	}
	var w map[string]any
	if json.Unmarshal(x.Workload, &w) == nil && len(w) > 0 {
		p.Workload, _ = structpb.NewStruct(w)
	}
	return p
}

// timingOf parses a request's timing fields.
func timingOf(p *orchv1.Schedule, anchor time.Time) (*Timing, error) {
	var iv time.Duration
	if d := p.GetInterval(); d != nil {
		if !d.IsValid() || d.AsDuration() <= 0 {
			return nil, &FieldError{"interval", "must be a positive duration"}
		}
		iv = d.AsDuration().Truncate(time.Millisecond)
	}
	return ParseTiming(p.GetCron(), iv, p.GetTimeZone(), anchor)
}

// CreateSchedule implements ScheduleService.
func (s *Service) CreateSchedule(ctx context.Context, req *orchv1.CreateScheduleRequest) (*orchv1.CreateScheduleResponse, error) {
	tenant := domain.TenantOrDefault(req.GetTenant())
	p := req.GetSchedule()
	if !nameRE.MatchString(p.GetName()) {
		return nil, status.Errorf(codes.InvalidArgument, "name: %q does not match [a-z0-9][a-z0-9_.-]{0,62}", p.GetName())
	}
	path := playbook.CleanPath(p.GetPath())
	if path == "" {
		return nil, status.Error(codes.InvalidArgument, "path: required")
	}
	if p.GetVersion() < 0 {
		return nil, status.Error(codes.InvalidArgument, "version: must be zero (the latest) or positive")
	}
	caller := auth.FromContext(ctx)
	if domain.PoolFor(path) == "system" && !caller.Can(auth.PermSystem) {
		return nil, status.Error(codes.PermissionDenied, "path: scheduling system/ playbooks requires the system role")
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	t, err := timingOf(p, now)
	if err != nil {
		return nil, invalid(err)
	}
	policy, maxCU, err := CheckCatchUp(p.GetCatchUp(), int(p.GetMaxCatchUp()))
	if err != nil {
		return nil, invalid(err)
	}
	workload := []byte("{}")
	if w := p.GetWorkload(); w != nil {
		if workload, err = json.Marshal(w.AsMap()); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "workload: %v", err)
		}
		if len(workload) > domain.MaxWorkloadBytes {
			return nil, status.Errorf(codes.ResourceExhausted, "workload: %d bytes exceeds the limit of %d bytes", len(workload), domain.MaxWorkloadBytes)
		}
	}
	tz := p.GetTimeZone()
	if tz == "" {
		tz = "UTC"
	}
	iv := int64(0)
	if p.GetInterval() != nil {
		iv = p.GetInterval().AsDuration().Milliseconds()
	}
	createdBy := ""
	if caller != nil {
		createdBy = caller.Subject
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	x, err := scanRow(s.DB.QueryRow(ctx, `INSERT INTO noetl.schedule (tenant, name, id, cron, interval_ms, time_zone, path, version, workload, catch_up, max_catch_up, anchor_at, next_fire_at, created_by, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $12)
		ON CONFLICT (tenant, name) DO NOTHING RETURNING `+columns,
		tenant, p.GetName(), id, p.GetCron(), iv, tz, path, p.GetVersion(), workload, policy, maxCU, now, t.Next(now), createdBy), tenant)
	if errors.Is(err, errNotFound) {
		return nil, status.Errorf(codes.AlreadyExists, "name: schedule %q already exists", p.GetName())
	}
	if err != nil {
		return nil, err
	}
	return &orchv1.CreateScheduleResponse{Schedule: x.proto()}, nil
}

func (s *Service) get(ctx context.Context, tenant, name string) (*row, error) {
	x, err := scanRow(s.DB.QueryRow(ctx, `SELECT `+columns+` FROM noetl.schedule WHERE tenant = $1 AND name = $2`, tenant, name), tenant)
	if errors.Is(err, errNotFound) {
		return nil, status.Errorf(codes.NotFound, "schedule %q not found", name)
	}
	return x, err
}

func previewCount(n int32) int {
	switch {
	case n <= 0:
		return 5
	case n > 100:
		return 100
	}
	return int(n)
}

// GetSchedule implements ScheduleService.
func (s *Service) GetSchedule(ctx context.Context, req *orchv1.GetScheduleRequest) (*orchv1.GetScheduleResponse, error) {
	x, err := s.get(ctx, domain.TenantOrDefault(req.GetTenant()), req.GetName())
	if err != nil {
		return nil, err
	}
	out := &orchv1.GetScheduleResponse{Schedule: x.proto()}
	if !x.Paused {
		t, err := x.timing()
		if err != nil {
			return nil, err
		}
		out.NextFireTimes = append(out.NextFireTimes, timestamppb.New(x.NextFire))
		for _, at := range t.Preview(x.NextFire, previewCount(req.GetPreview())-1) {
			out.NextFireTimes = append(out.NextFireTimes, timestamppb.New(at))
		}
	}
	return out, nil
}

// ListSchedules implements ScheduleService.
func (s *Service) ListSchedules(ctx context.Context, req *orchv1.ListSchedulesRequest) (*orchv1.ListSchedulesResponse, error) {
	n := int(req.GetPageSize())
	if n <= 0 {
		n = 50
	}
	n = min(n, 500)
	tenant := domain.TenantOrDefault(req.GetTenant())
	rows, err := s.DB.Query(ctx, `SELECT `+columns+` FROM noetl.schedule WHERE tenant = $1 AND name > $2 ORDER BY name LIMIT $3`, tenant, req.GetPageToken(), n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := &orchv1.ListSchedulesResponse{}
	for rows.Next() {
		x, err := scanRow(rows, tenant)
		if err != nil {
			return nil, err
		}
		out.Schedules = append(out.Schedules, x.proto())
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out.Schedules) == n {
		out.NextPageToken = out.Schedules[n-1].GetName()
	}
	return out, nil
}

// PauseSchedule implements ScheduleService.
func (s *Service) PauseSchedule(ctx context.Context, req *orchv1.PauseScheduleRequest) (*orchv1.PauseScheduleResponse, error) {
	tenant := domain.TenantOrDefault(req.GetTenant())
	if _, err := s.DB.Exec(ctx, `UPDATE noetl.schedule SET paused = true WHERE tenant = $1 AND name = $2`, tenant, req.GetName()); err != nil {
		return nil, err
	}
	x, err := s.get(ctx, tenant, req.GetName())
	if err != nil {
		return nil, err
	}
	return &orchv1.PauseScheduleResponse{Schedule: x.proto()}, nil
}

// ResumeSchedule implements ScheduleService: the next tick is the first after now.
func (s *Service) ResumeSchedule(ctx context.Context, req *orchv1.ResumeScheduleRequest) (*orchv1.ResumeScheduleResponse, error) {
	tenant := domain.TenantOrDefault(req.GetTenant())
	x, err := s.get(ctx, tenant, req.GetName())
	if err != nil {
		return nil, err
	}
	if x.Paused {
		t, err := x.timing()
		if err != nil {
			return nil, err
		}
		if _, err := s.DB.Exec(ctx, `UPDATE noetl.schedule SET paused = false, next_fire_at = $3 WHERE tenant = $1 AND name = $2 AND paused`, tenant, req.GetName(), t.Next(s.now())); err != nil {
			return nil, err
		}
		if x, err = s.get(ctx, tenant, req.GetName()); err != nil {
			return nil, err
		}
	}
	return &orchv1.ResumeScheduleResponse{Schedule: x.proto()}, nil
}

// DeleteSchedule implements ScheduleService.
func (s *Service) DeleteSchedule(ctx context.Context, req *orchv1.DeleteScheduleRequest) (*orchv1.DeleteScheduleResponse, error) {
	tag, err := s.DB.Exec(ctx, `DELETE FROM noetl.schedule WHERE tenant = $1 AND name = $2`, domain.TenantOrDefault(req.GetTenant()), req.GetName())
	if err != nil {
		return nil, err
	}
	if tag.RowsAffected() == 0 {
		return nil, status.Errorf(codes.NotFound, "schedule %q not found", req.GetName())
	}
	return &orchv1.DeleteScheduleResponse{}, nil
}

// PreviewSchedule implements ScheduleService.
func (s *Service) PreviewSchedule(_ context.Context, req *orchv1.PreviewScheduleRequest) (*orchv1.PreviewScheduleResponse, error) {
	now := s.now()
	t, err := timingOf(req.GetSchedule(), now)
	if err != nil {
		return nil, invalid(err)
	}
	out := &orchv1.PreviewScheduleResponse{}
	for _, at := range t.Preview(now, previewCount(req.GetCount())) {
		out.NextFireTimes = append(out.NextFireTimes, timestamppb.New(at))
	}
	return out, nil
}

// Key returns the idempotency key of the start of schedule id's tick at fireAt.
func Key(id string, fireAt time.Time) string {
	return fmt.Sprintf("schedule/%s/%s", id, fireAt.UTC().Format(time.RFC3339Nano))
}
