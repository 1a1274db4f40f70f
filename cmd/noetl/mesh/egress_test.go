package mesh_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/services/worker"
)

const fetchURL = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: fetch-url, path: tests/fetch-url}
workload: {url: ""}
workflow:
  - step: start
    tool: {kind: http, url: "{{ workload.url }}", timeout_seconds: 5}
`

// TestDevMeshReachesLoopbackOnly runs an http step against a server on 127.0.0.1, the
// cloud metadata address and a private address, in the dev mesh's default policy and with
// the policy widened to private. The refused addresses fail the step with the address
// class and the setting that would allow them; the refusal happens in the dialer before it
// connects, so no packet goes to 169.254.169.254 or 10.0.0.5 (the error says so: a
// connection attempt would end otherwise, in a timeout or a refusal).
func TestDevMeshReachesLoopbackOnly(t *testing.T) {
	local := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"local":true}`))
	}))
	t.Cleanup(local.Close)

	const (
		metadata = "refusing to connect to 169.254.169.254:80 (cloud metadata address): no NOETL_HTTP_EGRESS setting allows it"
		private  = "refusing to connect to 10.0.0.5:80 (private address): NOETL_HTTP_EGRESS=loopback allows public and loopback addresses only; NOETL_HTTP_EGRESS=private (noetl dev --http-egress private) allows private ones"
	)
	for _, tc := range []struct {
		name   string
		egress string
		refuse map[string]string // url -> message
	}{
		{name: "default", egress: "", refuse: map[string]string{"http://169.254.169.254/latest/meta-data/": metadata, "http://10.0.0.5/": private}},
		{name: "private", egress: worker.HTTPEgressPrivate, refuse: map[string]string{"http://169.254.169.254/latest/meta-data/": metadata, "http://[fd00:ec2::254]/": "refusing to connect to [fd00:ec2::254]:80 (cloud metadata address)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startAuthMesh(t, mesh.Config{HTTPEgress: tc.egress})
			c := newClient(t, m, m.AdminKey)
			ctx := context.Background()
			_, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: fetchURL})
			require.NoError(t, err)
			run := func(url string) *apiv1.Execution {
				t.Helper()
				w, err := structpb.NewStruct(map[string]any{"url": url})
				require.NoError(t, err)
				started, err := c.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "tests/fetch-url", Workload: w})
				require.NoError(t, err)
				done, err := c.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: started.GetExecutionId(), Timeout: durationpb.New(60 * time.Second)})
				require.NoError(t, err)
				return done.GetExecution()
			}

			x := run(local.URL + "/")
			require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "loopback is reachable: %v", x.GetError())
			res := x.GetResult().GetStructValue().AsMap()
			require.EqualValues(t, 200, res["status_code"])
			require.Equal(t, map[string]any{"local": true}, res["body"])

			for url, want := range tc.refuse {
				x := run(url)
				require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, x.GetStatus(), url)
				require.Contains(t, x.GetError().GetMessage(), want, url)
				require.NotContains(t, x.GetError().GetMessage(), "timed out", url)
			}
		})
	}
}
