package api

import (
	"context"

	"google.golang.org/protobuf/proto"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
)

// The messages of noetl.orchestrator.v1.ScheduleService are those of the public
// ScheduleService field for field (plus tenant, field 15, of every request), so a message
// converts by its wire form.

// toInternal converts a public request to its internal twin and sets the caller's tenant.
func toInternal[T interface {
	proto.Message
	*R
}, R any](ctx context.Context, from proto.Message, setTenant func(T, string)) (T, error) {
	b, err := proto.Marshal(from)
	if err != nil {
		return nil, err
	}
	to := T(new(R))
	if err := proto.Unmarshal(b, to); err != nil {
		return nil, err
	}
	setTenant(to, tenant(ctx))
	return to, nil
}

// toPublic converts an internal response to its public twin.
func toPublic[T interface {
	proto.Message
	*R
}, R any](from proto.Message, err error) (T, error) {
	if err != nil {
		return nil, err
	}
	b, err := proto.Marshal(from)
	if err != nil {
		return nil, err
	}
	to := T(new(R))
	if err := proto.Unmarshal(b, to); err != nil {
		return nil, err
	}
	return to, nil
}

// CreateSchedule implements ScheduleService.
func (s *Server) CreateSchedule(ctx context.Context, req *apiv1.CreateScheduleRequest) (*apiv1.CreateScheduleResponse, error) {
	in, err := toInternal(ctx, req, func(r *orchv1.CreateScheduleRequest, t string) { r.Tenant = t })
	if err != nil {
		return nil, err
	}
	if w := req.GetSchedule().GetWorkload(); w != nil {
		if n := proto.Size(w); n > MaxWorkloadBytes {
			return nil, tooLarge("WORKLOAD_TOO_LARGE", "schedule.workload", n, MaxWorkloadBytes)
		}
	}
	resp, err := s.Schedules.CreateSchedule(ctx, in)
	return toPublic[*apiv1.CreateScheduleResponse](resp, err)
}

// GetSchedule implements ScheduleService.
func (s *Server) GetSchedule(ctx context.Context, req *apiv1.GetScheduleRequest) (*apiv1.GetScheduleResponse, error) {
	in, err := toInternal(ctx, req, func(r *orchv1.GetScheduleRequest, t string) { r.Tenant = t })
	if err != nil {
		return nil, err
	}
	resp, err := s.Schedules.GetSchedule(ctx, in)
	return toPublic[*apiv1.GetScheduleResponse](resp, err)
}

// ListSchedules implements ScheduleService.
func (s *Server) ListSchedules(ctx context.Context, req *apiv1.ListSchedulesRequest) (*apiv1.ListSchedulesResponse, error) {
	in, err := toInternal(ctx, req, func(r *orchv1.ListSchedulesRequest, t string) { r.Tenant = t })
	if err != nil {
		return nil, err
	}
	resp, err := s.Schedules.ListSchedules(ctx, in)
	return toPublic[*apiv1.ListSchedulesResponse](resp, err)
}

// PauseSchedule implements ScheduleService.
func (s *Server) PauseSchedule(ctx context.Context, req *apiv1.PauseScheduleRequest) (*apiv1.PauseScheduleResponse, error) {
	in, err := toInternal(ctx, req, func(r *orchv1.PauseScheduleRequest, t string) { r.Tenant = t })
	if err != nil {
		return nil, err
	}
	resp, err := s.Schedules.PauseSchedule(ctx, in)
	return toPublic[*apiv1.PauseScheduleResponse](resp, err)
}

// ResumeSchedule implements ScheduleService.
func (s *Server) ResumeSchedule(ctx context.Context, req *apiv1.ResumeScheduleRequest) (*apiv1.ResumeScheduleResponse, error) {
	in, err := toInternal(ctx, req, func(r *orchv1.ResumeScheduleRequest, t string) { r.Tenant = t })
	if err != nil {
		return nil, err
	}
	resp, err := s.Schedules.ResumeSchedule(ctx, in)
	return toPublic[*apiv1.ResumeScheduleResponse](resp, err)
}

// DeleteSchedule implements ScheduleService.
func (s *Server) DeleteSchedule(ctx context.Context, req *apiv1.DeleteScheduleRequest) (*apiv1.DeleteScheduleResponse, error) {
	in, err := toInternal(ctx, req, func(r *orchv1.DeleteScheduleRequest, t string) { r.Tenant = t })
	if err != nil {
		return nil, err
	}
	resp, err := s.Schedules.DeleteSchedule(ctx, in)
	return toPublic[*apiv1.DeleteScheduleResponse](resp, err)
}

// PreviewSchedule implements ScheduleService.
func (s *Server) PreviewSchedule(ctx context.Context, req *apiv1.PreviewScheduleRequest) (*apiv1.PreviewScheduleResponse, error) {
	in, err := toInternal(ctx, req, func(r *orchv1.PreviewScheduleRequest, t string) { r.Tenant = t })
	if err != nil {
		return nil, err
	}
	resp, err := s.Schedules.PreviewSchedule(ctx, in)
	return toPublic[*apiv1.PreviewScheduleResponse](resp, err)
}
