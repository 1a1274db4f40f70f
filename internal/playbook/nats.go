package playbook

import (
	"slices"
	"strings"

	"github.com/noetl/noetl/internal/playbook/template"
	"go.yaml.in/yaml/v3"
)

// NATSOperations are the operations of the nats tool kind (tool.operation).
var NATSOperations = []string{"kv_get", "kv_put", "kv_delete", "kv_keys", "kv_purge",
	"object_get", "object_put", "object_delete", "object_list", "object_info",
	"js_publish", "js_get_msg", "js_stream_info", "js_consume"}

// natsTool is Parse's check of a nats tool mapping n: operation is required, and one of
// NATSOperations unless a template computes it.
func (b *builder) natsTool(n *yaml.Node, kind, step, field string) {
	if kind != "nats" {
		return
	}
	k, v := lookup(n, "operation")
	if isNull(v) {
		b.errorf(n, step, field+".operation", "a nats tool needs an operation (one of %s)", strings.Join(NATSOperations, ", "))
		return
	}
	op, ok := b.str(v, step, field+".operation")
	if !ok || template.IsTemplate(op) {
		return
	}
	if !slices.Contains(NATSOperations, strings.ToLower(strings.TrimSpace(op))) {
		b.errorf(k, step, field+".operation", "unknown nats operation %q (one of %s)", op, strings.Join(NATSOperations, ", "))
	}
}
