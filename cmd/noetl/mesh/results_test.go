package mesh_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/tabular"
)

const tables = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: tables, path: tests/tables}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        result = [{"id": i, "name": "row-%d" % i, "score": i / 4} for i in range(20000)]
    next: [{step: total}]
  - step: total
    tool:
      kind: python
      input: {rows: "{{ start }}"}
      code: |
        result = {"n": len(rows), "sum": sum(r["id"] for r in rows), "last": rows[-1]}
    next: [{step: doc}]
  - step: doc
    tool:
      kind: python
      code: |
        result = {"meta": {"k": "v"}, "blob": "x" * 200000, "list": [1, 2, 3]}
`

// TestTablesTravelAsArrowAndAreServedOverFlight runs a step that returns 20,000 records:
// the worker uploads them as Arrow record batches, the next step consumes them as the same
// JSON, and the gateway serves the table by page and over Flight with a signed ticket.
func TestTablesTravelAsArrowAndAreServedOverFlight(t *testing.T) {
	h := start(t, false)
	ctx := context.Background()
	x := h.run(t, tables, nil, "")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
	require.Equal(t, map[string]any{"n": float64(20000), "sum": float64(199990000),
		"last": map[string]any{"id": float64(19999), "name": "row-19999", "score": 4999.75}},
		x.GetSteps()["total"].GetResult().AsInterface(), "the next step saw the records as they were returned")

	ref := x.GetSteps()["start"].GetResultRef()
	require.NotNil(t, ref)
	require.Equal(t, tabular.ContentType, ref.GetContentType())
	require.EqualValues(t, 20000, ref.GetRowCount())
	require.JSONEq(t, `[{"name":"id","type":"int64"},{"name":"name","type":"utf8"},{"name":"score","type":"float64"}]`, ref.GetSchemaJson())

	conn, err := h.m.Dial()
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	res := apiv1.NewResultServiceClient(conn)
	page, err := res.GetResult(ctx, &apiv1.GetResultRequest{ResultId: ref.GetUri(), Offset: 100, Limit: 2})
	require.NoError(t, err)
	require.EqualValues(t, 20000, page.GetTotalRows())
	rows := page.GetValue().GetStructValue().GetFields()["rows"].GetListValue().GetValues()
	require.Len(t, rows, 2)
	require.EqualValues(t, 101, rows[1].GetStructValue().GetFields()["id"].GetNumberValue())

	docRef := x.GetSteps()["doc"].GetResultRef()
	require.Equal(t, "application/json", docRef.GetContentType())
	k, err := res.GetResult(ctx, &apiv1.GetResultRequest{ResultId: docRef.GetUri(), Pointer: "/meta/k"})
	require.NoError(t, err)
	require.Equal(t, "v", k.GetValue().GetStringValue())
	_, err = res.GetResult(ctx, &apiv1.GetResultRequest{ResultId: docRef.GetUri(), Pointer: "/meta/missing"})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "/meta/missing")

	// Flight: location and ticket from the gateway, DoGet with nothing but the ticket.
	info, err := res.GetResultFlightInfo(ctx, &apiv1.GetResultFlightInfoRequest{ResultId: ref.GetUri()})
	require.NoError(t, err)
	require.Equal(t, "grpc://"+h.m.FlightAddr, info.GetLocation())
	client, err := flight.NewClientWithMiddleware(strings.TrimPrefix(info.GetLocation(), "grpc://"), nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer func() { _ = client.Close() }()
	n, sum, err := readFlight(ctx, client, info.GetTicket())
	require.NoError(t, err)
	require.EqualValues(t, 20000, n)
	require.EqualValues(t, 199990000, sum)
	tampered := append([]byte{}, info.GetTicket()...)
	tampered[len(tampered)-1] ^= 1
	_, _, err = readFlight(ctx, client, tampered)
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	_, err = res.GetResultFlightInfo(ctx, &apiv1.GetResultFlightInfoRequest{ResultId: "no-such-result"})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)

	// Events stay small whatever the results weigh.
	pg, err := pgx.Connect(ctx, h.m.PostgresURL)
	require.NoError(t, err)
	defer func() { _ = pg.Close(ctx) }()
	var largest int
	require.NoError(t, pg.QueryRow(ctx, `SELECT max(octet_length(body)) FROM noetl.event WHERE execution_id = $1`, x.GetExecutionId()).Scan(&largest))
	require.Less(t, largest, 16<<10, "the largest event")
}

// readFlight reads a table with DoGet and returns its rows and the sum of its first column.
func readFlight(ctx context.Context, c flight.Client, ticket []byte) (rows, sum int64, err error) {
	stream, err := c.DoGet(ctx, &flight.Ticket{Ticket: ticket})
	if err != nil {
		return 0, 0, err
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return 0, 0, err
	}
	defer rdr.Release()
	for rdr.Next() {
		rec := rdr.RecordBatch()
		rows += rec.NumRows()
		ids := rec.Column(0).(*array.Int64)
		for i := 0; i < ids.Len(); i++ {
			sum += ids.Value(i)
		}
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return rows, sum, err
	}
	return rows, sum, nil
}
