package engine

import (
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/services/orchestrator/internal/decide"
)

// A loop collection larger than decide.InlineCollectionMax does not travel in its
// step.enter event nor stay in the execution state: the engine stores it once in the
// resultstore (under an id derived from the step.enter event, so re-deciding rewrites the
// same entry), the event and the state carry its reference and length, and the engine
// keeps the parsed items in a cache bounded in bytes to issue iterations from. A cache miss
// (another replica, a restart, an eviction) reads the collection back once.

// collectionCacheBytes bounds the bytes of parsed collections kept in memory.
const collectionCacheBytes = 64 << 20

// collectionCache is an LRU of parsed loop collections by reference URI.
type collectionCache struct {
	mu    sync.Mutex
	max   int64
	bytes int64
	lru   *list.List
	items map[string]*list.Element
}

type cachedCollection struct {
	uri   string
	items []json.RawMessage
	size  int64
}

func newCollectionCache(max int64) *collectionCache {
	return &collectionCache{max: max, lru: list.New(), items: map[string]*list.Element{}}
}

func (c *collectionCache) get(uri string) []json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[uri]
	if !ok {
		return nil
	}
	c.lru.MoveToFront(el)
	return el.Value.(*cachedCollection).items
}

func (c *collectionCache) put(uri string, items []json.RawMessage, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[uri]; ok {
		c.lru.MoveToFront(el)
		return
	}
	c.items[uri] = c.lru.PushFront(&cachedCollection{uri: uri, items: items, size: size})
	c.bytes += size
	for c.lru.Len() > 1 && c.bytes > c.max {
		old := c.lru.Back()
		c.lru.Remove(old)
		oc := old.Value.(*cachedCollection)
		delete(c.items, oc.uri)
		c.bytes -= oc.size
	}
}

// collectionSize is the memory a parsed collection holds: its bytes and slice headers.
func collectionSize(items []json.RawMessage) int64 {
	n := int64(len(items)) * 24
	for _, it := range items {
		n += int64(len(it))
	}
	return n
}

// collectionsFor loads the loop collections a decision on st may read.
func (e *Engine) collectionsFor(ctx context.Context, tenant string, refs []*eventv1.ResultRef) (decide.Inputs, error) {
	if len(refs) == 0 {
		return decide.Inputs{}, nil
	}
	in := decide.Inputs{Collections: make(map[string][]json.RawMessage, len(refs))}
	for _, ref := range refs {
		uri := ref.GetUri()
		items := e.collections.get(uri)
		if items == nil {
			var err error
			if items, err = e.loadCollection(ctx, tenant, uri); err != nil {
				return decide.Inputs{}, err
			}
			e.collections.put(uri, items, collectionSize(items))
		}
		in.Collections[uri] = items
	}
	return in, nil
}

// loadCollection reads a stored collection (a JSON array) from the resultstore.
func (e *Engine) loadCollection(ctx context.Context, tenant, uri string) ([]json.RawMessage, error) {
	if e.cfg.Results == nil {
		return nil, fmt.Errorf("load loop collection %s: no resultstore configured", uri)
	}
	stream, err := e.cfg.Results.GetResult(ctx, &rsv1.GetResultRequest{Tenant: tenant, Uri: uri})
	if err != nil {
		return nil, fmt.Errorf("load loop collection %s: %w", uri, err)
	}
	var body []byte
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("load loop collection %s: %w", uri, err)
		}
		body = append(body, m.GetChunk()...)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(body, &items); err != nil {
		return nil, fmt.Errorf("load loop collection %s: %w", uri, err)
	}
	return items, nil
}

// offloadCollections stores the collections of loop step.enter events larger than
// decide.InlineCollectionMax in the resultstore and rewrites the events to carry their
// reference and length instead of the items. Without a resultstore the events stay as they
// are (and one over the message limit fails the execution at publish).
func (e *Engine) offloadCollections(ctx context.Context, events []*eventv1.Event) error {
	if e.cfg.Results == nil {
		return nil
	}
	for _, ev := range events {
		if ev.GetType() != domain.EventStepEnter || len(ev.GetPayloadJson()) <= decide.InlineCollectionMax {
			continue
		}
		var p domain.EnterPayload
		if err := json.Unmarshal(ev.GetPayloadJson(), &p); err != nil {
			return fmt.Errorf("step.enter payload: %w", err)
		}
		if p.Loop == nil || p.Loop.ItemsRef != nil {
			continue
		}
		var body bytes.Buffer
		body.WriteByte('[')
		for i, it := range p.Loop.Items {
			if i > 0 {
				body.WriteByte(',')
			}
			body.Write(it)
		}
		body.WriteByte(']')
		if body.Len() <= decide.InlineCollectionMax {
			continue
		}
		ref, err := e.putResult(ctx, ev.GetTenant(), ev.GetExecutionId(), ev.GetStep(), ev.GetEventId()+"-items", body.Bytes())
		if err != nil {
			return fmt.Errorf("store loop collection of %s: %w", ev.GetStep(), err)
		}
		items := p.Loop.Items
		p.Loop = &domain.LoopPayload{Iterator: p.Loop.Iterator, Total: int32(len(items)), ItemsRef: domain.RefViewOf(ref)}
		payload, err := json.Marshal(p)
		if err != nil {
			return err
		}
		ev.PayloadJson = payload
		e.collections.put(ref.GetUri(), items, collectionSize(items))
	}
	return nil
}

// putResult streams body to the resultstore under a deterministic id.
func (e *Engine) putResult(ctx context.Context, tenant, executionID, step, id string, body []byte) (*eventv1.ResultRef, error) {
	stream, err := e.cfg.Results.PutResult(ctx)
	if err != nil {
		return nil, err
	}
	w := &chunkWriter{stream: stream, header: &rsv1.PutResultHeader{Tenant: tenant, ExecutionId: executionID, Step: step, ResultId: id, ContentType: "application/json"}}
	w.write(body)
	return w.close()
}
