// Package results stores and loads the worker's results: a result over the inline budget
// goes to the resultstore (tables as Arrow over Flight DoPut, anything else as streamed
// JSON) and travels by reference; a referenced result a command's templates read beyond
// its summary is loaded back before the command is rendered.
package results

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	cbackoff "github.com/cenkalti/backoff/v5"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/tabular"
	"github.com/noetl/noetl/services/worker/internal/retry"
	"github.com/noetl/noetl/services/worker/internal/scrub"
)

// Store is the worker's access to the resultstore.
type Store struct {
	// Results is the resultstore's gRPC client (JSON results, logs, loads).
	Results rsv1.ResultStoreServiceClient
	// Flight is the resultstore's Arrow Flight client (tables).
	Flight flight.Client
	// InlineMaxBytes is the inline result budget; larger results travel by reference.
	InlineMaxBytes int
	// Retry is how long a call to an unreachable resultstore is retried (zero:
	// DefaultRetry), never past a command's deadline.
	Retry time.Duration
	// Log receives the retries (nil: not logged).
	Log *slog.Logger
	// Retries counts the calls tried again (noetl_worker_resultstore_retries_total; nil:
	// not counted).
	Retries prometheus.Counter
}

// maxExtractedBytes bounds the extracted summary carried by a ResultRef.
const maxExtractedBytes = 4 << 10

// putChunk is the size of one chunk streamed to the resultstore.
const putChunk = 256 << 10

// Put encodes a tool's result: inline when its JSON fits the inline budget, else
// in the resultstore, returning the reference. A resultstore that cannot be reached (a
// restart, a network blip) is retried with backoff and jitter for up to
// Store.Retry, never past the command's deadline, while the command's claim is
// kept alive; each attempt uploads the whole result again under the same id. Errors that
// are the store's are *StoreError (retryable by policy); the others mean the result cannot
// be encoded.
func (s *Store) Put(ctx context.Context, cmd *eventv1.Command, result any) ([]byte, *eventv1.ResultRef, error) {
	type stored struct {
		inline []byte
		ref    *eventv1.ResultRef
	}
	bound := s.retry()
	if d := cmd.GetDeadline(); d != nil {
		bound = min(bound, time.Until(d.AsTime()))
	}
	storeUnavailable := func(err error) bool {
		var se *StoreError
		return errors.As(err, &se) && unavailable(se.err)
	}
	out, err := retry.Do(ctx, bound, storeUnavailable, s.retryNotify(ctx, "resultstore unavailable: storing the result again", cmd), func() (stored, error) {
		b, ref, err := s.putOnce(ctx, cmd, result)
		return stored{b, ref}, err
	})
	return out.inline, out.ref, err
}

// putOnce is one attempt of Put. A table (records, or {columns, rows}) goes up
// as Arrow record batches over Flight DoPut; anything else is streamed as JSON in chunks,
// so beyond the result itself the worker holds at most the inline budget plus a chunk. The
// result id is the command id, so a re-run of the command (or a retry) overwrites the same
// entry.
func (s *Store) putOnce(ctx context.Context, cmd *eventv1.Command, result any) ([]byte, *eventv1.ResultRef, error) {
	header := func(contentType string) *rsv1.PutResultHeader {
		return &rsv1.PutResultHeader{
			Tenant: cmd.GetTenant(), ExecutionId: cmd.GetExecutionId(), Step: cmd.GetStep(),
			ResultId: cmd.GetCommandId(), ContentType: contentType, ExtractedJson: extract(result, cmd.GetOutputSelect()),
		}
	}
	if t, ok := tabular.Detect(result); ok {
		var inline limitBuffer
		inline.max = s.InlineMaxBytes
		if _, err := tabular.WriteJSON(&inline, result); err == nil {
			return inline.b, nil, nil
		} else if !errors.Is(err, errOverBudget) {
			return nil, nil, err
		}
		ref, err := s.putTable(ctx, t, header(tabular.ContentType))
		if err != nil {
			return nil, nil, &StoreError{err}
		}
		return nil, ref, nil
	}
	sw := &spillWriter{ctx: ctx, st: s, max: s.InlineMaxBytes, header: func() *rsv1.PutResultHeader { return header("application/json") }}
	if _, err := tabular.WriteJSON(sw, result); err != nil {
		sw.abort()
		if sw.err != nil {
			return nil, nil, &StoreError{sw.err}
		}
		return nil, nil, err
	}
	if sw.stream == nil {
		return sw.buf, nil, nil
	}
	ref, err := sw.close()
	if err != nil {
		return nil, nil, &StoreError{err}
	}
	return nil, ref, nil
}

// DefaultRetry is how long a call to an unreachable resultstore is retried
// when Store.Retry is zero.
const DefaultRetry = 2 * time.Minute

// retry is how long a call to an unreachable resultstore is retried.
func (s *Store) retry() time.Duration {
	if s.Retry > 0 {
		return s.Retry
	}
	return DefaultRetry
}

// unavailable reports whether err means the resultstore could not be reached or went away
// during the call (its restart, a dropped connection), as opposed to an answer: those are
// worth another attempt, an answer (invalid argument, permission, not found) is not.
func unavailable(err error) bool {
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// retryNotify logs each retry of a call to the resultstore for cmd (nil: none known) and
// counts it in noetl_worker_resultstore_retries_total.
func (s *Store) retryNotify(ctx context.Context, msg string, cmd *eventv1.Command) cbackoff.Notify {
	return func(err error, next time.Duration) {
		if s.Retries != nil {
			s.Retries.Inc()
		}
		if s.Log == nil {
			return
		}
		attrs := []any{slog.String("error", scrub.FromContext(ctx).String(err.Error())), slog.Duration("retry_in", next)}
		if cmd != nil {
			attrs = append(attrs, slog.String("execution_id", cmd.GetExecutionId()), slog.String("step", cmd.GetStep()))
		}
		s.Log.Warn(msg, attrs...)
	}
}

// StoreError is a failure of the resultstore while storing a result.
type StoreError struct{ err error }

func (e *StoreError) Error() string { return e.err.Error() }
func (e *StoreError) Unwrap() error { return e.err }

var errOverBudget = errors.New("over the inline budget")

// limitBuffer collects at most max bytes and fails past them.
type limitBuffer struct {
	b   []byte
	max int
}

func (l *limitBuffer) Write(p []byte) (int, error) {
	if len(l.b)+len(p) > l.max {
		return 0, errOverBudget
	}
	l.b = append(l.b, p...)
	return len(p), nil
}

// spillWriter buffers up to max bytes; past them it opens a PutResult stream, sends the
// buffer and streams every later write in chunks of putChunk.
type spillWriter struct {
	ctx    context.Context
	cancel context.CancelFunc
	st     *Store
	max    int
	header func() *rsv1.PutResultHeader
	buf    []byte
	stream rsv1.ResultStoreService_PutResultClient
	sent   bool
	err    error
}

func (s *spillWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	s.buf = append(s.buf, p...)
	if s.stream == nil {
		if len(s.buf) <= s.max {
			return len(p), nil
		}
		ctx, cancel := context.WithCancel(s.ctx)
		st, err := s.st.Results.PutResult(ctx)
		if err != nil {
			cancel()
			s.err = err
			return 0, err
		}
		s.stream, s.cancel = st, cancel
	}
	for len(s.buf) >= putChunk {
		if err := s.send(s.buf[:putChunk]); err != nil {
			return 0, err
		}
		s.buf = append(s.buf[:0], s.buf[putChunk:]...)
	}
	return len(p), nil
}

func (s *spillWriter) send(chunk []byte) error {
	req := &rsv1.PutResultRequest{Chunk: chunk}
	if !s.sent {
		req.Header = s.header()
		s.sent = true
	}
	if err := s.stream.Send(req); err != nil {
		if errors.Is(err, io.EOF) {
			// The stream ended on the server's side: its status says why.
			if _, rerr := s.stream.CloseAndRecv(); rerr != nil {
				err = rerr
			}
		}
		s.err = err
		return err
	}
	return nil
}

// close sends what is buffered and returns the stored reference.
func (s *spillWriter) close() (*eventv1.ResultRef, error) {
	defer s.cancel()
	if len(s.buf) > 0 || !s.sent {
		if err := s.send(s.buf); err != nil {
			return nil, err
		}
	}
	resp, err := s.stream.CloseAndRecv()
	if err != nil {
		return nil, err
	}
	return resp.GetRef(), nil
}

// abort abandons an open stream: the resultstore rolls the upload back.
func (s *spillWriter) abort() {
	if s.cancel != nil {
		s.cancel()
	}
}

// putTable uploads a table as Arrow record batches with Flight DoPut.
func (s *Store) putTable(ctx context.Context, t *tabular.Table, h *rsv1.PutResultHeader) (*eventv1.ResultRef, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.Flight.DoPut(ctx)
	if err != nil {
		return nil, err
	}
	cmd, err := proto.Marshal(h)
	if err != nil {
		return nil, err
	}
	fw := flight.NewRecordWriter(stream, ipc.WithSchema(t.Schema()))
	fw.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: cmd})
	// A write fails with io.EOF when the stream ended on the server's side: its status
	// (from Recv) says why.
	serverErr := func(err error) error {
		if errors.Is(err, io.EOF) {
			if _, rerr := stream.Recv(); rerr != nil && !errors.Is(rerr, io.EOF) {
				return rerr
			}
		}
		return err
	}
	if err := t.Batches(nil, tabular.DefaultBatchRows, fw.Write); err != nil {
		return nil, serverErr(err)
	}
	if err := fw.Close(); err != nil {
		return nil, serverErr(err)
	}
	if err := stream.CloseSend(); err != nil {
		return nil, err
	}
	res, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	ref := &eventv1.ResultRef{}
	if err := proto.Unmarshal(res.GetAppMetadata(), ref); err != nil {
		return nil, fmt.Errorf("DoPut: malformed reference: %w", err)
	}
	return ref, nil
}

// extract builds the bounded summary of a result: the output_select fields when the step
// names them, else a structural summary (scalars kept, long strings, arrays and deep
// objects summarised), at most maxExtractedBytes.
func extract(v any, selectFields []string) []byte {
	m, isMap := v.(map[string]any)
	out := map[string]any{}
	if isMap && len(selectFields) > 0 {
		for _, f := range selectFields {
			if x, ok := m[f]; ok {
				out[f] = summarise(x, 2)
			}
		}
	} else if isMap {
		for k, x := range m {
			out[k] = summarise(x, 2)
		}
	} else {
		out["_summary"] = summarise(v, 1)
	}
	b, _ := json.Marshal(out)
	if len(b) <= maxExtractedBytes {
		return b
	}
	// Too big: keep keys in name order while they fit.
	keys := make([]string, 0, len(out))
	for k := range out {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	kept := map[string]any{}
	for _, k := range keys {
		kept[k] = out[k]
		if b, _ := json.Marshal(kept); len(b) > maxExtractedBytes {
			delete(kept, k)
		}
	}
	b, _ = json.Marshal(kept)
	return b
}

// summarise keeps small values and replaces large ones by a marker saying what they were.
func summarise(v any, depth int) any {
	switch x := v.(type) {
	case string:
		if len(x) <= 256 {
			return x
		}
		return map[string]any{"_summary": "string", "length": len(x)}
	case []any:
		if len(x) <= 32 && fits(x, 256) {
			return x
		}
		return map[string]any{"_summary": "array", "length": len(x)}
	case map[string]any:
		if len(x) <= 32 && fits(x, 256) {
			return x
		}
		if depth <= 0 {
			return map[string]any{"_summary": "object", "keys": len(x)}
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = summarise(e, depth-1)
		}
		return out
	default:
		return v
	}
}

// fits reports whether v's JSON is at most n bytes, without encoding more than n+1.
func fits(v any, n int) bool {
	l := limitBuffer{max: n}
	_, err := tabular.WriteJSON(&l, v)
	return err == nil
}

// Fetch reads a stored result as JSON: a table stored as Arrow comes back as the JSON it
// was made from. An unreachable resultstore is retried as Put does.
func (s *Store) Fetch(ctx context.Context, tenant, uri string) ([]byte, error) {
	return retry.Do(ctx, s.retry(), unavailable, s.retryNotify(ctx, "resultstore unavailable: loading the result again", nil), func() ([]byte, error) {
		return s.fetchOnce(ctx, tenant, uri)
	})
}

// fetchOnce is one attempt of Fetch.
func (s *Store) fetchOnce(ctx context.Context, tenant, uri string) ([]byte, error) {
	stream, err := s.Results.GetResult(ctx, &rsv1.GetResultRequest{Tenant: tenant, Uri: uri})
	if err != nil {
		return nil, err
	}
	var data []byte
	var ref *eventv1.ResultRef
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if m.GetRef() != nil {
			ref = m.GetRef()
			data = make([]byte, 0, ref.GetSize())
		}
		data = append(data, m.GetChunk()...)
	}
	if ref.GetContentType() != tabular.ContentType {
		return data, nil
	}
	var out bytes.Buffer
	if _, err := tabular.ToJSON(bytes.NewReader(data), &out); err != nil {
		// Not wrapped: a table cut short is not a resultstore to retry.
		return nil, fmt.Errorf("decode table %s: %v", uri, err)
	}
	return out.Bytes(), nil
}

var pathPattern = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*`)

// ResolveRefs replaces, in the scope, each referenced result whose summary cannot answer
// the paths the command's templates read with the full stored payload. Paths into the
// summary (`{{ s.count }}`) and the reference itself (`{{ s._ref }}`) need no fetch.
func (s *Store) ResolveRefs(ctx context.Context, cmd *eventv1.Command, scope *domain.Scope) error {
	if !holdsRefs(scope) {
		return nil // nothing held by reference: no template text to read
	}
	var texts []string
	collect := func(b []byte) {
		if len(b) > 0 {
			texts = append(texts, string(b))
		}
	}
	collect(cmd.GetInputJson())
	for _, t := range cmd.GetTools() {
		var cfg map[string]any
		if json.Unmarshal(t.GetConfigJson(), &cfg) == nil {
			delete(cfg, "code")
			b, _ := json.Marshal(cfg)
			collect(b)
		}
	}
	for name, r := range scope.Steps {
		if r.Ref == nil || !needsPayload(name, r.Ref.Extracted, texts) {
			continue
		}
		body, err := s.Fetch(ctx, cmd.GetTenant(), r.Ref.URI)
		if err != nil {
			return fmt.Errorf("step %s: load result of %s (%s): %w", cmd.GetStep(), name, r.Ref.URI, err)
		}
		scope.Steps[name] = domain.StepResult{Status: r.Status, Result: body}
	}
	return nil
}

// holdsRefs reports whether any step result in scope is held by reference.
func holdsRefs(scope *domain.Scope) bool {
	for _, r := range scope.Steps {
		if r.Ref != nil {
			return true
		}
	}
	return false
}

// needsPayload reports whether a template path into step name goes beyond its summary.
func needsPayload(name string, extracted []byte, texts []string) bool {
	var summary map[string]any
	_ = json.Unmarshal(extracted, &summary)
	for _, text := range texts {
		for _, block := range templateBlocks(text) {
			for _, p := range pathPattern.FindAllString(block, -1) {
				segs := strings.Split(p, ".")
				if segs[0] != name {
					continue
				}
				segs = segs[1:]
				if len(segs) > 0 && segs[0] == "data" {
					if _, own := summary["data"]; !own {
						segs = segs[1:]
					}
				}
				if len(segs) == 0 {
					return true // the whole value
				}
				if strings.HasPrefix(segs[0], "_") {
					continue
				}
				v, ok := summary[segs[0]]
				if !ok {
					return true
				}
				if m, ok := v.(map[string]any); ok && m["_summary"] != nil {
					return true
				}
			}
		}
	}
	return false
}

// templateBlocks returns the bodies of {{ }} and {% %} blocks in a text.
func templateBlocks(s string) []string {
	var out []string
	for {
		i := strings.Index(s, "{{")
		j := strings.Index(s, "{%")
		if i < 0 || (j >= 0 && j < i) {
			i = j
		}
		if i < 0 {
			return out
		}
		end := strings.Index(s[i+2:], "}}")
		if e2 := strings.Index(s[i+2:], "%}"); end < 0 || (e2 >= 0 && e2 < end) {
			end = e2
		}
		if end < 0 {
			return append(out, s[i+2:])
		}
		out = append(out, s[i+2:i+2+end])
		s = s[i+2+end+2:]
	}
}

// ErrNoResultstore is the failure to store by a Store without a resultstore client.
var ErrNoResultstore = errors.New("no resultstore")

// PutLogs stores a command's encoded log entries in the resultstore under the command's
// id with a ".logs" suffix (a rerun of the command replaces them), with no step, so that
// they are never taken for the step's result.
func (s *Store) PutLogs(ctx context.Context, cmd *eventv1.Command, body []byte) (*eventv1.ResultRef, error) {
	if s == nil || s.Results == nil {
		return nil, ErrNoResultstore
	}
	sw := &spillWriter{ctx: ctx, st: s, max: -1, header: func() *rsv1.PutResultHeader {
		return &rsv1.PutResultHeader{Tenant: cmd.GetTenant(), ExecutionId: cmd.GetExecutionId(), ResultId: cmd.GetCommandId() + ".logs", ContentType: "application/json"}
	}}
	if _, err := sw.Write(body); err != nil {
		sw.abort()
		return nil, err
	}
	return sw.close()
}
