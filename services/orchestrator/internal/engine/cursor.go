package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/tabular"
)

// A cursor loop's claim whose result went by reference (over the inline budget) keeps
// only its reference in the state; before a decision issues that frame's bodies the
// engine reads the rows back (decide.NeededClaimRows), through the collection cache, so a
// frame is read once per replica while its bodies run.

// claimRowsFor loads the rows of the claims held by reference that a decision reads.
func (e *Engine) claimRowsFor(ctx context.Context, tenant string, refs []*eventv1.ResultRef) (map[string][]json.RawMessage, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	out := make(map[string][]json.RawMessage, len(refs))
	for _, ref := range refs {
		uri := ref.GetUri()
		rows := e.collections.get(uri)
		if rows == nil {
			body, err := e.readResult(ctx, tenant, uri)
			if err == nil && ref.GetContentType() == tabular.ContentType {
				// A claim's rows are a table: stored as Arrow, read back as its JSON.
				var out bytes.Buffer
				_, err = tabular.ToJSON(bytes.NewReader(body), &out)
				body = out.Bytes()
			}
			if err != nil {
				return nil, fmt.Errorf("load cursor claim %s: %w", uri, err)
			}
			if rows, err = domain.ClaimRowsOf(body); err != nil {
				return nil, fmt.Errorf("load cursor claim %s: %w", uri, err)
			}
			if rows == nil {
				rows = []json.RawMessage{}
			}
			e.collections.put(uri, rows, collectionSize(rows))
		}
		out[uri] = rows
	}
	return out, nil
}

// readResult reads a stored result's JSON from the resultstore.
func (e *Engine) readResult(ctx context.Context, tenant, uri string) ([]byte, error) {
	if e.cfg.Results == nil {
		return nil, errors.New("no resultstore configured")
	}
	stream, err := e.cfg.Results.GetResult(ctx, &rsv1.GetResultRequest{Tenant: tenant, Uri: uri})
	if err != nil {
		return nil, err
	}
	var body []byte
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return body, nil
		}
		if err != nil {
			return nil, err
		}
		body = append(body, m.GetChunk()...)
	}
}
