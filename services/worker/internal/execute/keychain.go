package execute

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
func (e *Executor) loadKeychain(ctx context.Context, cmd *eventv1.Command, vars map[string]any) error {
	decls := cmd.GetKeychainJson()
	if len(decls) == 0 {
		return nil
	}
	if e.Keychain == nil {
		return &tools.Error{Msg: fmt.Sprintf("step %s: this worker cannot resolve keychain entries", cmd.GetStep())}
	}
	kc := map[string]any{}
	vars["keychain"] = kc
	// Credentials are resolved for the command's tenant only.
	ctx = tools.WithTenant(ctx, cmd.GetTenant())
	render := func(v any) (any, error) { return e.Renderer.Render(v, vars) }
	if err := e.Keychain.Load(ctx, cmd.GetTenant(), decls, kc, render); err != nil {
		return fmt.Errorf("step %s: %w", cmd.GetStep(), err)
	}
	return nil
}
