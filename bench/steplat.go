package main

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
)

// Event types the latency readers look for (internal/domain's names; the bench reads the
// log through the public API only).
const (
	evPlaybookStarted  = "playbook.started"
	evStepEnter        = "step.enter"
	evCallDone         = "call.done"
	evCommandCompleted = "command.completed"
)

// Scopes of the latency fields, for the JSON line.
const (
	chainLatencyScope  = "step_p50_ms and step_p99_ms: per step, the commit time of its outcome (command.completed; call.done in logs written before command.completed carried the outcome) minus the previous step's outcome (playbook.started for the first step), latency_samples of them, over every step of the measured executions, read back from their event logs after the run"
	fanoutLatencyScope = "step_p50_ms and step_p99_ms: per task, the commit time of its iteration's outcome (command.completed, or call.done in older logs) minus the loop step's step.enter, latency_samples of them, read back from the event log after the run"
)

// readLog calls f with every event of an execution's log, in seq order.
func readLog(ctx context.Context, exe apiv1.ExecutionServiceClient, id string, sh *shed, f func(*apiv1.Event)) error {
	token := ""
	for {
		page, err := retryExhausted(ctx, &sh.reads, &sh.unavailable, func() (*apiv1.ListExecutionEventsResponse, error) {
			return exe.ListExecutionEvents(ctx, &apiv1.ListExecutionEventsRequest{ExecutionId: id, PageSize: 1000, PageToken: token})
		})
		if err != nil {
			return fmt.Errorf("read the log of %s: %w", id, err)
		}
		for _, ev := range page.GetEvents() {
			f(ev)
		}
		if token = page.GetNextPageToken(); token == "" {
			return nil
		}
	}
}

// outcomeKey names one step (or one loop iteration of it) within an execution.
type outcomeKey struct {
	step      string
	iteration int32 // -1 outside a loop
}

// outcomes is the commit time of each step's outcome event in an execution's log:
// command.completed, or call.done when the log has no command.completed for that step (a
// log written before command.completed carried the outcome). Keys are in the order their
// first outcome event appeared.
type outcomes struct {
	order []outcomeKey
	at    map[outcomeKey]time.Time
	final map[outcomeKey]bool      // the time is a command.completed's
	start map[outcomeKey]time.Time // when the worker began the command, from command.completed
}

func newOutcomes() *outcomes {
	return &outcomes{at: map[outcomeKey]time.Time{}, final: map[outcomeKey]bool{}, start: map[outcomeKey]time.Time{}}
}

func (o *outcomes) add(ev *apiv1.Event) {
	typ := ev.GetType()
	if typ != evCommandCompleted && typ != evCallDone {
		return
	}
	k := outcomeKey{step: ev.GetStep(), iteration: -1}
	if it := ev.GetIteration(); it != nil {
		k.iteration = it.GetIndex()
	}
	if _, seen := o.at[k]; !seen {
		o.order = append(o.order, k)
	}
	if o.final[k] {
		return // a retried step's later attempt: the first outcome ends the step
	}
	o.at[k] = ev.GetCommitTime().AsTime()
	o.final[k] = typ == evCommandCompleted
	if st := ev.GetStartTime(); st != nil && typ == evCommandCompleted {
		o.start[k] = st.AsTime()
	}
}

// stepTimes are the latencies of a run's steps (or tasks) in ms, and the two parts of
// each whose outcome says when its command began: dispatch, from the moment the step could
// start (the previous outcome's commit in a chain, the loop's step.enter in a fan-out) to
// the worker's start of the command, and run, from that start to the commit of the
// outcome. A commit time is when the materializer began the transaction, so dispatch holds
// the commit that issued the command, its forward and the worker's claim, and run holds
// the tool, the outcome's publish, the materializer's read and its batch's wait.
type stepTimes struct {
	lat, dispatch, run []float64
}

func (s *stepTimes) add(from, start, done time.Time) {
	s.lat = append(s.lat, msOf(done.Sub(from)))
	if !start.IsZero() && !start.Before(from) && !done.Before(start) {
		s.dispatch = append(s.dispatch, msOf(start.Sub(from)))
		s.run = append(s.run, msOf(done.Sub(start)))
	}
}

func (s *stepTimes) merge(o *stepTimes) {
	s.lat, s.dispatch, s.run = append(s.lat, o.lat...), append(s.dispatch, o.dispatch...), append(s.run, o.run...)
}

// chainStepLatencies is, for one execution of the chain workload, each step's latency in
// ms: the commit time of its outcome minus the previous step's (playbook.started's for the
// first, or the log's first event's if it has none).
func chainStepLatencies(ctx context.Context, exe apiv1.ExecutionServiceClient, id string, sh *shed) (*stepTimes, error) {
	var start, first time.Time
	o := newOutcomes()
	if err := readLog(ctx, exe, id, sh, func(ev *apiv1.Event) {
		if first.IsZero() {
			first = ev.GetCommitTime().AsTime()
		}
		if ev.GetType() == evPlaybookStarted && start.IsZero() {
			start = ev.GetCommitTime().AsTime()
		}
		o.add(ev)
	}); err != nil {
		return nil, err
	}
	if start.IsZero() {
		start = first // a log without playbook.started starts with its first event
	}
	ks := append([]outcomeKey(nil), o.order...)
	// Steps of a chain end one after another; sorting guards against a log whose outcome
	// events of one step interleave with the next's.
	sort.SliceStable(ks, func(i, j int) bool { return o.at[ks[i]].Before(o.at[ks[j]]) })
	st := &stepTimes{}
	prev := start
	for _, k := range ks {
		st.add(prev, o.start[k], o.at[k])
		prev = o.at[k]
	}
	return st, nil
}

// fanoutTaskLatencies is, for the fanout workload's execution, each iteration's latency in
// ms: the commit time of its outcome minus the loop step's step.enter (the log's first
// event's if it has none).
func fanoutTaskLatencies(ctx context.Context, exe apiv1.ExecutionServiceClient, id string, sh *shed) (*stepTimes, error) {
	var enter, first time.Time
	o := newOutcomes()
	if err := readLog(ctx, exe, id, sh, func(ev *apiv1.Event) {
		if first.IsZero() {
			first = ev.GetCommitTime().AsTime()
		}
		if ev.GetType() == evStepEnter && ev.GetStep() == "start" && enter.IsZero() {
			enter = ev.GetCommitTime().AsTime()
		}
		o.add(ev)
	}); err != nil {
		return nil, err
	}
	if enter.IsZero() {
		enter = first // a log without the loop's step.enter: from the execution's first event
	}
	st := &stepTimes{}
	for _, k := range o.order {
		if k.iteration >= 0 {
			st.add(enter, o.start[k], o.at[k])
		}
	}
	return st, nil
}

// logReaders is how many execution logs are read back at once after a run.
const logReaders = 4

// latencies reads back the logs of ids with f and returns all their latencies.
func latencies(ctx context.Context, exe apiv1.ExecutionServiceClient, ids []string, sh *shed,
	f func(context.Context, apiv1.ExecutionServiceClient, string, *shed) (*stepTimes, error)) (*stepTimes, error) {
	var (
		mu   sync.Mutex
		all  = &stepTimes{}
		errs = make(chan error, len(ids))
		wg   sync.WaitGroup
		next = make(chan string)
	)
	for range min(logReaders, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range next {
				lat, err := f(ctx, exe, id, sh)
				if err != nil {
					errs <- err
					continue
				}
				mu.Lock()
				all.merge(lat)
				mu.Unlock()
			}
		}()
	}
	for _, id := range ids {
		next <- id
	}
	close(next)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return all, nil
}

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of xs, 0 for none.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
