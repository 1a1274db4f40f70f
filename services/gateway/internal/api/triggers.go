package api

import (
	"context"
	"encoding/json"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
)

// The CRUD messages of noetl.orchestrator.v1.TriggerService are those of the public
// TriggerService field for field (plus tenant, field 15), so they convert by their wire
// form, as the schedules' do; FireTrigger carries the raw body instead of a Struct.

// CreateTrigger implements TriggerService.
func (s *Server) CreateTrigger(ctx context.Context, req *apiv1.CreateTriggerRequest) (*apiv1.CreateTriggerResponse, error) {
	in, err := toInternal(ctx, req, func(r *orchv1.CreateTriggerRequest, t string) { r.Tenant = t })
	if err != nil {
		return nil, err
	}
	if w := req.GetTrigger().GetWorkload(); w != nil {
		if n := proto.Size(w); n > MaxWorkloadBytes {
			return nil, tooLarge("WORKLOAD_TOO_LARGE", "trigger.workload", n, MaxWorkloadBytes)
		}
	}
	resp, err := s.Triggers.CreateTrigger(ctx, in)
	return toPublic[*apiv1.CreateTriggerResponse](resp, err)
}

// GetTrigger implements TriggerService.
func (s *Server) GetTrigger(ctx context.Context, req *apiv1.GetTriggerRequest) (*apiv1.GetTriggerResponse, error) {
	in, err := toInternal(ctx, req, func(r *orchv1.GetTriggerRequest, t string) { r.Tenant = t })
	if err != nil {
		return nil, err
	}
	resp, err := s.Triggers.GetTrigger(ctx, in)
	return toPublic[*apiv1.GetTriggerResponse](resp, err)
}

// ListTriggers implements TriggerService.
func (s *Server) ListTriggers(ctx context.Context, req *apiv1.ListTriggersRequest) (*apiv1.ListTriggersResponse, error) {
	in, err := toInternal(ctx, req, func(r *orchv1.ListTriggersRequest, t string) { r.Tenant = t })
	if err != nil {
		return nil, err
	}
	resp, err := s.Triggers.ListTriggers(ctx, in)
	return toPublic[*apiv1.ListTriggersResponse](resp, err)
}

// DeleteTrigger implements TriggerService.
func (s *Server) DeleteTrigger(ctx context.Context, req *apiv1.DeleteTriggerRequest) (*apiv1.DeleteTriggerResponse, error) {
	in, err := toInternal(ctx, req, func(r *orchv1.DeleteTriggerRequest, t string) { r.Tenant = t })
	if err != nil {
		return nil, err
	}
	resp, err := s.Triggers.DeleteTrigger(ctx, in)
	return toPublic[*apiv1.DeleteTriggerResponse](resp, err)
}

// FireTrigger implements TriggerService for an authenticated caller: the workload is sent
// on as the body, unsigned (the orchestrator checks the caller's permission instead).
func (s *Server) FireTrigger(ctx context.Context, req *apiv1.FireTriggerRequest) (*apiv1.FireTriggerResponse, error) {
	body := []byte("{}")
	if w := req.GetWorkload(); w != nil {
		var err error
		if body, err = json.Marshal(w.AsMap()); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "workload: %v", err)
		}
		if len(body) > MaxWorkloadBytes {
			return nil, tooLarge("WORKLOAD_TOO_LARGE", "workload", len(body), MaxWorkloadBytes)
		}
	}
	resp, err := s.Triggers.FireTrigger(ctx, &orchv1.FireTriggerRequest{Tenant: tenant(ctx), Name: req.GetName(), Body: body, DeliveryId: req.GetDeliveryId()})
	if err != nil {
		return nil, err
	}
	return &apiv1.FireTriggerResponse{ExecutionId: resp.GetExecutionId()}, nil
}
