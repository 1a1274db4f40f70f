package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	"github.com/noetl/noetl/internal/tabular"
)

// Bounds of ReadResult.
const (
	DefaultReadBytes = 8 << 20
	DefaultPageRows  = 1000
	MaxPageRows      = 10000
)

// ReadResult returns a bounded part of a result as JSON: a page of a table, and within a
// JSON result or the page the value a JSON pointer selects. A JSON result is walked as a
// token stream, so selecting a small part of a large result does not hold the result.
func (s *Store) ReadResult(ctx context.Context, req *rsv1.ReadResultRequest) (*rsv1.ReadResultResponse, error) {
	segs, err := parsePointer(req.GetPointer())
	if err != nil {
		return nil, err
	}
	maxBytes := req.GetMaxBytes()
	if maxBytes <= 0 {
		maxBytes = DefaultReadBytes
	}
	ref, id, err := s.describe(ctx, req.GetTenant(), req.GetUri())
	if err != nil {
		return nil, err
	}
	src := s.open(ctx, req.GetTenant(), id, ref)
	out := &rsv1.ReadResultResponse{Ref: ref}
	var doc io.Reader = src
	if ref.GetContentType() == tabular.ContentType {
		if req.GetOffset() < 0 {
			return nil, status.Error(codes.InvalidArgument, "offset: must not be negative")
		}
		limit := int64(req.GetLimit())
		if limit <= 0 {
			limit = DefaultPageRows
		}
		if limit > MaxPageRows {
			return nil, status.Errorf(codes.InvalidArgument, "limit: at most %d rows per page", MaxPageRows)
		}
		page, total, err := tabular.Page(src, req.GetOffset(), limit)
		if err != nil {
			return nil, readError(ref.GetUri(), err)
		}
		out.TotalRows = total
		doc = bytes.NewReader(page)
	} else if ref.GetContentType() != "application/json" {
		return nil, status.Errorf(codes.FailedPrecondition, "result %s is %s, not JSON: fetch it over Arrow Flight", ref.GetUri(), ref.GetContentType())
	} else if len(segs) == 0 && ref.GetSize() > maxBytes {
		return nil, status.Errorf(codes.FailedPrecondition, "result %s is %d bytes, more than %d: select a part with a JSON pointer or fetch it over Arrow Flight", ref.GetUri(), ref.GetSize(), maxBytes)
	}
	dec := json.NewDecoder(doc)
	raw, err := selectPointer(dec, segs, req.GetPointer())
	if err != nil {
		return nil, readError(ref.GetUri(), err)
	}
	// Read to the end so that the digest is checked whatever the selection.
	if _, err := io.Copy(io.Discard, src); err != nil {
		return nil, readError(ref.GetUri(), err)
	}
	if int64(len(raw)) > maxBytes {
		return nil, status.Errorf(codes.FailedPrecondition, "pointer %q selects %d bytes, more than %d: select a smaller part or fetch the result over Arrow Flight", req.GetPointer(), len(raw), maxBytes)
	}
	out.Json = raw
	return out, nil
}

// readError keeps gRPC statuses (digest mismatch, not found) and marks the rest.
func readError(uri string, err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	var se *selectError
	if errors.As(err, &se) {
		return status.Error(codes.NotFound, se.msg)
	}
	return status.Errorf(codes.DataLoss, "result %s: %v", uri, err)
}

// selectError is a pointer that selects nothing.
type selectError struct{ msg string }

func (e *selectError) Error() string { return e.msg }

// parsePointer splits an RFC 6901 JSON pointer into unescaped reference tokens.
func parsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if !strings.HasPrefix(p, "/") {
		return nil, status.Errorf(codes.InvalidArgument, "pointer: %q must be empty or start with '/'", p)
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		segs[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return segs, nil
}

// selectPointer walks dec to the value segs point at and returns it.
func selectPointer(dec *json.Decoder, segs []string, pointer string) (json.RawMessage, error) {
	walked := ""
	for _, seg := range segs {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		found := false
		switch tok {
		case json.Delim('{'):
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				if k == seg {
					found = true
					break
				}
				if err := skipValue(dec); err != nil {
					return nil, err
				}
			}
		case json.Delim('['):
			idx, err := strconv.Atoi(seg)
			if err != nil || idx < 0 || (len(seg) > 1 && seg[0] == '0') {
				return nil, &selectError{fmt.Sprintf("pointer %q: %q at %q is not an array index", pointer, seg, walked+"/")}
			}
			for i := 0; dec.More(); i++ {
				if i == idx {
					found = true
					break
				}
				if err := skipValue(dec); err != nil {
					return nil, err
				}
			}
		}
		if !found {
			return nil, &selectError{fmt.Sprintf("pointer %q: nothing at %q", pointer, walked+"/"+seg)}
		}
		walked += "/" + seg
	}
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, err
	}
	return raw, nil
}

// skipValue consumes one value from dec without keeping it.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}
