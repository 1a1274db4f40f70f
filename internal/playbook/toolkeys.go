package playbook

import "slices"

// CommonToolKeys are the keys of a tool mapping the engine reads around the tool itself,
// whatever its kind: kind; name (a pipeline item's label); spec (its spec.policy); input
// and args (merged into the tool's input); set (a pipeline item's). A tool's output
// (NoETL's storage hints) is not among them: registration warns that it is ignored.
var CommonToolKeys = []string{"args", "input", "kind", "name", "set", "spec"}

// toolKeys are, by tool kind, the configuration keys that kind's tool reads (aliases
// included), beyond CommonToolKeys. It is the one list of them: registration warns about
// every other key of a tool, and the worker's tests read the source of each tool and fail
// when a tool reads a key that is not listed here, or a key listed here is read by no one.
// A key NoETL documents that this engine does not act on is deliberately absent.
var toolKeys = map[string][]string{
	"artifact": {"action", "ref", "result_ref", "uri"},
	"duckdb": {"as_objects", "attach_as", "auth", "command", "database", "db_path", "max_rows", "memory_limit",
		"multi_statement", "params", "query", "statement_timeout_ms", "threads"},
	"http": {"auth", "body", "data", "endpoint", "follow_redirects", "form", "headers", "json", "method", "params",
		"timeout_seconds", "url"},
	"nats": {"ack", "auth", "batch", "bucket", "consumer", "data", "durable", "encoding", "headers", "key", "last",
		"msg_id", "name", "op", "operation", "password", "seq", "servers", "stream", "subject", "timeout_ms",
		"timeout_seconds", "token", "ttl", "url", "user", "username", "value"},
	"noop":     {"result"},
	"playbook": {"catalog_id", "path", "payload", "result_step", "return_result", "return_step", "timeout", "version"},
	"postgres": {"as_objects", "auth", "command", "connection_string", "database", "db", "dbname", "dsn", "host",
		"hostname", "max_rows", "multi_statement", "params", "password", "port", "query", "schema", "server",
		"sslmode", "statement_timeout_ms", "user", "username"},
	"python":          {"code", "code_b64", "code_base64", "cwd", "env", "libs", "python", "script", "timeout_seconds"},
	"secrets":         {"auth", "credential", "fields"},
	"shell":           {"capture", "command", "cwd", "env", "shell", "timeout_seconds"},
	"system_cleanup":  {"grace"},
	"system_info":     {},
	"system_purge":    {"max_rounds", "retention", "tenants"},
	"system_sql_read": {"max_rows", "params", "sql", "timeout"},
	"wasm":            {"module", "version"},
	// The orchestrator resolves a workbook tool to the named task (name, or task in a
	// pipeline item, whose name is its label).
	"workbook": {"task"},
}

// ToolKeys returns the configuration keys a tool of kind reads, CommonToolKeys included,
// sorted; nil for a kind Parse does not accept.
func ToolKeys(kind string) []string {
	ks, ok := toolKeys[kind]
	if !ok {
		return nil
	}
	out := slices.Concat(CommonToolKeys, ks)
	slices.Sort(out)
	return slices.Compact(out)
}
