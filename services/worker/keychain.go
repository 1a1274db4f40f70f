package worker

import (
	"context"
	"fmt"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// loadKeychain resolves the keychain entries the command carries (its step's templates
// reference them) and binds them as vars' keychain, before any tool is rendered. Every
// value is registered with the command's scrubber as it is resolved. A command without
// keychain entries leaves vars alone.
func (w *Worker) loadKeychain(ctx context.Context, cmd *eventv1.Command, vars map[string]any) error {
	decls := cmd.GetKeychainJson()
	if len(decls) == 0 {
		return nil
	}
	if w.keychain == nil {
		return &tools.Error{Msg: fmt.Sprintf("step %s: this worker cannot resolve keychain entries", cmd.GetStep())}
	}
	kc := map[string]any{}
	vars["keychain"] = kc
	// Credentials are resolved for the command's tenant only.
	ctx = context.WithValue(ctx, tenantKey{}, cmd.GetTenant())
	render := func(v any) (any, error) { return w.renderer.Render(v, vars) }
	if err := w.keychain.Load(ctx, cmd.GetTenant(), decls, kc, render); err != nil {
		return fmt.Errorf("step %s: %w", cmd.GetStep(), err)
	}
	return nil
}
