// Package openapi completes the OpenAPI (Swagger 2.0) document protoc-gen-openapiv2 merges
// from proto/ (gen.OpenAPI) into the one the gateway serves at /openapi.json: a real title
// and the build's version, the bearer and API key authentication every route needs (and the
// webhook's signature), the gateway's error JSON on every operation, and only what the
// public API reaches (the merge also holds the internal services' tags and messages).
//
// gen/ stays exactly what `make proto` generates; what no proto annotation can say (the
// version is the binary's, known only when it is built) is added here, once, at start-up.
package openapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
)

// Title is the document's title.
const Title = "NoETL API"

// Security scheme names of the document.
const (
	// SchemeBearer is "Authorization: Bearer <API key or JWT>".
	SchemeBearer = "bearer"
	// SchemeAPIKey is "X-Api-Key: <API key>".
	SchemeAPIKey = "apiKey"
	// SchemeWebhookSignature is a trigger webhook's "X-Noetl-Signature: sha256=<hex>".
	SchemeWebhookSignature = "webhookSignature"
)

// fireTrigger is the operation of the webhook route, which also takes a signature.
const fireTrigger = "TriggerService_FireTrigger"

// rawResponses are the operations the gateway answers with something other than JSON: by
// operation id, what the 200 response's body is, and its media types.
var rawResponses = map[string]struct {
	produces    []string
	description string
	binary      bool
}{
	"ResultService_ExportResult": {[]string{"application/vnd.apache.arrow.stream", "text/csv"},
		"The table as a file (Content-Disposition: attachment): the Arrow IPC stream as stored (format arrow, the default), or CSV with a header row (format csv). A failure after the first byte cuts the response off.", true},
	"ExecutionService_WatchExecution": {[]string{"text/event-stream"},
		"Server-Sent Events: one event per committed event (event: its type, id: its seq, data: the Event as JSON), an event error with the status as JSON when the stream fails; 204 when there is nothing left to send.", false},
	"ExecutionService_WatchExecutionLogs": {[]string{"text/event-stream"},
		"Server-Sent Events: an event log per entry (data: the LogEntry as JSON; a command's last entry carries id: its event's seq) and a final event end; 204 when there is nothing left to send.", false},
}

// errorStatuses are the error answers every operation may give, by HTTP status: the code
// each maps from and what it means.
var errorStatuses = map[string]string{
	"400": "INVALID_ARGUMENT, FAILED_PRECONDITION or OUT_OF_RANGE: the request is refused; the message names the field, step or line, and a BadRequest detail the field.",
	"401": "UNAUTHENTICATED: no credential, or one that does not verify (the WWW-Authenticate header says which scheme).",
	"403": "PERMISSION_DENIED: the caller's roles lack the permission the route needs (the message names it and the roles that grant it).",
	"404": "NOT_FOUND: no such resource in the caller's tenant.",
	"409": "ALREADY_EXISTS or ABORTED: the resource exists, or a concurrent change won.",
	"413": "RESOURCE_EXHAUSTED with reason BODY_TOO_LARGE or a field's *_TOO_LARGE: the body or a field is over its limit (metadata.limit).",
	"429": "RESOURCE_EXHAUSTED: the tenant's rate or calls in flight, or too many failed authentications; the Retry-After header and a RetryInfo detail say when to retry.",
	"500": "INTERNAL: an internal error, masked; the message holds only a correlation id, which the gateway's log names.",
	"503": "UNAVAILABLE: a service behind the gateway cannot answer now; retry.",
}

// errorShape describes the gateway's error JSON (the definition rpcStatus).
const errorShape = "The gateway's error JSON, for every error of every route: code is the google.rpc.Code " +
	"(3 INVALID_ARGUMENT, 5 NOT_FOUND, 7 PERMISSION_DENIED, 8 RESOURCE_EXHAUSTED, 16 UNAUTHENTICATED, ...), message " +
	"says what is wrong naming the field, step or line, and details are google.rpc details, each with its @type: " +
	"an ErrorInfo (domain noetl.io, a reason such as BODY_TOO_LARGE, metadata such as limit), a BadRequest naming " +
	"the field, a RetryInfo."

// Version is the build's version: the main module's version when it was built as a
// module (go install ...@vX), else its VCS revision, else "devel".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			return "devel+" + s.Value[:min(12, len(s.Value))]
		}
	}
	return "devel"
}

// Document returns the generated document completed for the gateway to serve, with
// version as info.version.
func Document(generated []byte, version string) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(generated, &doc); err != nil {
		return nil, fmt.Errorf("openapi: the generated document: %w", err)
	}
	if version == "" {
		version = "devel"
	}
	doc["info"] = map[string]any{
		"title":   Title,
		"version": version,
		"description": "The public REST API of the NoETL gateway, the JSON mapping of its gRPC API (noetl.api.v1). " +
			"Every route needs a credential: an API key or a JWT as Authorization: Bearer <token>, or an API key as " +
			"X-Api-Key; a trigger's webhook (POST /v1/triggers/{name}) also takes its signature instead. Errors are " +
			"the JSON of rpcStatus.",
	}
	doc["securityDefinitions"] = map[string]any{
		SchemeBearer: map[string]any{"type": "apiKey", "in": "header", "name": "Authorization",
			"description": "An API key (noetl_<id>_<secret>) or a JWT, as \"Bearer <token>\"."},
		SchemeAPIKey: map[string]any{"type": "apiKey", "in": "header", "name": "X-Api-Key",
			"description": "An API key (noetl_<id>_<secret>)."},
		SchemeWebhookSignature: map[string]any{"type": "apiKey", "in": "header", "name": "X-Noetl-Signature",
			"description": "Only POST /v1/triggers/{name}: \"sha256=\" and the hex HMAC-SHA256 of the raw body under the trigger's secret. The tenant is then the query parameter tenant (default \"default\")."},
	}
	anyCredential := []any{map[string]any{SchemeBearer: []any{}}, map[string]any{SchemeAPIKey: []any{}}}
	doc["security"] = anyCredential

	responses := map[string]any{}
	for code, what := range errorStatuses {
		responses[responseName(code)] = map[string]any{"description": what, "schema": map[string]any{"$ref": "#/definitions/rpcStatus"}}
	}
	doc["responses"] = responses
	paths, _ := doc["paths"].(map[string]any)
	used := map[string]bool{}
	for _, p := range paths {
		ops, _ := p.(map[string]any)
		for _, o := range ops {
			op, ok := o.(map[string]any)
			if !ok {
				continue
			}
			rs, _ := op["responses"].(map[string]any)
			if rs == nil {
				rs = map[string]any{}
				op["responses"] = rs
			}
			for code := range errorStatuses {
				rs[code] = map[string]any{"$ref": "#/responses/" + responseName(code)}
			}
			if d, ok := rs["default"].(map[string]any); ok {
				d["description"] = "Any other error, as rpcStatus."
			}
			for _, t := range asSlice(op["tags"]) {
				if s, ok := t.(string); ok {
					used[s] = true
				}
			}
			if raw, ok := rawResponses[fmt.Sprint(op["operationId"])]; ok {
				op["produces"] = raw.produces
				ok200 := map[string]any{"description": raw.description}
				if raw.binary {
					ok200["schema"] = map[string]any{"type": "string", "format": "binary"}
				}
				rs["200"] = ok200
			}
			if op["operationId"] == fireTrigger {
				op["security"] = append(slices.Clone(anyCredential), map[string]any{SchemeWebhookSignature: []any{}})
				op["parameters"] = append(asSlice(op["parameters"]),
					map[string]any{"name": "X-Delivery-Id", "in": "header", "type": "string", "required": false,
						"description": "Delivery id (instead of deliveryId; GitHub's X-GitHub-Delivery is read too): a redelivery starts nothing and answers the first execution."},
					map[string]any{"name": "tenant", "in": "query", "type": "string", "required": false,
						"description": "With a signature (no credential): the trigger's tenant (default \"default\")."})
			}
		}
	}
	var tags []any
	for _, t := range asSlice(doc["tags"]) {
		if m, ok := t.(map[string]any); ok && used[fmt.Sprint(m["name"])] {
			tags = append(tags, m)
		}
	}
	doc["tags"] = tags
	defs, _ := doc["definitions"].(map[string]any)
	if st, ok := defs["rpcStatus"].(map[string]any); ok {
		st["description"] = errorShape
		if props, ok := st["properties"].(map[string]any); ok {
			describe(props, "code", "The google.rpc.Code of the error.")
			describe(props, "message", "What is wrong, naming the field, step or line; for an internal error only its correlation id.")
			describe(props, "details", "google.rpc details (ErrorInfo, BadRequest, RetryInfo), each with its @type.")
		}
	}
	doc["definitions"] = reachable(defs, doc["paths"], doc["responses"])
	return json.MarshalIndent(doc, "", "  ")
}

func responseName(code string) string { return "Error" + code }

func describe(props map[string]any, name, description string) {
	if p, ok := props[name].(map[string]any); ok {
		p["description"] = description
	}
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// reachable returns the definitions the roots refer to, directly or through other
// definitions: the merge of every proto file also defines the internal services' messages.
func reachable(defs map[string]any, roots ...any) map[string]any {
	out := map[string]any{}
	var queue []string
	visit := func(v any) {
		walkRefs(v, func(ref string) {
			name, ok := strings.CutPrefix(ref, "#/definitions/")
			if _, seen := out[name]; ok && !seen {
				if d, ok := defs[name]; ok {
					out[name] = d
					queue = append(queue, name)
				}
			}
		})
	}
	for _, r := range roots {
		visit(r)
	}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		visit(defs[name])
	}
	return out
}

// walkRefs calls f with every "$ref" string in v.
func walkRefs(v any, f func(string)) {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if s, ok := x[k].(string); ok && k == "$ref" {
				f(s)
				continue
			}
			walkRefs(x[k], f)
		}
	case []any:
		for _, e := range x {
			walkRefs(e, f)
		}
	}
}
