package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/noetl/noetl/gen"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/services/gateway"
	"github.com/noetl/noetl/services/gateway/internal/openapi"
)

// route is one REST binding of a public RPC.
type route struct {
	method string // full gRPC method name
	verb   string // lower-case HTTP verb, as OpenAPI spells it
	path   string // as OpenAPI spells it: {field=**} is {field}, field names in JSON form
}

var pathParam = regexp.MustCompile(`\{([a-z_.]+)(=[^}]*)?\}`)

// publicRoutes lists the REST bindings (google.api.http) of every RPC of the public API.
func publicRoutes(t *testing.T) []route {
	t.Helper()
	_ = apiv1.File_noetl_api_v1_api_proto // the descriptors are registered by the import
	var out []route
	protoregistry.GlobalFiles.RangeFilesByPackage("noetl.api.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
				if rule == nil {
					continue
				}
				for _, r := range append([]*annotations.HttpRule{rule}, rule.GetAdditionalBindings()...) {
					verb, tmpl := "", ""
					switch p := r.GetPattern().(type) {
					case *annotations.HttpRule_Get:
						verb, tmpl = "get", p.Get
					case *annotations.HttpRule_Post:
						verb, tmpl = "post", p.Post
					case *annotations.HttpRule_Put:
						verb, tmpl = "put", p.Put
					case *annotations.HttpRule_Delete:
						verb, tmpl = "delete", p.Delete
					case *annotations.HttpRule_Patch:
						verb, tmpl = "patch", p.Patch
					case *annotations.HttpRule_Custom:
						verb, tmpl = strings.ToLower(p.Custom.GetKind()), p.Custom.GetPath()
					}
					path := pathParam.ReplaceAllStringFunc(tmpl, func(m string) string {
						name := pathParam.FindStringSubmatch(m)[1]
						fd := md.Input().Fields().ByName(protoreflect.Name(name))
						require.NotNil(t, fd, "%s: path parameter %s is not a field of %s", md.FullName(), name, md.Input().FullName())
						return "{" + fd.JSONName() + "}"
					})
					out = append(out, route{method: "/" + string(sd.FullName()) + "/" + string(md.Name()), verb: verb, path: path})
				}
			}
		}
		return true
	})
	return out
}

// TestOpenAPIDocumentsEveryPublicRoute checks that the OpenAPI document in gen/ (the one
// /openapi.json serves, completed) has an operation for every REST binding of the public API.
func TestOpenAPIDocumentsEveryPublicRoute(t *testing.T) {
	t.Parallel()
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(gen.OpenAPI, &doc))
	routes := publicRoutes(t)
	require.GreaterOrEqual(t, len(routes), 17)
	seen := map[string]bool{}
	for _, r := range routes {
		op, ok := doc.Paths[r.path][r.verb]
		require.True(t, ok, "%s (%s %s) is not in gen/openapiv2/noetl.swagger.json: run `make proto`", r.method, strings.ToUpper(r.verb), r.path)
		svc, name, _ := strings.Cut(strings.TrimPrefix(r.method, "/noetl.api.v1."), "/")
		require.Equal(t, svc+"_"+name, op.OperationID)
		seen[r.method] = true
	}
	require.True(t, seen[apiv1.ExecutionService_WatchExecution_FullMethodName], "the watch route is documented")
	// And nothing stale: every documented operation is a binding.
	n := 0
	for _, ops := range doc.Paths {
		n += len(ops)
	}
	require.Equal(t, len(routes), n)

}

// servedDocument is the OpenAPI document the gateway serves, decoded.
type servedDocument struct {
	Info struct {
		Title, Version, Description string
	} `json:"info"`
	SecurityDefinitions map[string]struct {
		Type, In, Name string
	} `json:"securityDefinitions"`
	Security  []map[string][]string `json:"security"`
	Responses map[string]struct {
		Description string
		Schema      struct {
			Ref string `json:"$ref"`
		}
	} `json:"responses"`
	Paths map[string]map[string]struct {
		OperationID string                `json:"operationId"`
		Security    []map[string][]string `json:"security"`
		Responses   map[string]struct {
			Ref string `json:"$ref"`
		} `json:"responses"`
		Parameters []struct{ Name, In string } `json:"parameters"`
	} `json:"paths"`
	Tags []struct {
		Name string `json:"name"`
	} `json:"tags"`
	Definitions map[string]struct {
		Description string                    `json:"description"`
		Properties  map[string]map[string]any `json:"properties"`
	} `json:"definitions"`
}

// TestServedOpenAPIDocument checks the document /openapi.json serves: open to everyone, a
// real title and the build's version, bearer (and X-Api-Key) authentication declared and
// required globally (the webhook route also takes its signature), every REST binding of
// the public API with the gateway's error JSON for its errors, no internal service's tag,
// and every reference resolving.
func TestServedOpenAPIDocument(t *testing.T) {
	t.Parallel()
	f := startGateway(t, gateway.Config{Version: "v9.8.7-test"})
	resp, err := f.client.Get(f.http + "/openapi.json")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	require.Equal(t, http.StatusOK, resp.StatusCode, "open to everyone")
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	want, err := openapi.Document(gen.OpenAPI, "v9.8.7-test")
	require.NoError(t, err)
	require.Equal(t, string(want), string(body), "the document is gen/'s, completed by openapi.Document")

	var doc servedDocument
	require.NoError(t, json.Unmarshal(body, &doc))
	require.Equal(t, "NoETL API", doc.Info.Title)
	require.Equal(t, "v9.8.7-test", doc.Info.Version, "the build's version")
	require.Contains(t, doc.Info.Description, "Bearer")
	bearer := doc.SecurityDefinitions[openapi.SchemeBearer]
	require.Equal(t, "apiKey", bearer.Type)
	require.Equal(t, "header", bearer.In)
	require.Equal(t, "Authorization", bearer.Name)
	require.Equal(t, "X-Api-Key", doc.SecurityDefinitions[openapi.SchemeAPIKey].Name)
	require.Equal(t, "X-Noetl-Signature", doc.SecurityDefinitions[openapi.SchemeWebhookSignature].Name)
	require.Equal(t, []map[string][]string{{openapi.SchemeBearer: {}}, {openapi.SchemeAPIKey: {}}}, doc.Security)

	for _, code := range []string{"400", "401", "403", "404", "413", "429", "500", "503"} {
		r, ok := doc.Responses["Error"+code]
		require.True(t, ok, "response Error%s", code)
		require.NotEmpty(t, r.Description)
		require.Equal(t, "#/definitions/rpcStatus", r.Schema.Ref)
	}
	st := doc.Definitions["rpcStatus"]
	require.Contains(t, st.Description, "error JSON")
	for _, p := range []string{"code", "message", "details"} {
		require.NotEmpty(t, st.Properties[p]["description"], "rpcStatus.%s", p)
	}

	routes := publicRoutes(t)
	n := 0
	for _, r := range routes {
		op, ok := doc.Paths[r.path][r.verb]
		require.True(t, ok, "%s (%s %s) is not served", r.method, strings.ToUpper(r.verb), r.path)
		require.Equal(t, "#/responses/Error401", op.Responses["401"].Ref, "%s", r.method)
		require.Equal(t, "#/responses/Error400", op.Responses["400"].Ref, "%s", r.method)
		if r.method == apiv1.TriggerService_FireTrigger_FullMethodName {
			require.Contains(t, op.Security, map[string][]string{openapi.SchemeWebhookSignature: {}})
			var params []string
			for _, p := range op.Parameters {
				params = append(params, p.In+":"+p.Name)
			}
			require.Contains(t, params, "header:X-Delivery-Id")
			require.Contains(t, params, "query:tenant")
		} else {
			require.Empty(t, op.Security, "%s: the global security applies", r.method)
		}
		n++
	}
	ops := 0
	for _, p := range doc.Paths {
		ops += len(p)
	}
	require.Equal(t, n, ops, "every served operation is a binding of the public API")
	for _, tag := range doc.Tags {
		require.NotContains(t, []string{"StateService", "OrchestratorService", "ResultStoreService", "ApiKeyService", "WatchService"}, tag.Name, "an internal service's tag")
	}
	var refs []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && k == "$ref" {
					refs = append(refs, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	var raw any
	require.NoError(t, json.Unmarshal(body, &raw))
	walk(raw)
	require.NotEmpty(t, refs)
	for _, ref := range refs {
		switch {
		case strings.HasPrefix(ref, "#/definitions/"):
			_, ok := doc.Definitions[strings.TrimPrefix(ref, "#/definitions/")]
			require.True(t, ok, "%s does not resolve", ref)
		case strings.HasPrefix(ref, "#/responses/"):
			_, ok := doc.Responses[strings.TrimPrefix(ref, "#/responses/")]
			require.True(t, ok, "%s does not resolve", ref)
		default:
			t.Fatalf("reference %s", ref)
		}
	}
}
