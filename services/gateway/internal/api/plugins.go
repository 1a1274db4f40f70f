package api

import (
	"context"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
)

// The messages of noetl.orchestrator.v1.PluginService are those of the public
// PluginService field for field (plus tenant, field 15), so they convert by their wire
// form, as the schedules' do.

// RegisterPlugin implements PluginService.
func (s *Server) RegisterPlugin(ctx context.Context, req *apiv1.RegisterPluginRequest) (*apiv1.RegisterPluginResponse, error) {
	in, err := toInternal(ctx, req, func(r *orchv1.RegisterPluginRequest, t string) { r.Tenant = t })
	if err != nil {
		return nil, err
	}
	resp, err := s.Plugins.RegisterPlugin(ctx, in)
	return toPublic[*apiv1.RegisterPluginResponse](resp, err)
}

// GetPlugin implements PluginService.
func (s *Server) GetPlugin(ctx context.Context, req *apiv1.GetPluginRequest) (*apiv1.GetPluginResponse, error) {
	in, err := toInternal(ctx, req, func(r *orchv1.GetPluginRequest, t string) { r.Tenant = t })
	if err != nil {
		return nil, err
	}
	resp, err := s.Plugins.GetPlugin(ctx, in)
	return toPublic[*apiv1.GetPluginResponse](resp, err)
}

// ListPlugins implements PluginService.
func (s *Server) ListPlugins(ctx context.Context, req *apiv1.ListPluginsRequest) (*apiv1.ListPluginsResponse, error) {
	in, err := toInternal(ctx, req, func(r *orchv1.ListPluginsRequest, t string) { r.Tenant = t })
	if err != nil {
		return nil, err
	}
	resp, err := s.Plugins.ListPlugins(ctx, in)
	return toPublic[*apiv1.ListPluginsResponse](resp, err)
}
