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
// /openapi.json serves) has an operation for every REST binding of the public API, and that
// the gateway serves that document.
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

	f := startGateway(t, gateway.Config{})
	resp, err := f.client.Get(f.http + "/openapi.json")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	require.Equal(t, http.StatusOK, resp.StatusCode, "open to everyone")
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, string(gen.OpenAPI), string(body))
}
