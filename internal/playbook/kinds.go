package playbook

import (
	"fmt"
	"slices"
	"strings"
)

// WorkerToolKinds are the tool kinds a worker of any pool runs: the worker's tool table
// holds exactly these (a test of the worker checks it), plus SystemToolKinds on the
// system pool. A kind a worker's configuration may switch off (shell: NOETL_WORKER_SHELL)
// is still listed, and accepted: some pool may run it.
var WorkerToolKinds = []string{"artifact", "duckdb", "http", "nats", "noop", "playbook", "postgres", "python", "secrets", "shell", "wasm"}

// SystemToolKinds are the tool kinds only the system pool's workers run, for playbooks
// under system/.
var SystemToolKinds = []string{"system_cleanup", "system_info", "system_purge", "system_sql_read"}

// TenantSafeToolKinds are the system tool kinds a tenant's override of a system playbook
// (<tenant>/system/<name>, registered by an admin of that tenant) may use: each acts on
// the command's own tenant only. Every pool's workers run them, for such overrides only.
var TenantSafeToolKinds = []string{"system_purge"}

// ResolvedToolKinds are the tool kinds the orchestrator replaces before a command is
// issued (workbook: the named task's tool), so no worker runs them as such.
var ResolvedToolKinds = []string{"workbook"}

// unsupportedToolKinds are NoETL tool kinds this engine does not run, with the reason
// registration gives for refusing them.
var unsupportedToolKinds = map[string]string{
	"task_sequence": "is internal to NoETL: write tool: as a list (a pipeline) instead",
}

// ToolKinds returns every tool kind Parse accepts, sorted.
func ToolKinds() []string {
	ks := slices.Concat(WorkerToolKinds, SystemToolKinds, ResolvedToolKinds)
	slices.Sort(ks)
	return ks
}

// KnownToolKind reports whether Parse accepts kind as a tool kind: a kind some worker
// pool runs or the orchestrator resolves.
func KnownToolKind(kind string) bool {
	return slices.Contains(WorkerToolKinds, kind) || slices.Contains(SystemToolKinds, kind) || slices.Contains(ResolvedToolKinds, kind)
}

// unknownKindMsg is the registration error for a tool kind no pool runs: why, and the
// kinds this engine runs.
func unknownKindMsg(kind string) string {
	runs := "this engine runs: " + strings.Join(ToolKinds(), ", ")
	if why, ok := unsupportedToolKinds[kind]; ok {
		return fmt.Sprintf("tool kind %q %s (%s)", kind, why, runs)
	}
	return fmt.Sprintf("unknown tool kind %q (%s)", kind, runs)
}
