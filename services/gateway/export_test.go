package gateway_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/tabular"
	"github.com/noetl/noetl/services/gateway"
)

// Result ids the fake resultstore knows, each of tenant-a.
const (
	resTable  = "r-table"  // a 1,000-row table
	resJSON   = "r-json"   // a JSON document, not a table
	resBroken = "r-broken" // a table whose stream fails after its first chunk
)

// tableIPC is the Arrow IPC stream of a 1,000-row table (id, name, score).
func tableIPC(t *testing.T) []byte {
	t.Helper()
	rows := make([]any, 1000)
	for i := range rows {
		rows[i] = map[string]any{"id": float64(i), "name": fmt.Sprintf("row %d, quoted \"%d\"", i, i), "score": float64(i) / 4}
	}
	tbl, ok := tabular.Detect(rows)
	require.True(t, ok)
	var b bytes.Buffer
	_, err := tabular.WriteIPC(&b, tbl, 128)
	require.NoError(t, err)
	return b.Bytes()
}

var storedTable []byte

// GetResult streams the fake results of tenant-a in 4 KiB chunks; others are not found.
func (b *backend) GetResult(req *rsv1.GetResultRequest, stream grpc.ServerStreamingServer[rsv1.GetResultResponse]) error {
	if req.GetTenant() != "tenant-a" {
		return status.Errorf(codes.NotFound, "result %s not found", req.GetUri())
	}
	var data []byte
	ref := &eventv1.ResultRef{Uri: "noetl://results/" + req.GetUri(), ContentType: tabular.ContentType, RowCount: 1000}
	switch req.GetUri() {
	case resTable, resBroken:
		data = storedTable
	case resJSON:
		data, ref.ContentType, ref.RowCount = []byte(`{"a": 1}`), "application/json", 0
	default:
		return status.Errorf(codes.NotFound, "result %s not found", req.GetUri())
	}
	ref.Size = int64(len(data))
	if err := stream.Send(&rsv1.GetResultResponse{Ref: ref}); err != nil {
		return err
	}
	for len(data) > 0 {
		n := min(4096, len(data))
		if err := stream.Send(&rsv1.GetResultResponse{Chunk: data[:n]}); err != nil {
			return err
		}
		data = data[n:]
		if req.GetUri() == resBroken {
			return status.Error(codes.DataLoss, "result r-broken: digest mismatch")
		}
	}
	return nil
}

// download GETs path with key and returns the status, headers and body.
func (f *fixture) download(key, path string) (int, http.Header, []byte, error) {
	req, err := http.NewRequest(http.MethodGet, f.http+path, nil)
	require.NoError(f.t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := f.client.Do(req)
	require.NoError(f.t, err)
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body, err
}

// TestExportResultServesArrowAndCSV: a table downloads as the Arrow IPC stream the
// resultstore keeps (byte for byte, and Arrow reads it back) or as CSV, over REST with the
// caller's key and over gRPC; another tenant, a JSON result, a bad format and no key are
// refused as the API refuses; a stream failing halfway cuts the download off.
func TestExportResultServesArrowAndCSV(t *testing.T) {
	storedTable = tableIPC(t)
	f := startGateway(t, gateway.Config{})

	code, hd, body, err := f.download(f.keyA, "/v1/results/"+resTable+"/export")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, tabular.ContentType, hd.Get("Content-Type"))
	require.Equal(t, `attachment; filename=r-table.arrow`, hd.Get("Content-Disposition"))
	require.Equal(t, storedTable, body, "the stored stream, unchanged")
	rdr, err := ipc.NewReader(bytes.NewReader(body))
	require.NoError(t, err)
	var rows int64
	for rdr.Next() {
		rec := rdr.RecordBatch()
		rows += rec.NumRows()
		if rows == rec.NumRows() {
			require.Equal(t, "row 0, quoted \"0\"", rec.Column(rec.Schema().FieldIndices("name")[0]).(*array.String).Value(0))
		}
	}
	require.NoError(t, rdr.Err())
	rdr.Release()
	require.EqualValues(t, 1000, rows)

	code, hd, body, err = f.download(f.keyA, "/v1/results/"+resTable+"/export?format=csv")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, "text/csv; charset=utf-8", hd.Get("Content-Type"))
	require.Equal(t, `attachment; filename=r-table.csv`, hd.Get("Content-Disposition"))
	recs, err := csv.NewReader(bytes.NewReader(body)).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 1001, "a header and every row")
	require.Equal(t, []string{"id", "name", "score"}, recs[0])
	require.Equal(t, []string{"999", `row 999, quoted "999"`, "249.75"}, recs[1000])

	// gRPC: the first message names the format, the chunks are the file.
	st, err := apiv1.NewResultServiceClient(f.conns[f.keyA]).ExportResult(context.Background(), &apiv1.ExportResultRequest{ResultId: resTable})
	require.NoError(t, err)
	var got []byte
	first := true
	for {
		m, err := st.Recv()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if first {
			require.Equal(t, tabular.ContentType, m.GetContentType())
			require.EqualValues(t, 1000, m.GetRef().GetRowCount())
			first = false
		}
		got = append(got, m.GetChunk()...)
	}
	require.Equal(t, storedTable, got)

	refused := []struct {
		name, key, path string
		code            int
		msg             string
	}{
		{"another tenant's result", f.keyB, "/v1/results/" + resTable + "/export", http.StatusNotFound, "not found"},
		{"not a table", f.keyA, "/v1/results/" + resJSON + "/export", http.StatusBadRequest, "is application/json, not a table"},
		{"unknown format", f.keyA, "/v1/results/" + resTable + "/export?format=parquet", http.StatusBadRequest, `format: must be arrow or csv, not "parquet"`},
		{"bad id", f.keyA, "/v1/results/" + "a%20b" + "/export", http.StatusBadRequest, "result_id:"},
		{"no key", "", "/v1/results/" + resTable + "/export", http.StatusUnauthorized, "credentials"},
	}
	for _, tc := range refused {
		code, hd, body, err := f.download(tc.key, tc.path)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.code, code, "%s: %s", tc.name, body)
		require.Equal(t, "application/json", hd.Get("Content-Type"), tc.name)
		var e struct{ Message string }
		require.NoError(t, json.Unmarshal(body, &e), tc.name)
		require.Contains(t, e.Message, tc.msg, tc.name)
	}

	// A failure after the first bytes cuts the response off: no complete short file.
	code, _, body, err = f.download(f.keyA, "/v1/results/"+resBroken+"/export")
	require.Equal(t, http.StatusOK, code)
	require.Error(t, err, "the transfer fails")
	require.Less(t, len(body), len(storedTable))
}

// listCall is what a ListExecutions call brought the statebuilder: the tenant asked for
// and the principal it was signed for.
type listCall struct {
	tenant    string
	principal *auth.Principal
}

// ListExecutions records the call and answers one execution of the tenant asked for.
func (b *backend) ListExecutions(ctx context.Context, req *sbv1.ListExecutionsRequest) (*sbv1.ListExecutionsResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	tr, err := auth.NewTrust(strings.Repeat("s", 32))
	if err != nil {
		return nil, err
	}
	p, err := tr.Verify(sbv1.StateService_ListExecutions_FullMethodName, md)
	if err != nil {
		return nil, err
	}
	b.lists <- listCall{tenant: req.GetTenant(), principal: p}
	tenant := req.GetTenant()
	if tenant == "" {
		tenant = "tenant-b"
	}
	return &sbv1.ListExecutionsResponse{Executions: []*sbv1.ExecutionSummary{{ExecutionId: idX1, Tenant: tenant, PlaybookPath: "tests/x", PlaybookVersion: 1}}}, nil
}

// TestListExecutionsByTenant: a caller lists its own tenant's executions (as itself); a
// system principal lists another tenant's or every tenant's (the statebuilder asked as the
// gateway, each execution naming its tenant); anyone else asking for another tenant is
// refused before the statebuilder is asked.
func TestListExecutionsByTenant(t *testing.T) {
	f := startGateway(t, gateway.Config{})
	cases := []struct {
		name, key, query string
		tenant           string // the statebuilder's filter
		asService        bool
		shown            string // the tenant of the listed execution
	}{
		{"own tenant", f.keyA, "", "tenant-a", false, "tenant-a"},
		{"own tenant named", f.keyA, "?tenant=tenant-a", "tenant-a", false, "tenant-a"},
		{"system: another tenant", f.keySys, "?tenant=tenant-b", "tenant-b", true, "tenant-b"},
		{"system: every tenant", f.keySys, "?tenant=-", "", true, "tenant-b"},
		{"system: its own", f.keySys, "", "ops", false, "ops"},
	}
	for _, tc := range cases {
		code, _, body := f.rest(tc.key, http.MethodGet, "/v1/executions"+tc.query, "")
		require.Equal(t, http.StatusOK, code, "%s: %v", tc.name, body)
		call := <-f.be.lists
		require.Equal(t, tc.tenant, call.tenant, tc.name)
		require.Equal(t, tc.asService, call.principal.Service, tc.name)
		xs := body["executions"].([]any)
		require.Len(t, xs, 1, tc.name)
		require.Equal(t, tc.shown, xs[0].(map[string]any)["tenant"], tc.name)
	}
	for _, q := range []string{"?tenant=tenant-b", "?tenant=-"} {
		code, _, body := f.rest(f.keyA, http.MethodGet, "/v1/executions"+q, "")
		require.Equal(t, http.StatusForbidden, code, q)
		require.Contains(t, body["message"], "tenant: listing the executions of another tenant", q)
		require.Contains(t, body["message"], "needs the system role", q)
	}
	code, _, body := f.rest(f.keySys, http.MethodGet, "/v1/executions?tenant=a%20b", "")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body["message"], "tenant:")
	_, err := f.executions(f.keyB).ListExecutions(context.Background(), &apiv1.ListExecutionsRequest{Tenant: "tenant-a"})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "over gRPC as well")
	require.Empty(t, f.be.lists, "refusals never reach the statebuilder")
}
