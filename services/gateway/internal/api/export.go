package api

import (
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	"github.com/noetl/noetl/internal/tabular"
)

// CSVContentType is the MIME type of a table exported as CSV.
const CSVContentType = "text/csv; charset=utf-8"

// exportChunk is the size of the chunks a CSV export is sent in (an Arrow export keeps the
// resultstore's).
const exportChunk = 256 << 10

// ExportResult implements ResultService: the stored Arrow IPC stream of a table as it is
// kept, or converted to CSV while it is read. Nothing is held whole: the resultstore's
// chunks are passed on (Arrow) or decoded a record batch at a time (CSV).
func (s *Server) ExportResult(req *apiv1.ExportResultRequest, stream grpc.ServerStreamingServer[apiv1.ExportResultResponse]) error {
	ctx := stream.Context()
	id, err := resultID(req.GetResultId())
	if err != nil {
		return err
	}
	format := req.GetFormat()
	if _, ok := apiv1.ResultFormat_name[int32(format)]; !ok {
		return status.Errorf(codes.InvalidArgument, "format: unknown format %d (arrow or csv)", format)
	}
	src, err := s.Results.GetResult(ctx, &rsv1.GetResultRequest{Tenant: tenant(ctx), Uri: id})
	if err != nil {
		return err
	}
	first, err := src.Recv()
	if err != nil {
		return err
	}
	ref := first.GetRef()
	if ref.GetContentType() != tabular.ContentType {
		return status.Errorf(codes.FailedPrecondition, "result_id: result %s is %s, not a table: read it as JSON (GET /v1/results/{result_id})", id, ref.GetContentType())
	}
	if format == apiv1.ResultFormat_RESULT_FORMAT_CSV {
		if err := stream.Send(&apiv1.ExportResultResponse{Ref: ref, ContentType: CSVContentType}); err != nil {
			return err
		}
		w := &chunkWriter{send: func(b []byte) error { return stream.Send(&apiv1.ExportResultResponse{Chunk: b}) }}
		if _, err := tabular.WriteCSV(&chunkReader{recv: src.Recv, cur: first.GetChunk()}, w); err != nil {
			return exportError(id, err)
		}
		return w.flush()
	}
	if err := stream.Send(&apiv1.ExportResultResponse{Ref: ref, ContentType: tabular.ContentType, Chunk: first.GetChunk()}); err != nil {
		return err
	}
	for {
		m, err := src.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&apiv1.ExportResultResponse{Chunk: m.GetChunk()}); err != nil {
			return err
		}
	}
}

// exportError keeps a gRPC status (the resultstore's, a digest mismatch) and names the
// result in anything else (a stored stream Arrow cannot read).
func exportError(id string, err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.DataLoss, "result %s: not a readable Arrow IPC stream: %v", id, err)
}

// chunkReader reads the chunks of a resultstore stream as one byte stream.
type chunkReader struct {
	recv func() (*rsv1.GetResultResponse, error)
	cur  []byte
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		m, err := r.recv()
		if err != nil {
			return 0, err
		}
		r.cur = m.GetChunk()
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// chunkWriter gathers writes into messages of exportChunk bytes.
type chunkWriter struct {
	send func([]byte) error
	buf  []byte
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	if len(w.buf) >= exportChunk {
		if err := w.flush(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	b := w.buf
	w.buf = nil
	return w.send(b)
}
