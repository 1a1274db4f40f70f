package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sync/singleflight"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/services/orchestrator/internal/decide"
)

// A loop whose list of iteration results goes past the inline budget does not keep it in
// the execution state. When the loop completes, the engine assembles the list before the
// decision that routes it: it reads the iterations' call.done events from the log (after
// the loop's step.enter, up to the state's seq), writes their results in index order as one
// JSON array to the resultstore, under an id derived from the step.enter event (deciding
// again rewrites the same entry with the same bytes), and hands decide the reference, which
// the loop's step.exit then carries as the step's result.
//
// Memory stays bounded: the engine keeps per iteration only the seq of its result's event
// and that result's size. A short list (up to loopResultsHoldBytes) is held after the first
// pass; a longer one is written during a second pass as its results come, holding only
// those that come before their turn (at most loopResultsBufferBytes); past that the rest
// is written in windows of consecutive indexes, each read with one more pass.

// loopResultsBufferBytes bounds the iteration results held in memory while assembling.
const loopResultsBufferBytes = 16 << 20

// loopResultsHoldBytes bounds the results held after the first pass (a short list is
// written from memory; a longer one is streamed in a second pass).
const loopResultsHoldBytes = 1 << 20

// elementOverhead is what holding one result costs besides its bytes (a slice header and
// its allocation), counted against the budgets.
const elementOverhead = 48

// loopEventsPage and loopEventsPageBytes bound a page of the event reads, in events and
// in bytes (an iteration's event holds a result of up to the inline budget). The byte
// bound keeps each page's gRPC message under 32 KiB, the largest buffer gRPC's pool holds
// below 1 MiB: a larger message takes a 1 MiB buffer on both ends, and assembling the list
// of a loop of 50,000 noops in pages of 256 events (about 64 KiB each) that way added a
// fifth to the orchestrator's and statebuilder's resident memory.
const (
	loopEventsPage      = 256
	loopEventsPageBytes = 24 << 10
)

// loopResultsCacheMax bounds the cache of assembled lists' references.
const loopResultsCacheMax = 4096

// refCache remembers the references of assembled lists by step.enter event id, so a
// decision retried before the step.exit commits does not assemble again, and joins the
// decisions that need a list while it is being assembled (the one taken inside a commit
// and the notice's, when the commit stopped waiting for the first) to that one assembly:
// one pass over the log and one list's buffers in memory, not one per decision.
type refCache struct {
	mu     sync.Mutex
	refs   map[string]*eventv1.ResultRef
	flight singleflight.Group
}

func (c *refCache) get(key string) *eventv1.ResultRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refs[key]
}

func (c *refCache) put(key string, ref *eventv1.ResultRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refs == nil || len(c.refs) >= loopResultsCacheMax {
		c.refs = map[string]*eventv1.ResultRef{}
	}
	c.refs[key] = ref
}

// loopResultsFor assembles (or finds) the lists of results of the completed loops a
// decision on st routes.
func (e *Engine) loopResultsFor(ctx context.Context, st *sbv1.ExecutionState, needs []decide.LoopResults) (map[string]*eventv1.ResultRef, error) {
	if len(needs) == 0 {
		return nil, nil
	}
	out := make(map[string]*eventv1.ResultRef, len(needs))
	for _, n := range needs {
		ref := e.loopResults.get(n.EnterEventID)
		if ref == nil {
			v, err, _ := e.loopResults.flight.Do(n.EnterEventID, func() (any, error) {
				if ref := e.loopResults.get(n.EnterEventID); ref != nil {
					return ref, nil // assembled while this decision waited for the key
				}
				ref, err := e.assembleLoopResults(ctx, st, n, e.loopBuffer)
				if err != nil {
					return nil, err
				}
				e.loopResults.put(n.EnterEventID, ref)
				return ref, nil
			})
			if err != nil {
				return nil, fmt.Errorf("assemble the results of loop %s: %w", n.Step, err)
			}
			ref = v.(*eventv1.ResultRef)
		}
		out[n.EnterEventID] = ref
	}
	return out, nil
}

// assembleLoopResults writes the list of n's iteration results to the resultstore, holding
// at most about budget bytes of results at once, and returns its reference.
func (e *Engine) assembleLoopResults(ctx context.Context, st *sbv1.ExecutionState, n decide.LoopResults, budget int64) (*eventv1.ResultRef, error) {
	if e.cfg.Results == nil {
		return nil, fmt.Errorf("no resultstore configured")
	}
	// Pass 1: which event holds each index's result (the last one wins, as in the fold),
	// how large it is, and the results themselves while they (with a slice header each) fit
	// the smaller hold budget: a short list is then written from memory after one pass.
	holdBudget := min(budget, loopResultsHoldBytes)
	last := make([]int64, n.Total)
	size := make([]int32, n.Total)
	var held [][]byte
	if int64(n.Total)*elementOverhead <= holdBudget {
		held = make([][]byte, n.Total) // a list this long may fit; a longer one never does
	}
	var heldBytes int64
	err := e.scanIterations(ctx, st, n, func(i int, seq int64, elem []byte) {
		last[i], size[i] = seq, int32(len(elem))
		if held == nil {
			return
		}
		heldBytes += int64(len(elem)) - int64(len(held[i]))
		if held[i] == nil {
			heldBytes += elementOverhead
		}
		held[i] = elem
		if heldBytes > holdBudget {
			held = nil // too large to hold: stream it in a second pass
		}
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // an unfinished upload is rolled back
	stream, err := e.cfg.Results.PutResult(ctx)
	if err != nil {
		return nil, err
	}
	w := &chunkWriter{stream: stream, header: &rsv1.PutResultHeader{
		Tenant: st.GetTenant(), ExecutionId: st.GetExecutionId(), Step: n.Step, ResultId: domain.LoopResultsID(n.EnterEventID),
		ContentType: "application/json", ExtractedJson: domain.LoopResultsExtracted(n.Total),
	}}
	w.write([]byte{'['})
	put := func(i int, elem []byte) {
		if i > 0 {
			w.write([]byte{','})
		}
		if len(elem) == 0 {
			elem = []byte("null")
		}
		w.write(elem)
	}
	if held != nil {
		for i, elem := range held {
			put(i, elem)
		}
		w.write([]byte{']'})
		return w.close()
	}
	// Pass 2: write each final result as it comes when the results come in index order
	// (a sequential loop), holding only those that come early (a parallel loop's iterations
	// in flight). If those outgrow the budget, the rest is written in windows.
	next := 0
	skipMissing := func() {
		for next < n.Total && last[next] == 0 {
			put(next, nil)
			next++
		}
	}
	skipMissing()
	early := map[int][]byte{}
	var earlyBytes int64
	overflow := errors.New("early results over the budget")
	err = e.scanIterations(ctx, st, n, func(i int, seq int64, elem []byte) {
		if earlyBytes > budget || seq != last[i] || i < next {
			return
		}
		if i > next {
			early[i] = elem
			earlyBytes += int64(len(elem)) + elementOverhead
			return
		}
		put(i, elem)
		next++
		for {
			skipMissing()
			x, ok := early[next]
			if !ok {
				return
			}
			delete(early, next)
			earlyBytes -= int64(len(x)) + elementOverhead
			put(next, x)
			next++
		}
	})
	if err != nil {
		return nil, err
	}
	if earlyBytes > budget && next < n.Total {
		err = overflow
	}
	early = nil
	if err == overflow {
		for lo := next; lo < n.Total && w.err == nil; {
			hi, acc := lo, int64(0)
			for hi < n.Total && (hi == lo || acc+int64(size[hi])+elementOverhead <= budget) {
				acc += int64(size[hi]) + elementOverhead
				hi++
			}
			window := make([][]byte, hi-lo)
			err := e.scanIterations(ctx, st, n, func(i int, seq int64, elem []byte) {
				if i >= lo && i < hi && seq == last[i] {
					window[i-lo] = elem
				}
			})
			if err != nil {
				return nil, err
			}
			for k, elem := range window {
				put(lo+k, elem)
			}
			lo = hi
		}
	} else if next < n.Total {
		return nil, fmt.Errorf("loop %s: %d of %d results assembled", n.Step, next, n.Total)
	}
	w.write([]byte{']'})
	return w.close()
}

// scanIterations calls fn, in seq order, for the result event of each of n's iterations
// (call.done, or the command.completed that carries the call) in the log after n's
// step.enter up to st's seq, with its index, seq and element of the list.
func (e *Engine) scanIterations(ctx context.Context, st *sbv1.ExecutionState, n decide.LoopResults, fn func(i int, seq int64, elem []byte)) error {
	after := n.EnterSeq
	for after < st.GetSeq() {
		// Only the step's result events: the statebuilder skips the rest of the log (and
		// still refuses a range with a gap).
		resp, err := e.state.ListEvents(ctx, &sbv1.ListEventsRequest{ExecutionId: st.GetExecutionId(), AfterSeq: after, PageSize: loopEventsPage, MaxBytes: loopEventsPageBytes,
			Step: n.Step, Types: []string{domain.EventCallDone, domain.EventCommandCompleted}, UpToSeq: st.GetSeq()})
		if err != nil {
			return err
		}
		for _, ev := range resp.GetEvents() {
			if ev.GetSeq() > st.GetSeq() {
				return nil
			}
			after = ev.GetSeq()
			i, ok := domain.IsIterationResult(ev, n.Step, n.Epoch, n.Total)
			if !ok {
				continue
			}
			elem, err := domain.IterationResult(ev)
			if err != nil {
				return err
			}
			fn(i, ev.GetSeq(), elem)
		}
		// The last page: the statebuilder has covered the range up to the state's seq.
		if resp.GetNextAfterSeq() == 0 || len(resp.GetEvents()) == 0 {
			break
		}
	}
	return nil
}

// chunkWriter streams a PutResult upload in chunks of putChunk bytes, the header with the
// first; the first error sticks.
type chunkWriter struct {
	stream rsv1.ResultStoreService_PutResultClient
	header *rsv1.PutResultHeader
	buf    []byte
	err    error
}

// putChunk is the size of one chunk sent to the resultstore.
const putChunk = 256 << 10

func (w *chunkWriter) write(p []byte) {
	if w.err != nil {
		return
	}
	w.buf = append(w.buf, p...)
	for len(w.buf) >= putChunk && w.err == nil {
		w.send(w.buf[:putChunk])
		w.buf = append(w.buf[:0], w.buf[putChunk:]...)
	}
}

func (w *chunkWriter) send(chunk []byte) {
	req := &rsv1.PutResultRequest{Chunk: chunk, Header: w.header}
	w.header = nil
	w.err = w.stream.Send(req)
}

func (w *chunkWriter) close() (*eventv1.ResultRef, error) {
	if len(w.buf) > 0 || w.header != nil {
		w.send(w.buf)
	}
	if w.err != nil {
		return nil, w.err
	}
	resp, err := w.stream.CloseAndRecv()
	if err != nil {
		return nil, err
	}
	return resp.GetRef(), nil
}
