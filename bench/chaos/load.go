package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// op is one line of history.jsonl: an API call's invocation or its outcome, as in
// Jepsen's histories. Type is invoke, ok, fail (a definite refusal: nothing was done) or
// info (a timeout, an unavailable service, an internal error: the outcome is unknown).
type op struct {
	T       float64 `json:"t"` // seconds since the load began
	Process int     `json:"process"`
	F       string  `json:"f"` // start or wait
	Type    string  `json:"type"`
	Tenant  string  `json:"tenant"`
	Path    string  `json:"path,omitempty"`
	Key     string  `json:"key,omitempty"`
	ID      string  `json:"execution_id,omitempty"`
	Status  string  `json:"status,omitempty"`
	Code    string  `json:"code,omitempty"`
	Err     string  `json:"error,omitempty"`
}

// history writes ops to history.jsonl as they happen.
type history struct {
	mu sync.Mutex
	f  *os.File
	t0 time.Time
	n  map[string]int // ops by F:Type
}

func newHistory(path string, t0 time.Time) (*history, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &history{f: f, t0: t0, n: map[string]int{}}, nil
}

func (h *history) add(o op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o.T = time.Since(h.t0).Seconds()
	b, _ := json.Marshal(o)
	_, _ = h.f.Write(append(b, '\n'))
	h.n[o.F+":"+o.Type]++
}

func (h *history) counts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int, len(h.n))
	for k, v := range h.n {
		out[k] = v
	}
	return out
}

func (h *history) close() { _ = h.f.Close() }

// attempt is one start call of an execution: when it was invoked and answered, and how.
type attempt struct {
	invoke, end time.Time
	typ, code   string
	id          string
}

// execRec is one execution of the load, identified by its idempotency key.
type execRec struct {
	i      int
	tenant *tenant
	path   string
	key    string

	mu       sync.Mutex
	attempts []attempt
	ids      map[string]int // execution ids in ok answers, with their count
	status   eventv1.ExecutionStatus
	ackAt    time.Time
	doneAt   time.Time
	gaveUp   bool
}

// planLoad assigns each execution a tenant and a playbook: the first of each playbook in
// order so that every one runs, then by weight.
func planLoad(n int, tenants []*tenant, seed uint64, rng *mrand.Rand) []*execRec {
	total := 0
	for _, w := range mixWeights {
		total += w
	}
	recs := make([]*execRec, n)
	for i := range n {
		path := loadPlaybooks[i%len(loadPlaybooks)]
		if i >= len(loadPlaybooks) {
			x := rng.IntN(total)
			for j, w := range mixWeights {
				if x < w {
					path = loadPlaybooks[j]
					break
				}
				x -= w
			}
		}
		recs[i] = &execRec{i: i, tenant: tenants[i%len(tenants)], path: path, key: fmt.Sprintf("chaos-%d-%d", seed, i), ids: map[string]int{}}
	}
	return recs
}

// load runs the executions: starts paced evenly over span, at most inFlight executions
// between their first start call and their terminal status, each started with its
// idempotency key and the start retried with the same key until an ok answer, then
// awaited with WaitExecution until terminal; everything stops when ctx ends.
type load struct {
	recs     []*execRec
	hist     *history
	inFlight int
	span     time.Duration
	active   atomic.Int64
	finished atomic.Int64
}

// run starts every execution and returns when each is terminal or ctx ended.
func (l *load) run(ctx context.Context) {
	sem := make(chan struct{}, l.inFlight)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i, r := range l.recs {
		at := t0.Add(time.Duration(int64(l.span) * int64(i) / int64(len(l.recs))))
		if d := time.Until(at); d > 0 {
			t := time.NewTimer(d) // pacing: schedule, not synchronisation
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		select {
		case <-ctx.Done():
		case sem <- struct{}{}:
		}
		if ctx.Err() != nil {
			r.mu.Lock()
			r.gaveUp = true
			r.mu.Unlock()
			continue
		}
		wg.Add(1)
		l.active.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem; l.active.Add(-1); l.finished.Add(1) }()
			l.runOne(ctx, r)
		}()
	}
	wg.Wait()
}

// definite are the codes that say a start was refused before anything was done.
func definite(c codes.Code) bool {
	switch c {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.Unauthenticated, codes.OutOfRange, codes.Unimplemented:
		return true
	}
	return false
}

// backoff is the pause before retry number n (1-based) of a failed call.
func backoff(n int) time.Duration {
	return min(250*time.Millisecond<<min(n-1, 4), 4*time.Second)
}

// pause waits d or until ctx ends (a retry's backoff).
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (l *load) runOne(ctx context.Context, r *execRec) {
	wl, _ := structpb.NewStruct(map[string]any{"chaos_key": r.key, "chaos_i": r.i})
	base := op{Process: r.i, Tenant: r.tenant.name, Path: r.path, Key: r.key}
	var id string
	for n := 1; ctx.Err() == nil; n++ {
		o := base
		o.F, o.Type = "start", "invoke"
		l.hist.add(o)
		a := attempt{invoke: time.Now()}
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		resp, err := r.tenant.exec.StartExecution(cctx, &apiv1.StartExecutionRequest{Path: r.path, Workload: wl, IdempotencyKey: r.key})
		cancel()
		a.end = time.Now()
		switch {
		case err == nil:
			a.typ, a.id = "ok", resp.GetExecutionId()
			o.Type, o.ID = "ok", a.id
		case ctx.Err() != nil:
			a.typ, a.code = "info", "Canceled"
			o.Type, o.Code, o.Err = "info", a.code, "the run ended"
		default:
			c := status.Code(err)
			a.typ, a.code = "info", c.String()
			if definite(c) {
				a.typ = "fail"
			}
			o.Type, o.Code, o.Err = a.typ, a.code, status.Convert(err).Message()
		}
		l.hist.add(o)
		r.mu.Lock()
		r.attempts = append(r.attempts, a)
		if a.typ == "ok" {
			r.ids[a.id]++
			if r.ackAt.IsZero() {
				r.ackAt = a.end
			}
		}
		r.mu.Unlock()
		if a.typ == "ok" {
			id = a.id
			break
		}
		if a.code == codes.InvalidArgument.String() {
			break // the request itself is wrong: retrying cannot help
		}
		pause(ctx, backoff(n))
	}
	if id == "" {
		r.mu.Lock()
		r.gaveUp = true
		r.mu.Unlock()
		return
	}
	for n := 1; ctx.Err() == nil; n++ {
		o := base
		o.F, o.Type, o.ID = "wait", "invoke", id
		l.hist.add(o)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		resp, err := r.tenant.exec.WaitExecution(cctx, &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(20 * time.Second)})
		cancel()
		if err != nil {
			o.Type, o.Code, o.Err = "info", status.Code(err).String(), status.Convert(err).Message()
			if definite(status.Code(err)) {
				o.Type = "fail"
			}
			l.hist.add(o)
			pause(ctx, backoff(n))
			continue
		}
		st := resp.GetExecution().GetStatus()
		o.Type, o.Status = "ok", st.String()
		l.hist.add(o)
		if st == eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED || st == eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED ||
			st == eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED {
			r.mu.Lock()
			r.status, r.doneAt = st, time.Now()
			r.mu.Unlock()
			return
		}
		n = 0 // a wait that timed out normally is no failure
	}
	r.mu.Lock()
	r.gaveUp = true
	r.mu.Unlock()
}
