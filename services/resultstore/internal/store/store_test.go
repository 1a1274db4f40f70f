package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/schema"
	"github.com/noetl/noetl/internal/tabular"
	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// rig is a resultstore (gRPC and Flight on one server) over a private database.
type rig struct {
	db     *pgxpool.Pool
	store  *Store
	trust  *auth.Trust
	worker *grpc.ClientConn // signed as the worker service
	user   *grpc.ClientConn // forwards the principal in the call's context
	flight flight.Client    // as the worker service
	uflt   flight.Client    // forwards the principal in the call's context
}

func newRig(t *testing.T, ttl time.Duration) *rig {
	t.Helper()
	ctx := context.Background()
	db, err := pgxpool.New(ctx, testkit.StartPostgres(t))
	require.NoError(t, err)
	t.Cleanup(db.Close)
	require.NoError(t, schema.Migrate(ctx, db, slog.New(slog.DiscardHandler)))
	trust, err := auth.NewTrust(strings.Repeat("s", 32))
	require.NoError(t, err)
	st := &Store{Backend: &Postgres{DB: db}, TTL: ttl}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(append(auth.ServerOptions(trust), grpc.MaxRecvMsgSize(MaxFlightMessage))...)
	rsv1.RegisterResultStoreServiceServer(srv, st)
	flight.RegisterFlightServiceServer(srv, &Flight{Store: st, Trust: trust, Location: "grpc://" + lis.Addr().String(), TicketTTL: time.Minute})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	dial := func(creds grpc.DialOption) *grpc.ClientConn {
		c, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), creds,
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxFlightMessage)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	fl := func(creds grpc.DialOption) flight.Client {
		c, err := flight.NewClientWithMiddleware(lis.Addr().String(), nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()), creds,
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxFlightMessage)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	svc, fwd := grpc.WithPerRPCCredentials(trust.Service("worker")), grpc.WithPerRPCCredentials(trust.Forward("gateway"))
	return &rig{db: db, store: st, trust: trust, worker: dial(svc), user: dial(fwd), flight: fl(svc), uflt: fl(fwd)}
}

// as returns a context carrying a user principal of tenant.
func as(tenant string) context.Context {
	return auth.NewContext(context.Background(), &auth.Principal{Subject: "u-" + tenant, Tenant: tenant, Roles: []string{auth.RoleViewer}})
}

// rows builds n records {id, name, score}.
func records(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]any{"id": int64(i), "name": fmt.Sprintf("row-%d", i), "score": float64(i) / 4}
	}
	return out
}

// putTable uploads a table with DoPut as the worker and returns its reference.
func (r *rig) putTable(t *testing.T, tenant, execID, id string, v any) *eventv1.ResultRef {
	t.Helper()
	tb, ok := tabular.Detect(v)
	require.True(t, ok)
	stream, err := r.flight.DoPut(context.Background())
	require.NoError(t, err)
	w := flight.NewRecordWriter(stream, ipc.WithSchema(tb.Schema()))
	cmd, _ := proto.Marshal(&rsv1.PutResultHeader{Tenant: tenant, ExecutionId: execID, Step: "big", ResultId: id, ExtractedJson: []byte(`{"n":1}`)})
	w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: cmd})
	require.NoError(t, tb.Batches(nil, 4096, w.Write))
	require.NoError(t, w.Close())
	require.NoError(t, stream.CloseSend())
	res, err := stream.Recv()
	require.NoError(t, err)
	ref := &eventv1.ResultRef{}
	require.NoError(t, proto.Unmarshal(res.GetAppMetadata(), ref))
	return ref
}

// doGet reads a flight and returns its rows and the sum of the "id" column.
func doGet(ctx context.Context, c flight.Client, ticket []byte) (rows, sum int64, err error) {
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

func TestTablesGoInWithDoPutAndOutWithDoGet(t *testing.T) {
	r := newRig(t, 0)
	const n = 100_000
	ref := r.putTable(t, "acme", "e1", "r1", records(n))
	require.Equal(t, "noetl://results/acme/e1/r1", ref.GetUri())
	require.Equal(t, tabular.ContentType, ref.GetContentType())
	require.EqualValues(t, n, ref.GetRowCount())
	require.JSONEq(t, `[{"name":"id","type":"int64"},{"name":"name","type":"utf8"},{"name":"score","type":"float64"}]`, ref.GetSchemaJson())

	// Flight info by URI, by bare id and by [execution_id, step], as the tenant.
	ctx := as("acme")
	for _, desc := range []*flight.FlightDescriptor{
		{Type: flight.DescriptorPATH, Path: []string{ref.GetUri()}},
		{Type: flight.DescriptorPATH, Path: []string{"r1"}},
		{Type: flight.DescriptorPATH, Path: []string{"e1", "big"}},
		{Type: flight.DescriptorCMD, Cmd: []byte(ref.GetUri())},
	} {
		info, err := r.uflt.GetFlightInfo(ctx, desc)
		require.NoError(t, err, desc.String())
		require.EqualValues(t, n, info.GetTotalRecords())
		schema, err := flight.DeserializeSchema(info.GetSchema(), nil)
		require.NoError(t, err)
		require.Equal(t, []string{"id", "name", "score"}, []string{schema.Field(0).Name, schema.Field(1).Name, schema.Field(2).Name})
		rows, sum, err := doGet(context.Background(), r.uflt, info.GetEndpoint()[0].GetTicket().GetTicket())
		require.NoError(t, err)
		require.EqualValues(t, n, rows)
		require.EqualValues(t, int64(n)*(n-1)/2, sum)
	}

	// Another tenant sees nothing, and a service must name the tenant.
	_, err := r.uflt.GetFlightInfo(as("other"), &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"r1"}})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	_, err = r.flight.GetFlightInfo(context.Background(), &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"r1"}})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)

	// ListFlights: the execution's results.
	r.putTable(t, "acme", "e1", "r2", records(3))
	lf, err := r.uflt.ListFlights(ctx, &flight.Criteria{Expression: []byte("e1")})
	require.NoError(t, err)
	var uris []string
	for {
		info, err := lf.Recv()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		uris = append(uris, info.GetFlightDescriptor().GetPath()[0])
	}
	require.ElementsMatch(t, []string{"noetl://results/acme/e1/r1", "noetl://results/acme/e1/r2"}, uris)

	// A page of the table as JSON.
	rs := rsv1.NewResultStoreServiceClient(r.user)
	page, err := rs.ReadResult(ctx, &rsv1.ReadResultRequest{Uri: "r1", Offset: 50_000, Limit: 2})
	require.NoError(t, err)
	require.EqualValues(t, n, page.GetTotalRows())
	require.JSONEq(t, `{"columns":["id","name","score"],"offset":50000,"total_rows":100000,
		"rows":[{"id":50000,"name":"row-50000","score":12500},{"id":50001,"name":"row-50001","score":12500.25}]}`, string(page.GetJson()))
	one, err := rs.ReadResult(ctx, &rsv1.ReadResultRequest{Uri: "r1", Offset: 7, Pointer: "/rows/0/name"})
	require.NoError(t, err)
	require.Equal(t, `"row-7"`, string(one.GetJson()))
	_, err = rs.ReadResult(ctx, &rsv1.ReadResultRequest{Uri: "r1", Limit: MaxPageRows + 1})
	require.Equal(t, codes.InvalidArgument, status.Code(err))

	// The raw bytes over the gRPC stream are the IPC stream and decode to the original JSON.
	var raw bytes.Buffer
	gr, err := rsv1.NewResultStoreServiceClient(r.worker).GetResult(context.Background(), &rsv1.GetResultRequest{Tenant: "acme", Uri: "r2"})
	require.NoError(t, err)
	for {
		m, err := gr.Recv()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		raw.Write(m.GetChunk())
	}
	var js bytes.Buffer
	_, err = tabular.ToJSON(&raw, &js)
	require.NoError(t, err)
	want, _ := json.Marshal(records(3))
	require.Equal(t, string(want), js.String())
}

func TestTicketsAreCheckedBeforeAnythingIsRead(t *testing.T) {
	r := newRig(t, 0)
	r.putTable(t, "acme", "e1", "r1", records(10))
	anon, err := flight.NewClientWithMiddleware(strings.TrimPrefix(mustInfo(t, r).GetEndpoint()[0].GetLocation()[0].GetUri(), "grpc://"), nil, nil,
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer func() { _ = anon.Close() }()

	// A client with nothing but a valid ticket reads the table.
	rows, _, err := doGet(context.Background(), anon, mustInfo(t, r).GetEndpoint()[0].GetTicket().GetTicket())
	require.NoError(t, err)
	require.EqualValues(t, 10, rows)

	other, _ := r.trust.SignTicket("other", "r1", time.Minute)
	_, _, err = doGet(context.Background(), anon, other)
	require.Equal(t, codes.NotFound, status.Code(err), "a ticket of another tenant: %v", err)

	expired, _ := r.trust.SignTicket("acme", "r1", -time.Minute)
	_, _, err = doGet(context.Background(), anon, expired)
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)

	forger, _ := auth.NewTrust(strings.Repeat("x", 32))
	forged, _ := forger.SignTicket("acme", "r1", time.Minute)
	_, _, err = doGet(context.Background(), anon, forged)
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)

	// Everything but DoGet needs a signed principal.
	_, err = anon.GetFlightInfo(context.Background(), &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"r1"}})
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	put, err := anon.DoPut(context.Background())
	require.NoError(t, err)
	_, err = put.Recv()
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
}

func mustInfo(t *testing.T, r *rig) *flight.FlightInfo {
	t.Helper()
	info, err := r.uflt.GetFlightInfo(as("acme"), &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"r1"}})
	require.NoError(t, err)
	return info
}

func TestJSONResultsSelectAndStream(t *testing.T) {
	r := newRig(t, 0)
	big := strings.Repeat("x", 3*ChunkSize+17)
	doc := fmt.Sprintf(`{"a":{"b":[1,2,{"c":"x/y"}]},"big":%q,"z":[true,null]}`, big)
	ref := putJSON(t, r, "acme", "e1", "j1", doc)
	require.EqualValues(t, len(doc), ref.GetSize())

	ctx := as("acme")
	rs := rsv1.NewResultStoreServiceClient(r.user)
	for ptr, want := range map[string]string{"/a/b/2/c": `"x/y"`, "/a/b/1": `2`, "/z": `[true,null]`, "/a": `{"b":[1,2,{"c":"x/y"}]}`} {
		got, err := rs.ReadResult(ctx, &rsv1.ReadResultRequest{Uri: "j1", Pointer: ptr})
		require.NoError(t, err, ptr)
		require.Equal(t, want, string(got.GetJson()), ptr)
	}
	for ptr, code := range map[string]codes.Code{"/a/nope": codes.NotFound, "/a/b/9": codes.NotFound, "/a/b/01": codes.NotFound, "a": codes.InvalidArgument} {
		_, err := rs.ReadResult(ctx, &rsv1.ReadResultRequest{Uri: "j1", Pointer: ptr})
		require.Equal(t, code, status.Code(err), "%s: %v", ptr, err)
		require.Contains(t, status.Convert(err).Message(), ptr)
	}
	_, err := rs.ReadResult(ctx, &rsv1.ReadResultRequest{Uri: "j1", MaxBytes: 1024})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "whole result over the bound")
	_, err = rs.ReadResult(ctx, &rsv1.ReadResultRequest{Uri: "j1", Pointer: "/big", MaxBytes: 1024})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "selection over the bound")

	// DoGet of a JSON result: binary chunks that concatenate to the payload.
	info, err := r.uflt.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"j1"}})
	require.NoError(t, err)
	require.EqualValues(t, -1, info.GetTotalRecords())
	stream, err := r.uflt.DoGet(context.Background(), info.GetEndpoint()[0].GetTicket())
	require.NoError(t, err)
	rdr, err := flight.NewRecordReader(stream)
	require.NoError(t, err)
	var got bytes.Buffer
	for rdr.Next() {
		col := rdr.RecordBatch().Column(0).(*array.Binary)
		for i := 0; i < col.Len(); i++ {
			got.Write(col.Value(i))
		}
	}
	rdr.Release()
	require.Equal(t, doc, got.String())
	require.Equal(t, arrow.BinaryTypes.Binary, rdr.Schema().Field(0).Type)
}

func putJSON(t *testing.T, r *rig, tenant, execID, id, doc string) *eventv1.ResultRef {
	t.Helper()
	put, err := rsv1.NewResultStoreServiceClient(r.worker).PutResult(context.Background())
	require.NoError(t, err)
	require.NoError(t, put.Send(&rsv1.PutResultRequest{Header: &rsv1.PutResultHeader{Tenant: tenant, ExecutionId: execID, Step: "s", ResultId: id}, Chunk: []byte(doc[:10])}))
	require.NoError(t, put.Send(&rsv1.PutResultRequest{Chunk: []byte(doc[10:])}))
	resp, err := put.CloseAndRecv()
	require.NoError(t, err)
	return resp.GetRef()
}

func TestExpiredResultsAreInvisibleThenSwept(t *testing.T) {
	r := newRig(t, time.Nanosecond)
	ctx := context.Background()
	putJSON(t, r, "acme", "e1", "gone", `{"payload":"`+strings.Repeat("y", ChunkSize)+`"}`)
	_, err := r.store.DescribeResult(ctx, &rsv1.DescribeResultRequest{Tenant: "acme", Uri: "gone"})
	require.Equal(t, codes.NotFound, status.Code(err), "an expired result is not served")

	r.store.TTL = 0
	putJSON(t, r, "acme", "e1", "kept", `{"ok":true}`)
	n, err := r.store.Sweep(ctx, 1000)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	var results, chunks int
	require.NoError(t, r.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM noetl.result), (SELECT count(*) FROM noetl.result_chunk)`).Scan(&results, &chunks))
	require.Equal(t, 1, results, "the kept result stays")
	require.Equal(t, 1, chunks, "the swept result's chunks are gone")
}

func TestACorruptChunkIsDataLoss(t *testing.T) {
	r := newRig(t, 0)
	ctx := context.Background()
	putJSON(t, r, "acme", "e1", "c1", `{"value":"original value"}`)
	_, err := r.db.Exec(ctx, `UPDATE noetl.result_chunk SET data = convert_to('{"value":"tampered value"}', 'UTF8') WHERE result_id='c1'`)
	require.NoError(t, err)
	_, err = rsv1.NewResultStoreServiceClient(r.user).ReadResult(as("acme"), &rsv1.ReadResultRequest{Uri: "c1"})
	require.Equal(t, codes.DataLoss, status.Code(err), "%v", err)
}
