package execute

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// envelope is the output policies see: {status: ok|error, data, error: {message, retryable}}.
func envelope(res any, err error) map[string]any {
	if err == nil {
		return map[string]any{"status": "ok", "data": res}
	}
	retryable := false
	var te *tools.Error
	if errors.As(err, &te) {
		retryable = te.Retryable
	}
	return map[string]any{"status": "error", "data": res, "error": map[string]any{"message": err.Error(), "retryable": retryable}}
}

// itemSet reads the set: mapping of a tool configuration (nil when it has none); only a
// pipeline item (a labelled tool) applies it.
func itemSet(config []byte) map[string]any {
	var cfg struct {
		Set map[string]any `json:"set"`
	}
	if json.Unmarshal(config, &cfg) != nil {
		return nil
	}
	return cfg.Set
}

// policyOf reads the spec.policy of a tool configuration: nil without one, or when it
// does not parse (the call then runs without a policy).
func policyOf(config []byte) *playbook.Policy {
	var cfg struct {
		Spec struct {
			Policy json.RawMessage `json:"policy"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(config, &cfg); err != nil || len(cfg.Spec.Policy) == 0 {
		return nil
	}
	p, err := playbook.ParsePolicy(cfg.Spec.Policy)
	if err != nil {
		return nil
	}
	return p
}

// decidePolicy picks the action for a tool's output: the first rule whose when is true, else
// the else rule; without a match the outcome decides (error: fail, success: continue).
func (e *Executor) decidePolicy(p *playbook.Policy, vars map[string]any, runErr error, where string) (playbook.Action, error) {
	if p != nil {
		for _, r := range p.Rules {
			if r.Else {
				return withDefault(r.Then), nil
			}
			ok, err := e.Renderer.Truthy(r.When, vars)
			if err != nil {
				return playbook.Action{}, fmt.Errorf("%s: policy condition %q failed to evaluate: %w", where, r.When, err)
			}
			if ok {
				return withDefault(r.Then), nil
			}
		}
	}
	if runErr != nil {
		return playbook.Action{Do: playbook.DoFail}, nil
	}
	return playbook.Action{Do: playbook.DoContinue}, nil
}

func withDefault(a playbook.Action) playbook.Action {
	if a.Do == "" {
		a.Do = playbook.DoContinue
	}
	return a
}

// applySet renders a policy set: block; ctx.* (and unscoped) keys become ctx updates visible
// to later tools and to the following steps, iter.* keys iteration updates.
func (e *Executor) applySet(set map[string]any, vars map[string]any, out *outcome, where string) error {
	for k, v := range set {
		rv, err := e.Renderer.Render(v, vars)
		if err != nil {
			return &renderError{fmt.Errorf("%s: set %s: %w", where, k, err)}
		}
		scope, key := "ctx", k
		switch {
		case strings.HasPrefix(k, "ctx."):
			key = strings.TrimPrefix(k, "ctx.")
		case strings.HasPrefix(k, "iter."):
			scope, key = "iter", strings.TrimPrefix(k, "iter.")
		case strings.HasPrefix(k, "step."):
			key = strings.TrimPrefix(k, "step.")
		}
		if out.set[scope] == nil {
			out.set[scope] = map[string]any{}
		}
		out.set[scope][key] = rv
		if m, ok := vars[scope].(map[string]any); ok {
			m[key] = rv
		}
		if scope == "ctx" {
			vars[key] = rv
		}
	}
	return nil
}

// backoff is the delay before retry number attempt (1-based) of a policy.
func backoff(a playbook.Action, attempt int) time.Duration {
	d := time.Duration(a.Delay * float64(time.Second))
	switch a.Backoff {
	case "linear":
		d *= time.Duration(attempt)
	case "exponential":
		d *= time.Duration(1) << min(attempt-1, 16)
	}
	return min(d, 5*time.Minute)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
