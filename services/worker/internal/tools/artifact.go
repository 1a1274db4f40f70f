package tools

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/noetl/noetl/internal/domain"
)

// Artifact (kind artifact, action get) loads a stored result for a step that needs the
// whole payload of an earlier step's result held by reference.
type Artifact struct {
	// Fetch reads a stored result of tenant as JSON (the worker's resultstore client).
	Fetch func(ctx context.Context, tenant, uri string) ([]byte, error)
}

// Run implements Tool.
func (a Artifact) Run(ctx context.Context, c *Call) (any, error) {
	action, _ := c.Config["action"].(string)
	if action != "" && action != "get" {
		return nil, &Error{Msg: fmt.Sprintf("artifact: action %q is not supported (get)", action)}
	}
	ref := ""
	for _, src := range []map[string]any{c.Input, c.Config} {
		for _, k := range []string{"result_ref", "ref", "uri"} {
			if v, ok := src[k].(string); ok && v != "" && ref == "" {
				ref = v
			}
		}
	}
	if ref == "" {
		return nil, &Error{Msg: "artifact: input.result_ref is required (for example {{ step._ref }})"}
	}
	body, err := a.Fetch(ctx, TenantOf(ctx), ref)
	if err != nil {
		return nil, &Error{Msg: fmt.Sprintf("artifact: load %s: %s", ref, status.Convert(err).Message()), Retryable: status.Code(err) == codes.Unavailable}
	}
	var v any
	if err := domain.DecodeJSON(body, &v); err != nil {
		return nil, &Error{Msg: fmt.Sprintf("artifact: %s is not JSON: %v", ref, err)}
	}
	return v, nil
}
