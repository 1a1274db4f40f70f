package playbook

import "time"

// Playbook is a parsed and validated playbook document.
type Playbook struct {
	// APIVersion is the document's apiVersion (noetl.io/v2 or noetl.io/v10).
	APIVersion string
	// Kind is the document's kind (always "Playbook" after validation).
	Kind string
	// Metadata holds the validated metadata fields.
	Metadata Metadata
	// Workload holds the default input values as JSON-compatible values.
	Workload map[string]any
	// Keychain holds the keychain declarations as JSON-compatible values.
	Keychain []any
	// Workbook maps the name of each reusable workbook task to its tool.
	Workbook map[string]*Tool
	// Steps are the workflow steps in document order.
	Steps []*Step
	// Warnings are problems that do not stop the playbook from running,
	// such as steps that cannot be reached from start.
	Warnings []Warning
	// Limits are the playbook's executor.spec.policy.limits (cycles.go).
	Limits Limits
	// Timeout bounds the whole execution (the root's spec.timeout; zero: none).
	Timeout time.Duration
	// Extra holds the root keys not modelled above (executor, vars, ...)
	// as JSON-compatible values, nil when there are none.
	Extra map[string]any

	index map[string]*Step
}

// Step returns the step with the given name, or nil when there is none.
func (p *Playbook) Step(name string) *Step {
	if p == nil {
		return nil
	}
	return p.index[name]
}

// Metadata is the validated part of a playbook's metadata mapping.
type Metadata struct {
	// Name is the playbook's name (required).
	Name string
	// Path is the catalog path used as the registration key.
	Path string
	// Version is the playbook's own version string.
	Version string
	// Description is free text.
	Description string
}

// Warning is a non-fatal finding about a playbook.
type Warning struct {
	// Line is the 1-based line the warning is about.
	Line int
	// Step names the step the warning is about, if any.
	Step string
	// Msg says what is wrong.
	Msg string
}

// Step is one workflow step.
type Step struct {
	// Name is the step's unique name.
	Name string
	// Desc is the step's description.
	Desc string
	// Line is the 1-based line where the step is defined.
	Line int
	// Tool holds the step's tools: one tool with an empty Label for a single
	// tool, or the pipeline items in order, each labelled by its name.
	Tool []*Tool
	// Pipeline is true when tool: was a list.
	Pipeline bool
	// Input is the step-level input merged over the legacy args (input wins).
	Input map[string]any
	// Loop is the step's loop modifier, nil when absent.
	Loop *Loop
	// Set holds the step-level set mutations.
	Set map[string]any
	// Next holds the step's outgoing arcs, nil for a leaf step.
	Next *Next
	// When is the legacy step guard, "" when absent.
	When string
	// Refs are the names of other steps referenced by the templates of this
	// step (tool config, input, loop, set, arcs, guard), sorted and unique.
	Refs []string
	// RefsSelf is true when the step's templates reference the step's own
	// result by name (for example in its arcs or set).
	RefsSelf bool
	// RefsAll is true when the templates may reach any step result (they use
	// steps or _results, or could not be analysed).
	RefsAll bool
	// Timeout bounds each attempt of the step's command (spec.timeout; zero: none).
	Timeout time.Duration
	// Keychain is the JSON list of the keychain declarations the step's tool and input
	// templates reference, with the entries those read, in document order; nil when
	// none. Commands carry it to the worker, which resolves the entries.
	Keychain []byte
	// Extra holds the step keys not modelled above (spec, output, vars, ...)
	// as JSON-compatible values, nil when there are none.
	Extra map[string]any
}

// Tool is one tool invocation.
type Tool struct {
	// Kind is the tool kind (python, http, postgres, ...).
	Kind string
	// Label is the pipeline label ("" for a single tool; the item's name, or
	// task_<index> for an unnamed item, in a pipeline; the task name in a
	// workbook).
	Label string
	// Config holds every key of the tool mapping except kind (and, for
	// pipeline items and workbook tasks, the name used as the label).
	Config map[string]any
	// Policy is the tool's spec.policy.rules, nil when there are none.
	Policy *Policy
}

// Policy is a tool's task policy.
type Policy struct {
	// Rules are evaluated top-down; the first match wins.
	Rules []Rule
}

// Rule is one policy rule.
type Rule struct {
	// When is the rule's condition template ("" for an else rule).
	When string
	// Else is true for the catch-all rule.
	Else bool
	// Then is the action taken when the rule matches.
	Then Action
}

// Action is what a matching policy rule does.
type Action struct {
	// Do is one of continue, retry, fail, jump, break.
	Do string
	// Attempts is the maximum number of attempts for retry.
	Attempts int
	// Backoff is the retry backoff (none, linear, exponential).
	Backoff string
	// Delay is the retry delay in seconds.
	Delay float64
	// To is the pipeline label a jump goes to.
	To string
	// Set holds the context mutations applied by the action.
	Set map[string]any
}

// Loop is a step's loop modifier.
type Loop struct {
	// In is the collection template when `in` is a string, "" otherwise.
	In string
	// InValue is the raw value of `in` (a string, or a literal list).
	InValue any
	// Iterator is the name the current element is bound to.
	Iterator string
	// Mode is sequential or parallel.
	Mode string
	// MaxInFlight caps parallel iterations (0 means the engine default).
	MaxInFlight int
	// MaxInFlightExpr is the template of max_in_flight when it is not a
	// literal number, "" otherwise.
	MaxInFlightExpr string
	// Cursor is the work queue a cursor loop drains (mode cursor); nil for a loop over a
	// collection (cursor.go).
	Cursor *Cursor
}

// Next holds a step's routing.
type Next struct {
	// Mode is "exclusive" (first matching arc fires) or "inclusive" (every
	// matching arc fires).
	Mode string
	// Arcs are the outgoing arcs in document order.
	Arcs []Arc
}

// Arc is one outgoing arc.
type Arc struct {
	// Step is the target step's name.
	Step string
	// When is the arc's condition template, "" when the arc always fires.
	When string
	// Set holds arc-scoped mutations applied to the target's context.
	Set map[string]any
	// Args holds legacy arc arguments.
	Args map[string]any
	// Line is the 1-based line of the arc.
	Line int
}

// Next modes.
const (
	ModeExclusive = "exclusive"
	ModeInclusive = "inclusive"
)

// Loop modes.
const (
	LoopSequential = "sequential"
	LoopParallel   = "parallel"
	LoopCursor     = "cursor"
)

// Policy actions.
const (
	DoContinue = "continue"
	DoRetry    = "retry"
	DoFail     = "fail"
	DoJump     = "jump"
	DoBreak    = "break"
)
