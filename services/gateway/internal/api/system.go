package api

import (
	"context"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
)

// The messages of noetl.orchestrator.v1.SystemService are those of the public
// SystemService field for field (plus tenant, field 15, of the request), so they convert by
// their wire form.

// ListSystemPlaybooks implements SystemService.
func (s *Server) ListSystemPlaybooks(ctx context.Context, req *apiv1.ListSystemPlaybooksRequest) (*apiv1.ListSystemPlaybooksResponse, error) {
	in, err := toInternal(ctx, req, func(r *orchv1.ListSystemPlaybooksRequest, t string) { r.Tenant = t })
	if err != nil {
		return nil, err
	}
	return toPublic[*apiv1.ListSystemPlaybooksResponse](s.System.ListSystemPlaybooks(ctx, in))
}
