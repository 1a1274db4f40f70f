package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/tabular"
)

// jsonSchema is the Flight schema of a result stored as JSON (or any non-tabular bytes):
// one binary column whose values, in order, concatenate to the payload.
var jsonSchema = arrow.NewSchema([]arrow.Field{{Name: "chunk", Type: arrow.BinaryTypes.Binary}},
	func() *arrow.Metadata {
		md := arrow.NewMetadata([]string{"noetl.content"}, []string{"chunks"})
		return &md
	}())

// MaxFlightMessage is the largest gRPC message the Flight server and its clients accept
// (one record batch).
const MaxFlightMessage = 64 << 20

// Flight serves results over Apache Arrow Flight.
//
//   - DoGet streams a result: a table as its record batches, any other result as one
//     binary column of chunks. Its ticket, signed by the gateway (or by GetFlightInfo),
//     is its only credential: it names one result of one tenant and expires.
//   - DoPut stores a table a worker uploads; the descriptor's cmd is a serialized
//     PutResultHeader and the one PutResult's app_metadata a serialized ResultRef.
//   - GetFlightInfo describes a result and returns a ticket for it; the descriptor is a
//     path [uri], [result_id] or [execution_id, step], or a cmd holding the uri.
//   - ListFlights lists the results of the execution named by the criteria expression.
//
// All but DoGet need a principal signed with the internal secret (auth.ServerOptions).
type Flight struct {
	flight.BaseFlightServer
	Store *Store
	Trust *auth.Trust
	// Location is the URI clients reach this server at, for example grpc://host:port.
	Location string
	// TicketTTL is how long the tickets GetFlightInfo signs are accepted.
	TicketTTL time.Duration
}

// tenantOf returns the tenant a call acts for: the user principal's, or for a service
// principal the tenant in a full result URI.
func tenantOf(ctx context.Context, uri string) (string, error) {
	p := auth.FromContext(ctx)
	if p == nil {
		return "", status.Error(codes.Unauthenticated, "no principal")
	}
	if !p.Service {
		return p.Tenant, nil
	}
	if t, _ := ParseURI(uri); t != "" {
		return t, nil
	}
	return "", status.Error(codes.InvalidArgument, "descriptor: a service must name a full noetl://results/<tenant>/... URI")
}

// GetFlightInfo implements flight.FlightServer.
func (f *Flight) GetFlightInfo(ctx context.Context, desc *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	var uri, execID, step string
	switch {
	case desc.GetType() == flight.DescriptorCMD:
		uri = string(desc.GetCmd())
	case len(desc.GetPath()) == 1:
		uri = desc.GetPath()[0]
	case len(desc.GetPath()) == 2:
		execID, step = desc.GetPath()[0], desc.GetPath()[1]
	default:
		return nil, status.Error(codes.InvalidArgument, "descriptor: path [uri], [result_id] or [execution_id, step], or cmd holding the uri")
	}
	tenant, err := tenantOf(ctx, uri)
	if err != nil {
		return nil, err
	}
	d, err := f.Store.DescribeResult(ctx, &rsv1.DescribeResultRequest{Tenant: tenant, Uri: uri, ExecutionId: execID, Step: step})
	if err != nil {
		return nil, err
	}
	info, err := f.info(ctx, tenant, d.GetRef(), true)
	if err != nil {
		return nil, err
	}
	info.FlightDescriptor = desc
	return info, nil
}

// info builds the FlightInfo of a result; withSchema reads a table's schema from its stream.
func (f *Flight) info(ctx context.Context, tenant string, ref *eventv1.ResultRef, withSchema bool) (*flight.FlightInfo, error) {
	_, id := ParseURI(ref.GetUri())
	ticket, _ := f.Trust.SignTicket(tenant, id, f.TicketTTL)
	meta, _ := proto.Marshal(ref)
	info := &flight.FlightInfo{
		Endpoint:     []*flight.FlightEndpoint{{Ticket: &flight.Ticket{Ticket: ticket}, Location: []*flight.Location{{Uri: f.Location}}}},
		TotalRecords: -1, TotalBytes: ref.GetSize(), Ordered: true, AppMetadata: meta,
	}
	schema := jsonSchema
	if ref.GetContentType() == tabular.ContentType {
		info.TotalRecords = ref.GetRowCount()
		if withSchema {
			rdr, err := ipc.NewReader(f.Store.open(ctx, tenant, id, ref))
			if err != nil {
				return nil, status.Errorf(codes.DataLoss, "result %s: read schema: %v", ref.GetUri(), err)
			}
			schema = rdr.Schema()
			rdr.Release()
		}
	}
	if withSchema {
		info.Schema = flight.SerializeSchema(schema, memory.DefaultAllocator)
	}
	return info, nil
}

// ListFlights implements flight.FlightServer: the results of one execution, newest last.
func (f *Flight) ListFlights(c *flight.Criteria, stream flight.FlightService_ListFlightsServer) error {
	ctx := stream.Context()
	p := auth.FromContext(ctx)
	if p == nil || p.Service {
		return status.Error(codes.PermissionDenied, "ListFlights lists a tenant's results: call it as a tenant principal")
	}
	execID := string(c.GetExpression())
	if execID == "" {
		return status.Error(codes.InvalidArgument, "criteria: expression must be an execution id")
	}
	ids, err := f.Store.Backend.List(ctx, p.Tenant, execID, 10000)
	if err != nil {
		return err
	}
	for _, id := range ids {
		ref, _, err := f.Store.describe(ctx, p.Tenant, id)
		if status.Code(err) == codes.NotFound {
			continue // expired meanwhile
		}
		if err != nil {
			return err
		}
		info, err := f.info(ctx, p.Tenant, ref, false)
		if err != nil {
			return err
		}
		info.FlightDescriptor = &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{ref.GetUri()}}
		if err := stream.Send(info); err != nil {
			return err
		}
	}
	return nil
}

// DoGet implements flight.FlightServer.
func (f *Flight) DoGet(t *flight.Ticket, stream flight.FlightService_DoGetServer) error {
	defer f.Store.Metrics.stream("get")()
	tk, err := f.Trust.VerifyTicket(t.GetTicket())
	if err != nil {
		return err
	}
	ctx := stream.Context()
	ref, id, err := f.Store.describe(ctx, tk.Tenant, tk.ResultID)
	if err != nil {
		return err
	}
	src := f.Store.open(ctx, tk.Tenant, id, ref)
	if ref.GetContentType() == tabular.ContentType {
		rdr, err := ipc.NewReader(src)
		if err != nil {
			return status.Errorf(codes.DataLoss, "result %s: %v", ref.GetUri(), err)
		}
		defer rdr.Release()
		w := flight.NewRecordWriter(stream, ipc.WithSchema(rdr.Schema()))
		for rdr.Next() {
			if err := w.Write(rdr.RecordBatch()); err != nil {
				return err
			}
		}
		if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		// Read past the end-of-stream marker so that the digest is checked.
		if _, err := io.Copy(io.Discard, src); err != nil {
			return err
		}
		return w.Close()
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(jsonSchema))
	b := array.NewRecordBuilder(memory.DefaultAllocator, jsonSchema)
	defer b.Release()
	for {
		data, err := src.next()
		if err == io.EOF {
			return w.Close()
		}
		if err != nil {
			return err
		}
		b.Field(0).(*array.BinaryBuilder).Append(data)
		rec := b.NewRecordBatch()
		err = w.Write(rec)
		rec.Release()
		if err != nil {
			return err
		}
	}
}

// DoPut implements flight.FlightServer.
func (f *Flight) DoPut(stream flight.FlightService_DoPutServer) error {
	defer f.Store.Metrics.stream("put")()
	ctx := stream.Context()
	p := auth.FromContext(ctx)
	if p == nil {
		return status.Error(codes.Unauthenticated, "no principal")
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "DoPut: read the schema: %v", err)
	}
	defer rdr.Release()
	desc := rdr.LatestFlightDescriptor()
	h := &rsv1.PutResultHeader{}
	if desc == nil || desc.GetType() != flight.DescriptorCMD || proto.Unmarshal(desc.GetCmd(), h) != nil {
		return status.Error(codes.InvalidArgument, "descriptor: cmd must be a serialized noetl.resultstore.v1.PutResultHeader")
	}
	if !p.Service {
		h.Tenant = p.Tenant
	}
	h.ContentType = tabular.ContentType
	w, err := f.Store.create(ctx, h)
	if err != nil {
		return err
	}
	defer w.abort()
	iw := ipc.NewWriter(w, ipc.WithSchema(rdr.Schema()))
	var rows int64
	for rdr.Next() {
		rec := rdr.RecordBatch()
		rows += rec.NumRows()
		if err := iw.Write(rec); err != nil {
			return err
		}
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("DoPut: read record batches: %w", err)
	}
	if err := iw.Close(); err != nil {
		return err
	}
	ref, err := w.commit(rows, tabular.SchemaJSON(rdr.Schema()))
	if err != nil {
		return err
	}
	meta, _ := proto.Marshal(ref)
	return stream.Send(&flight.PutResult{AppMetadata: meta})
}
