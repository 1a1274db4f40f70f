// Package store keeps results, addressed by noetl://results/<tenant>/<execution_id>/<id>
// URIs, in a Backend (Postgres: chunked bytea rows, postgres.go) with the digest verified on
// read, and serves them over gRPC (ResultStoreService) and Apache Arrow Flight (flight.go).
// Results expire after a retention period and a sweeper deletes them.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
)

// ChunkSize is the size of one stored chunk.
const ChunkSize = 1 << 20

// Store implements ResultStoreService.
type Store struct {
	rsv1.UnimplementedResultStoreServiceServer
	// Backend holds payloads and references (Postgres).
	Backend Backend
	// Metrics, when set, counts the bytes and streams served.
	Metrics *Metrics
	// TTL is how long a stored result is kept; zero keeps results until deleted.
	TTL time.Duration
}

// Metrics counts what the store moves.
type Metrics struct {
	bytesIn, bytesOut, swept prometheus.Counter
	streams                  *prometheus.GaugeVec
}

// NewMetrics registers the store's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		bytesIn:  prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_resultstore_bytes_in_total", Help: "Result bytes received and stored."}),
		bytesOut: prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_resultstore_bytes_out_total", Help: "Result bytes read and sent."}),
		swept:    prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_resultstore_swept_total", Help: "Expired results deleted by the sweeper."}),
		streams:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "noetl_resultstore_streams_in_flight", Help: "Result streams open, by direction (put, get)."}, []string{"direction"}),
	}
	reg.MustRegister(m.bytesIn, m.bytesOut, m.swept, m.streams)
	return m
}

// stream counts an open stream of direction until the returned function is called.
func (m *Metrics) stream(direction string) func() {
	if m == nil {
		return func() {}
	}
	g := m.streams.WithLabelValues(direction)
	g.Inc()
	return g.Dec
}

func (m *Metrics) in(n int) {
	if m != nil {
		m.bytesIn.Add(float64(n))
	}
}

func (m *Metrics) out(n int) {
	if m != nil {
		m.bytesOut.Add(float64(n))
	}
}

// URI builds a result URI.
func URI(tenant, executionID, id string) string {
	return fmt.Sprintf("noetl://results/%s/%s/%s", tenant, executionID, id)
}

// ParseURI returns the tenant (empty for a bare id) and result id of a URI or bare id.
func ParseURI(uri string) (tenant, id string) {
	if rest, ok := strings.CutPrefix(uri, "noetl://results/"); ok {
		parts := strings.Split(rest, "/")
		return parts[0], parts[len(parts)-1]
	}
	return "", uri
}

// parse returns the result id of a URI or bare id.
func parse(uri string) string {
	_, id := ParseURI(uri)
	return id
}

// blobWriter stores one result through the backend, computing its size and digest.
type blobWriter struct {
	s      *Store
	w      BlobWriter
	h      *rsv1.PutResultHeader
	size   int64
	digest hash.Hash
}

// create starts storing a result described by h (content type defaulted to JSON),
// replacing any earlier result of the same id once committed.
func (s *Store) create(ctx context.Context, h *rsv1.PutResultHeader) (*blobWriter, error) {
	if h == nil || h.GetResultId() == "" || h.GetTenant() == "" || h.GetExecutionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "header: tenant, execution_id and result_id are required in the first message")
	}
	if h.GetContentType() == "" {
		h.ContentType = "application/json"
	}
	w, err := s.Backend.Create(ctx, h)
	if err != nil {
		return nil, err
	}
	return &blobWriter{s: s, w: w, h: h, digest: sha256.New()}, nil
}

// Write implements io.Writer.
func (w *blobWriter) Write(p []byte) (int, error) {
	w.digest.Write(p)
	w.size += int64(len(p))
	return w.w.Write(p)
}

// commit records the result and returns its reference; schemaJSON describes a table.
func (w *blobWriter) commit(rowCount int64, schemaJSON string) (*eventv1.ResultRef, error) {
	sum := hex.EncodeToString(w.digest.Sum(nil))
	var expires *time.Time
	if w.s.TTL > 0 {
		t := time.Now().Add(w.s.TTL)
		expires = &t
	}
	if err := w.w.Commit(w.size, sum, rowCount, schemaJSON, expires); err != nil {
		return nil, err
	}
	w.s.Metrics.in(int(w.size))
	h := w.h
	return &eventv1.ResultRef{
		Uri: URI(h.GetTenant(), h.GetExecutionId(), h.GetResultId()), Size: w.size, ContentType: h.GetContentType(),
		Sha256: sum, RowCount: rowCount, ExtractedJson: h.GetExtractedJson(), SchemaJson: schemaJSON,
	}, nil
}

// abort drops what was written (a no-op after commit).
func (w *blobWriter) abort() { w.w.Abort() }

// PutResult stores a streamed result.
func (s *Store) PutResult(stream rsv1.ResultStoreService_PutResultServer) error {
	defer s.Metrics.stream("put")()
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	w, err := s.create(ctx, first.GetHeader())
	if err != nil {
		return err
	}
	defer w.abort()
	msg := first
	for {
		if _, err := w.Write(msg.GetChunk()); err != nil {
			return err
		}
		msg, err = stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	ref, err := w.commit(first.GetHeader().GetRowCount(), "")
	if err != nil {
		return err
	}
	return stream.SendAndClose(&rsv1.PutResultResponse{Ref: ref})
}

// describe returns the reference of a live result of tenant by URI or id.
func (s *Store) describe(ctx context.Context, tenant, uri string) (*eventv1.ResultRef, string, error) {
	id := parse(uri)
	if id == "" {
		return nil, "", status.Error(codes.InvalidArgument, "uri: required")
	}
	ref, execID, err := s.Backend.Describe(ctx, tenant, id)
	if status.Code(err) == codes.NotFound {
		return nil, "", status.Errorf(codes.NotFound, "result %s not found", uri)
	}
	if err != nil {
		return nil, "", err
	}
	ref.Uri = URI(tenant, execID, id)
	return ref, id, nil
}

// DescribeResult returns a result's reference, by URI or by execution and step.
func (s *Store) DescribeResult(ctx context.Context, req *rsv1.DescribeResultRequest) (*rsv1.DescribeResultResponse, error) {
	if req.GetTenant() == "" {
		return nil, status.Error(codes.InvalidArgument, "tenant: required")
	}
	if req.GetUri() != "" {
		ref, _, err := s.describe(ctx, req.GetTenant(), req.GetUri())
		if err != nil {
			return nil, err
		}
		return &rsv1.DescribeResultResponse{Ref: ref}, nil
	}
	if req.GetExecutionId() == "" || req.GetStep() == "" {
		return nil, status.Error(codes.InvalidArgument, "uri, or execution_id and step: required")
	}
	id, err := s.Backend.Latest(ctx, req.GetTenant(), req.GetExecutionId(), req.GetStep())
	if err != nil {
		return nil, err
	}
	ref, _, err := s.describe(ctx, req.GetTenant(), id)
	if err != nil {
		return nil, err
	}
	return &rsv1.DescribeResultResponse{Ref: ref}, nil
}

// blobReader reads a stored result chunk by chunk and fails at the end, with DataLoss,
// when the digest does not match.
type blobReader struct {
	s      *Store
	chunks ChunkReader
	uri    string
	want   string
	cur    []byte
	digest hash.Hash
	done   bool
}

func (s *Store) open(ctx context.Context, tenant, id string, ref *eventv1.ResultRef) *blobReader {
	return &blobReader{s: s, chunks: s.Backend.Open(ctx, tenant, id), uri: ref.GetUri(), want: ref.GetSha256(), digest: sha256.New()}
}

// next returns the next chunk, or io.EOF after the last one.
func (r *blobReader) next() ([]byte, error) {
	if r.done {
		return nil, io.EOF
	}
	data, err := r.chunks.Next()
	if errors.Is(err, io.EOF) {
		r.done = true
		if got := hex.EncodeToString(r.digest.Sum(nil)); got != r.want {
			return nil, status.Errorf(codes.DataLoss, "result %s: digest mismatch", r.uri)
		}
		return nil, io.EOF
	}
	if err != nil {
		return nil, err
	}
	r.digest.Write(data)
	r.s.Metrics.out(len(data))
	return data, nil
}

// Read implements io.Reader.
func (r *blobReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		data, err := r.next()
		if err != nil {
			return 0, err
		}
		r.cur = data
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// GetResult streams a stored result; a digest mismatch fails the stream.
func (s *Store) GetResult(req *rsv1.GetResultRequest, stream rsv1.ResultStoreService_GetResultServer) error {
	defer s.Metrics.stream("get")()
	ctx := stream.Context()
	ref, id, err := s.describe(ctx, req.GetTenant(), req.GetUri())
	if err != nil {
		return err
	}
	if err := stream.Send(&rsv1.GetResultResponse{Ref: ref}); err != nil {
		return err
	}
	r := s.open(ctx, req.GetTenant(), id, ref)
	for {
		data, err := r.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&rsv1.GetResultResponse{Chunk: data}); err != nil {
			return err
		}
	}
}

// Sweep deletes up to limit expired results with their chunks and returns how many.
func (s *Store) Sweep(ctx context.Context, limit int) (int64, error) {
	n, err := s.Backend.Sweep(ctx, limit)
	if err != nil {
		return 0, err
	}
	if s.Metrics != nil {
		s.Metrics.swept.Add(float64(n))
	}
	return n, nil
}

// RunSweeper sweeps expired results every period until ctx ends, in batches of 1000.
func (s *Store) RunSweeper(ctx context.Context, period time.Duration, onError func(error)) {
	if period <= 0 {
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for {
			n, err := s.Sweep(ctx, 1000)
			if err != nil {
				if ctx.Err() == nil && onError != nil {
					onError(err)
				}
				break
			}
			if n < 1000 {
				break
			}
		}
	}
}
