package execute

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/telemetry"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/internal/playbook/template"
	"github.com/noetl/noetl/services/worker/internal/scrub"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// run renders the command's tools and runs them in order. Later tools of a pipeline see
// earlier results by label (and the previous one as _prev); each tool's policy rules decide
// what follows (continue, retry, jump, break, fail). The step result is the tool's result
// for a single tool, and for a pipeline the last result with every label's result added
// under its label.
func (e *Executor) run(ctx context.Context, cmd *eventv1.Command) (*outcome, error) {
	calls := cmd.GetTools()
	plans := make([]*toolPlan, len(calls))
	// The scope (the command's context: workload, ctx, step results, the iteration) is
	// read by templates only. A command none of whose values is a template, without a
	// keychain, a policy or a set, renders every value to itself: its context is neither
	// loaded nor decoded. Otherwise the names its templates read say which parts of the
	// scope are decoded (commandScope).
	all := len(cmd.GetKeychainJson()) > 0 // keychain templates are rendered first, and not analysed here
	scoped := all
	var names []string
	for i, tc := range calls {
		p := e.plans.plan(tc)
		plans[i] = p
		scoped = scoped || p.templated
		names, all = append(names, p.names...), all || p.dynamic
	}
	var stepInput map[string]any
	if len(cmd.GetInputJson()) > 0 && string(cmd.GetInputJson()) != "null" {
		var in map[string]any // declared here, so a command without input allocates none
		if err := domain.DecodeJSON(cmd.GetInputJson(), &in); err != nil {
			return nil, fmt.Errorf("command input: %w", err)
		}
		stepInput = in
		if template.HasTemplates(in) {
			ns, dynamic := template.NameRefs(in)
			scoped, names, all = true, append(names, ns...), all || dynamic
		}
	}
	// Without a scope nothing reads the variables: run binds none (vars stays nil).
	var vars map[string]any
	if scoped {
		var err error
		if vars, err = e.commandScope(ctx, cmd, names, all); err != nil {
			return nil, err
		}
	}
	out := &outcome{set: map[string]map[string]any{}}
	var labels map[string]int  // the tools by label, built for the first jump
	var byLabel map[string]any // a pipeline's results by label
	if len(calls) > 1 {
		byLabel = make(map[string]any, len(calls))
	}
	var last any
	attempts := make([]int, len(calls))
	for i := 0; i < len(calls); {
		tc := calls[i]
		attempts[i]++
		label := tc.GetLabel()
		if label == "" {
			label = "task_" + strconv.Itoa(i)
		}
		where := "step " + cmd.GetStep() + ": tool " + tc.GetKind()
		if tc.GetLabel() != "" {
			where = "step " + cmd.GetStep() + ": tool " + tc.GetLabel() + " (" + tc.GetKind() + ")"
		}
		// The attempt of the command (a durable retry is a new command) plus the runs of
		// this item within it.
		if scoped {
			vars["_attempt"] = max(int(cmd.GetAttempt()), 1) - 1 + attempts[i]
			vars["_task"] = label
		}
		res, runErr := e.runTool(ctx, cmd, tc, plans[i], stepInput, vars, where)
		var re *renderError
		if errors.As(runErr, &re) {
			return nil, runErr
		}
		// Past the step's spec.timeout the attempt is over, whatever the tool made of its
		// cancelled context: the policy sees a retryable deadline error, and a retry it
		// asks for is a new attempt (a new command with its own timeout).
		timedOut := runErr != nil && errors.Is(context.Cause(ctx), errStepTimeout)
		if timedOut {
			runErr = &tools.Error{Msg: stepTimeoutMessage(cmd), Retryable: true}
		}
		if scoped {
			vars["output"] = envelope(res, runErr)
		}
		action, err := e.decidePolicy(plans[i].policy, vars, runErr, where)
		if err != nil {
			return nil, err
		}
		if len(action.Set) > 0 {
			if err := e.applySet(action.Set, vars, out, where); err != nil {
				return nil, err
			}
		}
		switch action.Do {
		case playbook.DoRetry:
			max := action.Attempts
			if max <= 0 {
				max = 3
			}
			// A delayed retry of a whole single-tool command waits on a durable timer in
			// the orchestrator (it survives restarts and frees this slot), and so does the
			// retry of an attempt past its spec.timeout; retries inside pipelines and loop
			// iterations wait here (past the timeout they cannot: the attempt is over).
			// ran counts the runs so far: the commands of a durable retry, or the runs of
			// this item within the command.
			ran := attempts[i]
			durable := len(calls) == 1 && cmd.GetIteration().GetIndex() < 0
			if delay := backoff(action, int(cmd.GetAttempt())); (delay > 0 || timedOut) && durable {
				if int(cmd.GetAttempt()) < max {
					return nil, &retryRequest{attempts: int32(max), delay: delay, cause: runErr}
				}
				ran = int(cmd.GetAttempt())
			} else if attempts[i] < max && !timedOut {
				if err := sleepCtx(ctx, backoff(action, attempts[i])); err != nil {
					return nil, err
				}
				continue
			}
			if runErr != nil {
				return nil, fmt.Errorf("%s: failed after %s: %w", where, runs(ran), runErr)
			}
			// A successful output that still asks for a retry after the last attempt goes on.
		case playbook.DoFail:
			if runErr != nil {
				return nil, fmt.Errorf("%s: %w", where, runErr)
			}
			return nil, &tools.Error{Msg: where + ": failed by policy"}
		}
		if runErr != nil && action.Do != playbook.DoContinue && action.Do != playbook.DoRetry {
			return nil, fmt.Errorf("%s: %w", where, runErr)
		}
		last = res
		if byLabel != nil {
			byLabel[label] = res
		}
		if scoped {
			vars[label] = res
			vars["_prev"] = res
		}
		if set := plans[i].set; len(set) > 0 && tc.GetLabel() != "" {
			// An item's set: is rendered against its result and merged into the running
			// variables: the following items see each value by its bare name, later steps
			// through ctx.
			vars["output"], vars["result"] = res, res
			if err := e.applySet(set, vars, out, where); err != nil {
				return nil, err
			}
		}
		switch action.Do {
		case playbook.DoBreak:
			i = len(calls)
			continue
		case playbook.DoJump:
			if labels == nil {
				labels = make(map[string]int, len(calls))
				for i, tc := range calls {
					if tc.GetLabel() != "" {
						labels[tc.GetLabel()] = i
					}
				}
			}
			j, ok := labels[action.To]
			if !ok {
				return nil, fmt.Errorf("%s: policy jump to unknown tool %q", where, action.To)
			}
			if attempts[j] > 100 {
				return nil, fmt.Errorf("%s: policy jump to %q looped more than 100 times", where, action.To)
			}
			i = j
			continue
		}
		i++
	}
	out.result = last
	if len(calls) > 1 {
		merged := map[string]any{}
		if m, ok := last.(map[string]any); ok {
			for k, v := range m {
				merged[k] = v
			}
		}
		for k, v := range byLabel {
			if _, taken := merged[k]; !taken {
				merged[k] = v
			}
		}
		out.result = merged
	}
	return out, nil
}

// runTool renders one tool's configuration and runs it.
func (e *Executor) runTool(ctx context.Context, cmd *eventv1.Command, tc *eventv1.ToolCall, plan *toolPlan, stepInput map[string]any, vars map[string]any, where string) (any, error) {
	if plan.err != nil {
		return nil, plan.err
	}
	// Code is data for the interpreter and the policy is evaluated after the run: neither
	// is rendered now (the plan holds the rest of the configuration).
	code, spec := plan.copies()
	rc, err := e.Renderer.Render(plan.cfg, vars)
	if err != nil {
		return nil, &renderError{fmt.Errorf("%s: %w", where, err)}
	}
	rendered, _ := rc.(map[string]any)
	if rendered == nil {
		rendered = map[string]any{}
	}
	if plan.hasCode {
		rendered["code"] = code
	}
	if spec != nil {
		rendered["spec"] = spec
	}
	input := map[string]any{}
	if len(stepInput) > 0 {
		v, err := e.Renderer.Render(stepInput, vars)
		if err != nil {
			return nil, &renderError{fmt.Errorf("step %s: input: %w", cmd.GetStep(), err)}
		}
		if m, ok := v.(map[string]any); ok {
			input = m
		}
	}
	for _, key := range []string{"args", "input"} {
		if m, ok := rendered[key].(map[string]any); ok {
			for k, v := range m {
				input[k] = v
			}
		}
	}
	ctx, span := e.Tracer.Start(ctx, "tool "+tc.GetKind())
	defer span.End()
	if span.IsRecording() { // the attributes are built only for a span that keeps them
		span.SetAttributes(telemetry.AttrTool.String(tc.GetKind()), telemetry.AttrStep.String(cmd.GetStep()))
		if tc.GetLabel() != "" {
			span.SetAttributes(telemetry.AttrToolLabel.String(tc.GetLabel()))
		}
	}
	// Tools resolve credentials for the command's tenant only.
	ctx = tools.WithTenant(ctx, cmd.GetTenant())
	ctx = tools.WithChild(ctx, tools.ChildRef{Tenant: cmd.GetTenant(), ExecutionID: cmd.GetExecutionId(), Label: tc.GetLabel()})
	res, err := e.Tools.Run(ctx, &tools.Call{Kind: tc.GetKind(), Config: rendered, Input: input, CommandID: cmd.GetCommandId(), Step: cmd.GetStep(), Log: toolLogOf(ctx, tc),
		Tenant: cmd.GetTenant(), ExecutionID: cmd.GetExecutionId(), PlaybookPath: cmd.GetPlaybookPath()})
	telemetry.ErrorStatus(span, scrub.FromContext(ctx).Err(err))
	return res, err
}

// runs reads n runs of a tool: "1 attempt", "3 attempts".
func runs(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}
