package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/services/orchestrator/internal/decide"
)

// fakeLog serves ListEvents from a slice of events with seq = index+1.
type fakeLog struct {
	sbv1.StateServiceClient
	events []*eventv1.Event
	reads  int
}

func (f *fakeLog) ListEvents(_ context.Context, in *sbv1.ListEventsRequest, _ ...grpc.CallOption) (*sbv1.ListEventsResponse, error) {
	f.reads++
	from := int(in.GetAfterSeq())
	to := min(from+int(in.GetPageSize()), len(f.events))
	resp := &sbv1.ListEventsResponse{Events: f.events[from:to]}
	if to < len(f.events) {
		resp.NextAfterSeq = int64(to)
	}
	return resp, nil
}

// fakeStore records PutResult uploads.
type fakeStore struct {
	rsv1.ResultStoreServiceClient
	puts map[string][]byte
}

type fakePut struct {
	grpc.ClientStream
	s      *fakeStore
	header *rsv1.PutResultHeader
	body   []byte
	chunks int
}

func (f *fakeStore) PutResult(context.Context, ...grpc.CallOption) (grpc.ClientStreamingClient[rsv1.PutResultRequest, rsv1.PutResultResponse], error) {
	return &fakePut{s: f}, nil
}

func (p *fakePut) Send(r *rsv1.PutResultRequest) error {
	if p.header == nil {
		if r.GetHeader() == nil {
			return fmt.Errorf("first message without a header")
		}
		p.header = r.GetHeader()
	} else if r.GetHeader() != nil {
		return fmt.Errorf("a second header")
	}
	if len(r.GetChunk()) > putChunk {
		return fmt.Errorf("chunk of %d bytes", len(r.GetChunk()))
	}
	p.body = append(p.body, r.GetChunk()...)
	p.chunks++
	return nil
}

func (p *fakePut) CloseAndRecv() (*rsv1.PutResultResponse, error) {
	p.s.puts[p.header.GetResultId()] = p.body
	return &rsv1.PutResultResponse{Ref: &eventv1.ResultRef{Uri: "noetl://results/t/x/" + p.header.GetResultId(), Size: int64(len(p.body)), ContentType: p.header.GetContentType(), ExtractedJson: p.header.GetExtractedJson()}}, nil
}

// A loop's list of results is assembled in index order from the log (the last result of an
// index wins, other steps and epochs are ignored), the same whether it fits the buffer or
// is written in windows with more passes over the log.
func TestAssembleLoopResultsInWindows(t *testing.T) {
	const total = 300
	var log []*eventv1.Event
	add := func(ev *eventv1.Event) {
		ev.Seq = int64(len(log) + 1)
		log = append(log, ev)
	}
	add(&eventv1.Event{Type: domain.EventPlaybookStarted})
	add(&eventv1.Event{Type: domain.EventStepEnter, Step: "s"})
	want := make([]any, total)
	for k := 0; k < total; k++ {
		i := (k * 7) % total // out of index order, as a parallel loop completes
		it := &eventv1.Iteration{Epoch: 2, Index: int32(i)}
		add(&eventv1.Event{Type: domain.EventCallDone, Step: "other", Iteration: it, ResultJson: []byte(`"no"`)})
		add(&eventv1.Event{Type: domain.EventCallDone, Step: "s", Iteration: &eventv1.Iteration{Epoch: 1, Index: int32(i)}, ResultJson: []byte(`"old epoch"`)})
		switch {
		case i == 5:
			continue // no result: null
		case i%50 == 1:
			ref := &eventv1.ResultRef{Uri: fmt.Sprintf("u%d", i), Size: 1 << 20, ExtractedJson: []byte(`{"k":1}`)}
			add(&eventv1.Event{Type: domain.EventCallDone, Step: "s", Iteration: it, ResultRef: ref})
			view := map[string]any{"k": float64(1), "_ref": ref.GetUri(), "_uri": ref.GetUri(), "_store": "resultstore", "_size": float64(1 << 20)}
			data := map[string]any{}
			for k, v := range view {
				data[k] = v
			}
			view["data"] = data
			want[i] = view
		default:
			if i%3 == 0 {
				add(&eventv1.Event{Type: domain.EventCallDone, Step: "s", Iteration: it, ResultJson: []byte(`"superseded"`)})
			}
			v := fmt.Sprintf("%d-%s", i, strings.Repeat("x", i%40))
			b, _ := json.Marshal(v)
			add(&eventv1.Event{Type: domain.EventCallDone, Step: "s", Iteration: it, ResultJson: b})
			want[i] = v
		}
		add(&eventv1.Event{Type: domain.EventCommandCompleted, Step: "s", Iteration: it})
	}
	add(&eventv1.Event{Type: domain.EventCallDone, Step: "s", Iteration: &eventv1.Iteration{Epoch: 2, Index: 7}, ResultJson: []byte(`"after the state"`)})
	st := &sbv1.ExecutionState{ExecutionId: "x", Tenant: "t", Seq: int64(len(log) - 1)}
	n := decide.LoopResults{Step: "s", Epoch: 2, EnterEventID: "enter", EnterSeq: 2, Total: total}

	var bodies [][]byte
	for _, budget := range []int64{1 << 20, 400, 1} {
		state, store := &fakeLog{events: log}, &fakeStore{puts: map[string][]byte{}}
		e := &Engine{cfg: Config{Results: store}, state: state}
		ref, err := e.assembleLoopResults(context.Background(), st, n, budget)
		require.NoError(t, err)
		require.Equal(t, "noetl://results/t/x/"+domain.LoopResultsID("enter"), ref.GetUri())
		require.JSONEq(t, `{"_summary":"array","length":300}`, string(ref.GetExtractedJson()))
		body := store.puts[domain.LoopResultsID("enter")]
		var got []any
		require.NoError(t, json.Unmarshal(body, &got), "budget %d", budget)
		require.Equal(t, want, got, "budget %d", budget)
		bodies = append(bodies, body)
		passes := state.reads / ((len(log) + loopEventsPage - 1) / loopEventsPage)
		t.Logf("budget %d: %d bytes, %d passes over the log", budget, len(body), passes)
		if budget == 1<<20 {
			require.Equal(t, 1, passes)
		} else {
			require.Greater(t, passes, 2)
		}
	}
	require.Equal(t, bodies[0], bodies[1])
	require.Equal(t, bodies[0], bodies[2])
}

// A list too long to hold whose results come in index order (a sequential loop), or
// nearly (a parallel loop), is written during a second pass, holding only the early ones.
func TestAssembleLoopResultsStreamsInOrder(t *testing.T) {
	const total = 5000
	var log []*eventv1.Event
	add := func(ev *eventv1.Event) {
		ev.Seq = int64(len(log) + 1)
		log = append(log, ev)
	}
	add(&eventv1.Event{Type: domain.EventStepEnter, Step: "s"})
	want := make([]any, total)
	for k := 0; k < total; k++ {
		i := k ^ 1 // pairs swapped: at most one result early
		if i == 77 {
			continue // no result: null
		}
		b, _ := json.Marshal(i)
		add(&eventv1.Event{Type: domain.EventCallDone, Step: "s", Iteration: &eventv1.Iteration{Epoch: 1, Index: int32(i)}, ResultJson: b})
		want[i] = float64(i)
	}
	st := &sbv1.ExecutionState{ExecutionId: "x", Tenant: "t", Seq: int64(len(log))}
	n := decide.LoopResults{Step: "s", Epoch: 1, EnterEventID: "enter", EnterSeq: 1, Total: total}
	state, store := &fakeLog{events: log}, &fakeStore{puts: map[string][]byte{}}
	e := &Engine{cfg: Config{Results: store}, state: state}
	_, err := e.assembleLoopResults(context.Background(), st, n, 1000)
	require.NoError(t, err)
	var got []any
	require.NoError(t, json.Unmarshal(store.puts[domain.LoopResultsID("enter")], &got))
	require.Equal(t, want, got)
	require.Equal(t, 2, state.reads/((len(log)+loopEventsPage-1)/loopEventsPage), "two passes over the log")
}

// A list larger than one chunk goes up in several chunks, the header with the first.
func TestChunkWriterSplitsLargeLists(t *testing.T) {
	store := &fakeStore{puts: map[string][]byte{}}
	stream, _ := store.PutResult(context.Background())
	w := &chunkWriter{stream: stream, header: &rsv1.PutResultHeader{ResultId: "r"}}
	big := []byte(strings.Repeat("y", putChunk/3))
	for i := 0; i < 10; i++ {
		w.write(big)
	}
	_, err := w.close()
	require.NoError(t, err)
	require.Len(t, store.puts["r"], 10*len(big))
	require.Equal(t, 4, stream.(*fakePut).chunks)
}

// gatedLog is a fakeLog whose reads wait for gate to close, counting the readers that
// entered.
type gatedLog struct {
	fakeLog
	gate    chan struct{}
	mu      sync.Mutex
	entered int
}

func (g *gatedLog) ListEvents(ctx context.Context, in *sbv1.ListEventsRequest, opts ...grpc.CallOption) (*sbv1.ListEventsResponse, error) {
	g.mu.Lock()
	g.entered++
	g.mu.Unlock()
	<-g.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fakeLog.ListEvents(ctx, in, opts...)
}

// Two decisions that need the same loop's list while it is being assembled (the one taken
// inside a commit and the notice's) share that one assembly: one reader of the log, one
// upload, the same reference.
func TestConcurrentDecisionsAssembleALoopsListOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const total = 600
		log := []*eventv1.Event{{Seq: 1, Type: domain.EventStepEnter, Step: "s"}}
		for i := range total {
			b, _ := json.Marshal(i)
			log = append(log, &eventv1.Event{Seq: int64(len(log) + 1), Type: domain.EventCallDone, Step: "s", Iteration: &eventv1.Iteration{Epoch: 1, Index: int32(i)}, ResultJson: b})
		}
		state := &gatedLog{fakeLog: fakeLog{events: log}, gate: make(chan struct{})}
		store := &fakeStore{puts: map[string][]byte{}}
		e := &Engine{cfg: Config{Results: store}, state: state, loopBuffer: loopResultsBufferBytes}
		st := &sbv1.ExecutionState{ExecutionId: "x", Tenant: "t", Seq: int64(len(log))}
		needs := []decide.LoopResults{{Step: "s", Epoch: 1, EnterEventID: "enter", EnterSeq: 1, Total: total}}
		refs := make([]*eventv1.ResultRef, 2)
		var wg sync.WaitGroup
		for k := range refs {
			wg.Go(func() {
				got, err := e.loopResultsFor(context.Background(), st, needs)
				require.NoError(t, err)
				refs[k] = got["enter"]
			})
		}
		synctest.Wait() // one decision reads the log, the other waits for its list
		require.Equal(t, 1, state.entered, "readers of the log while the list is assembled")
		close(state.gate)
		wg.Wait()
		require.NotNil(t, refs[0])
		require.Same(t, refs[0], refs[1], "both decisions route the loop with the one list")
		pages := (len(log) + loopEventsPage - 1) / loopEventsPage
		require.Equal(t, pages, state.reads, "one pass over the log (a list this short is held)")
		require.Len(t, store.puts, 1)
	})
}
