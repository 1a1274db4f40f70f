// Package export serves a stored table as a file, Arrow IPC or CSV, the response body
// itself (Route), where grpc-gateway would send ExportResult as newline-delimited JSON
// messages. Invariant: a stream that fails after the first byte is cut off, never ended,
// so a client never takes a partial file for a whole one.
package export

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/services/gateway/internal/apierr"
)

// Route is the REST route of ExportResult: the file itself as the response body.
const Route = "GET /v1/results/{result_id}/export"

// New serves Route: ExportResult over res (the loopback connection), errors written by
// errors with mux and m.
func New(res apiv1.ResultServiceClient, mux *runtime.ServeMux, m runtime.Marshaler, errors runtime.ErrorHandlerFunc) http.Handler {
	return &exportFile{res: res, mux: mux, marshaler: m, errors: errors}
}

// exportFile serves ExportResult as a download (grpc-gateway would send newline-delimited
// JSON messages). It calls the gateway's own gRPC server through the loopback connection
// with the request's credentials, so an export is authenticated, authorized and limited as
// every call is. Errors before the first byte are REST errors (status and JSON body); a
// stream that fails later is cut off (no final chunk), so a client never takes a partial
// file for a whole one.
type exportFile struct {
	res       apiv1.ResultServiceClient
	mux       *runtime.ServeMux
	marshaler runtime.Marshaler
	errors    runtime.ErrorHandlerFunc
}

// exportFormat reads the format query parameter: arrow or csv, or a ResultFormat name or
// number as grpc-gateway reads enums.
func exportFormat(raw string) (apiv1.ResultFormat, error) {
	switch strings.ToLower(raw) {
	case "", "arrow", "result_format_arrow", "1", "result_format_unspecified", "0":
		return apiv1.ResultFormat_RESULT_FORMAT_ARROW, nil
	case "csv", "result_format_csv", "2":
		return apiv1.ResultFormat_RESULT_FORMAT_CSV, nil
	}
	return 0, apierr.FieldViolation(apierr.CodeName(codes.InvalidArgument), "format", "must be arrow or csv", "format: must be arrow or csv, not "+quoteShort(raw))
}

// quoteShort quotes s, cut to 64 bytes.
func quoteShort(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return `"` + s + `"`
}

// extension is the file name extension of a format.
func extension(f apiv1.ResultFormat) string {
	if f == apiv1.ResultFormat_RESULT_FORMAT_CSV {
		return ".csv"
	}
	return ".arrow"
}

func (h *exportFile) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	format, err := exportFormat(r.URL.Query().Get("format"))
	if err != nil {
		h.errors(ctx, h.mux, h.marshaler, w, r, err)
		return
	}
	id := r.PathValue("result_id")
	stream, err := h.res.ExportResult(ctx, &apiv1.ExportResultRequest{ResultId: id, Format: format})
	if err != nil {
		h.errors(ctx, h.mux, h.marshaler, w, r, err)
		return
	}
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = status.Error(codes.Internal, "the export ended before it began")
		}
		h.errors(ctx, h.mux, h.marshaler, w, r, err)
		return
	}
	name := id[strings.LastIndexAny(id, "/:")+1:] + extension(format)
	hd := w.Header()
	hd.Set("Content-Type", first.GetContentType())
	hd.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	chunk := first.GetChunk()
	for {
		if len(chunk) > 0 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			_ = rc.Flush()
		}
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			// Cut the response off: the client sees a failed transfer, not a short file.
			panic(http.ErrAbortHandler)
		}
		chunk = m.GetChunk()
	}
}
