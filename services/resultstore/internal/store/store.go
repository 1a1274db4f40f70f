// Package store keeps results in Postgres as chunked bytea rows, addressed by
// noetl://results/<tenant>/<execution_id>/<id> URIs, with the digest verified on read.
package store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
	DB *pgxpool.Pool
	// Metrics, when set, counts the bytes and streams served.
	Metrics *Metrics
}

// Metrics counts what the store moves.
type Metrics struct {
	bytesIn, bytesOut prometheus.Counter
	streams           *prometheus.GaugeVec
}

// NewMetrics registers the store's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		bytesIn:  prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_resultstore_bytes_in_total", Help: "Result bytes received and stored."}),
		bytesOut: prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_resultstore_bytes_out_total", Help: "Result bytes read and sent."}),
		streams:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "noetl_resultstore_streams_in_flight", Help: "Result streams open, by direction (put, get)."}, []string{"direction"}),
	}
	reg.MustRegister(m.bytesIn, m.bytesOut, m.streams)
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

// parse returns the result id of a URI or bare id.
func parse(uri string) string {
	if rest, ok := strings.CutPrefix(uri, "noetl://results/"); ok {
		parts := strings.Split(rest, "/")
		return parts[len(parts)-1]
	}
	return uri
}

// PutResult stores a streamed result.
func (s *Store) PutResult(stream rsv1.ResultStoreService_PutResultServer) error {
	defer s.Metrics.stream("put")()
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil || h.GetResultId() == "" || h.GetTenant() == "" || h.GetExecutionId() == "" {
		return status.Error(codes.InvalidArgument, "header: tenant, execution_id and result_id are required in the first message")
	}
	ct := h.GetContentType()
	if ct == "" {
		ct = "application/json"
	}
	digest := sha256.New()
	var size int64
	err = pgx.BeginFunc(ctx, s.DB, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM noetl.result_chunk WHERE tenant=$1 AND result_id=$2`, h.GetTenant(), h.GetResultId()); err != nil {
			return err
		}
		idx := 0
		buf := make([]byte, 0, ChunkSize)
		flush := func() error {
			if len(buf) == 0 {
				return nil
			}
			if _, err := tx.Exec(ctx, `INSERT INTO noetl.result_chunk (tenant, result_id, idx, data) VALUES ($1,$2,$3,$4)`, h.GetTenant(), h.GetResultId(), idx, buf); err != nil {
				return err
			}
			idx++
			buf = buf[:0]
			return nil
		}
		msg := first
		for {
			data := msg.GetChunk()
			digest.Write(data)
			size += int64(len(data))
			for len(data) > 0 {
				n := min(ChunkSize-len(buf), len(data))
				buf = append(buf, data[:n]...)
				data = data[n:]
				if len(buf) == ChunkSize {
					if err := flush(); err != nil {
						return err
					}
				}
			}
			msg, err = stream.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
		}
		if err := flush(); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO noetl.result (tenant, result_id, execution_id, step, content_type, size, sha256, row_count, extracted)
			VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)
			ON CONFLICT (tenant, result_id) DO UPDATE SET content_type=EXCLUDED.content_type, size=EXCLUDED.size, sha256=EXCLUDED.sha256, row_count=EXCLUDED.row_count, extracted=EXCLUDED.extracted`,
			h.GetTenant(), h.GetResultId(), h.GetExecutionId(), h.GetStep(), ct, size, hex.EncodeToString(digest.Sum(nil)), h.GetRowCount(), h.GetExtractedJson())
		return err
	})
	if err != nil {
		return err
	}
	s.Metrics.in(int(size))
	return stream.SendAndClose(&rsv1.PutResultResponse{Ref: &eventv1.ResultRef{
		Uri: URI(h.GetTenant(), h.GetExecutionId(), h.GetResultId()), Size: size, ContentType: ct,
		Sha256: hex.EncodeToString(digest.Sum(nil)), RowCount: h.GetRowCount(), ExtractedJson: h.GetExtractedJson(),
	}})
}

// GetResult streams a stored result; a digest mismatch fails the stream.
func (s *Store) GetResult(req *rsv1.GetResultRequest, stream rsv1.ResultStoreService_GetResultServer) error {
	defer s.Metrics.stream("get")()
	ctx := stream.Context()
	id := parse(req.GetUri())
	if id == "" {
		return status.Error(codes.InvalidArgument, "uri: required")
	}
	ref := &eventv1.ResultRef{}
	var execID string
	err := s.DB.QueryRow(ctx, `SELECT execution_id, content_type, size, sha256, row_count, extracted FROM noetl.result WHERE tenant=$1 AND result_id=$2`, req.GetTenant(), id).
		Scan(&execID, &ref.ContentType, &ref.Size, &ref.Sha256, &ref.RowCount, &ref.ExtractedJson)
	if errors.Is(err, pgx.ErrNoRows) {
		return status.Errorf(codes.NotFound, "result %s not found", req.GetUri())
	}
	if err != nil {
		return err
	}
	ref.Uri = URI(req.GetTenant(), execID, id)
	if err := stream.Send(&rsv1.GetResultResponse{Ref: ref}); err != nil {
		return err
	}
	digest := sha256.New()
	for idx := 0; ; idx++ {
		var data []byte
		err := s.DB.QueryRow(ctx, `SELECT data FROM noetl.result_chunk WHERE tenant=$1 AND result_id=$2 AND idx=$3`, req.GetTenant(), id, idx).Scan(&data)
		if errors.Is(err, pgx.ErrNoRows) {
			break
		}
		if err != nil {
			return err
		}
		digest.Write(data)
		if err := stream.Send(&rsv1.GetResultResponse{Chunk: data}); err != nil {
			return err
		}
		s.Metrics.out(len(data))
	}
	if got := hex.EncodeToString(digest.Sum(nil)); got != ref.GetSha256() {
		return status.Errorf(codes.DataLoss, "result %s: digest mismatch", req.GetUri())
	}
	return nil
}
