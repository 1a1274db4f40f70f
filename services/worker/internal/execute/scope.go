package execute

import (
	"context"
	"encoding/json"
	"fmt"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// boundNames are the names a template reads the same whatever the scope's workload, ctx
// and step results hold: Scope.Vars binds them after the flat keys of those (each
// reserved name then reads only its own part of the scope, scopeParts), and run binds
// command_id, _attempt and _task before anything is rendered against the variables.
var boundNames = map[string]bool{
	"workload": true, "ctx": true, "vars": true, "iter": true, "execution_id": true,
	"command_id": true, "_attempt": true, "_task": true,
}

// loopNames are bound after the flat keys too, in a loop iteration's scope only, with
// the loop's iterator variable.
var loopNames = map[string]bool{"_index": true, "loop_index": true}

// scopeParts is domain.Scope as it travels, its large parts left undecoded: a command
// whose templates read only bound names decodes only the parts those names read.
type scopeParts struct {
	ExecutionID string          `json:"execution_id"`
	Workload    json.RawMessage `json:"workload"`
	Ctx         json.RawMessage `json:"ctx"`
	Iter        map[string]any  `json:"iter,omitempty"`
	Iterator    string          `json:"iterator,omitempty"`
	Variables   json.RawMessage `json:"vars,omitempty"`
}

// commandScope loads the command's context and returns its template variables, the
// keychain's entries among them. names are the top-level names the command's templates
// read; all says that they may read any (a template that could not be analysed, a
// keychain). When every name is bound (boundNames, and in a loop iteration loopNames and
// the iterator variable), the flat keys of workload, ctx and the step results are never
// read: only the parts the names read are decoded, and no step result is loaded.
func (e *Executor) commandScope(ctx context.Context, cmd *eventv1.Command, names []string, all bool) (map[string]any, error) {
	contextJSON := cmd.GetContextJson()
	if ref := cmd.GetContextRef(); ref != nil {
		// The context was too large to travel in the command.
		body, err := e.Results.Fetch(ctx, cmd.GetTenant(), ref.GetUri())
		if err != nil {
			return nil, &tools.Error{Msg: fmt.Sprintf("step %s: load the command context %s: %v", cmd.GetStep(), ref.GetUri(), err), Retryable: true}
		}
		contextJSON = body
	}
	// The one name that may be the iterator variable; a second unbound name needs the
	// whole scope.
	other, partial := "", !all && len(contextJSON) > 0
	read := map[string]bool{}
	for _, n := range names {
		switch {
		case boundNames[n], loopNames[n]:
			read[n] = true
		case other == "" || other == n:
			other = n
		default:
			partial = false
		}
	}
	if partial {
		if vars, ok, err := partialScope(contextJSON, read, other); err != nil || ok {
			if err != nil {
				return nil, err
			}
			vars["command_id"] = cmd.GetCommandId()
			return vars, nil
		}
	}
	var scope domain.Scope
	if len(contextJSON) > 0 {
		if err := domain.DecodeJSON(contextJSON, &scope); err != nil {
			return nil, fmt.Errorf("command context: %w", err)
		}
	}
	if scope.Ctx == nil {
		scope.Ctx = map[string]any{}
	}
	if err := e.Results.ResolveRefs(ctx, cmd, &scope); err != nil {
		return nil, err
	}
	vars := scope.Vars()
	vars["command_id"] = cmd.GetCommandId()
	if err := e.loadKeychain(ctx, cmd, vars); err != nil { // keychain.go
		return nil, err
	}
	return vars, nil
}

// partialScope decodes the parts of a context that the names in read need, plus the
// iteration, and returns its variables (ok); ok is false when the names need the whole
// scope after all: iterator is not the iteration's iterator variable, or loop names are
// read outside a loop.
func partialScope(contextJSON []byte, read map[string]bool, iterator string) (map[string]any, bool, error) {
	var parts scopeParts
	if err := domain.DecodeJSON(contextJSON, &parts); err != nil {
		return nil, false, fmt.Errorf("command context: %w", err)
	}
	inLoop := parts.Iter != nil
	if (iterator != "" && (!inLoop || iterator != parts.Iterator)) || (!inLoop && (read["_index"] || read["loop_index"])) {
		return nil, false, nil
	}
	scope := domain.Scope{ExecutionID: parts.ExecutionID, Iter: parts.Iter, Iterator: parts.Iterator}
	decode := func(name string, raw json.RawMessage, into *map[string]any) error {
		if !read[name] || len(raw) == 0 {
			return nil
		}
		if err := domain.DecodeJSON(raw, into); err != nil {
			return fmt.Errorf("command context: %s: %w", name, err)
		}
		return nil
	}
	if err := decode("workload", parts.Workload, &scope.Workload); err != nil {
		return nil, false, err
	}
	if err := decode("ctx", parts.Ctx, &scope.Ctx); err != nil {
		return nil, false, err
	}
	if scope.Ctx == nil {
		scope.Ctx = map[string]any{}
	}
	if read["vars"] {
		scope.Variables = parts.Variables
	}
	return scope.Vars(), true, nil
}
