package engine

import (
	"context"
	"slices"

	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
)

// Final states: a waiter that saw an execution's terminal notice asks the engine for the
// state it ended in before it asks the statebuilder, which would read and fold the whole
// log again. The engine holds that state when it decided the execution's end: its shard
// cached it (the end decided inside the commit, speculated), or moved it, once the
// terminal notice confirmed it, to a small keep of ended states.
//
// A state is handed out only when it stands exactly at the terminal notice's head: its seq
// and the id of its last event, which the waiter read off the notice. That head is the
// log's (the notice follows the commit), so the state at it is the log's state, the same
// argument that lets a commit's request confirm what a state speculated (inline.go). Any
// other state, or none, and the waiter reads the statebuilder as before.

// endedKeep holds the last states a shard's executions ended in, for their waiters: at most
// endedKeepCount of them and endedKeepBytes together, the oldest forgotten first.
type endedKeep struct {
	order []string // execution ids, oldest first
	byID  map[string]endedState
	bytes int64
}

type endedState struct {
	st    *sbv1.ExecutionState
	bytes int64
}

const (
	// endedKeepCount bounds the ended states one shard keeps: a waiter asks within
	// moments of the end, so a few hundred cover the executions that end meanwhile.
	endedKeepCount = 512
	// endedKeepBytes bounds their size, per shard.
	endedKeepBytes = 2 << 20
)

// keep remembers st, an execution's state at its terminal event, of about n bytes.
func (k *endedKeep) keep(st *sbv1.ExecutionState, n int64) {
	if n > endedKeepBytes {
		return
	}
	if k.byID == nil {
		k.byID = map[string]endedState{}
	}
	id := st.GetExecutionId()
	if old, ok := k.byID[id]; ok {
		k.bytes -= old.bytes
		delete(k.byID, id)
		k.order = slices.DeleteFunc(k.order, func(x string) bool { return x == id })
	}
	for len(k.order) > 0 && (len(k.order) >= endedKeepCount || k.bytes+n > endedKeepBytes) {
		oldest := k.order[0]
		k.order = k.order[1:]
		k.bytes -= k.byID[oldest].bytes
		delete(k.byID, oldest)
	}
	k.order = append(k.order, id)
	k.byID[id] = endedState{st: st, bytes: n}
	k.bytes += n
}

// get returns the kept state of an execution, or nil.
func (k *endedKeep) get(id string) *sbv1.ExecutionState {
	return k.byID[id].st
}

// keepEnded moves the state an execution ended in from the cache to the ended keep, when
// its terminal notice n confirms it (applyCarried): the notice names the state's head (a
// commit decided inside it, whose notice carries no events), or carries the events that
// bring the state to its seq.
func (s *shard) keepEnded(n *eventv1.CommitNotice, size int64) {
	id := n.GetExecutionId()
	if !s.states.applyCarried(n, size) {
		return
	}
	if s.states.speculative(id) {
		return
	}
	if st, bytes := s.states.take(id); st.GetSeq() == n.GetSeq() {
		s.ended.keep(st, bytes)
	}
}

// finalRequest asks a shard for the state an execution ended in, at the head seq and
// lastID of its terminal notice.
type finalRequest struct {
	id, tenant string
	seq        int64
	lastID     string
	reply      chan *sbv1.ExecutionState
}

// FinalState returns a copy of the state the execution ended in, when this engine holds it
// at the terminal notice's head (seq and the id of its last event) and of tenant; nil
// otherwise, and the caller reads the state from the statebuilder.
func (e *Engine) FinalState(ctx context.Context, id, tenant string, seq int64, lastID string) *sbv1.ExecutionState {
	if id == "" || seq <= 0 || lastID == "" {
		return nil
	}
	r := &finalRequest{id: id, tenant: tenant, seq: seq, lastID: lastID, reply: make(chan *sbv1.ExecutionState, 1)}
	e.shardsMu.RLock()
	shards := e.shards
	queued := false
	if shards != nil {
		select {
		case shards[shardOf(id, len(shards))].in <- notice{final: r}:
			queued = true
		case <-ctx.Done():
		}
	}
	e.shardsMu.RUnlock()
	var st *sbv1.ExecutionState
	if queued {
		select {
		case st = <-r.reply:
		case <-ctx.Done():
		}
	}
	if e.finals != nil {
		answer := "held"
		if st == nil {
			answer = "not_held"
		}
		e.finals.WithLabelValues(answer).Inc()
	}
	return st
}

// final answers r on the execution's shard goroutine.
func (s *shard) final(r *finalRequest) *sbv1.ExecutionState {
	st := s.states.get(r.id)
	if st == nil || st.GetSeq() != r.seq {
		st = s.ended.get(r.id)
	}
	if st == nil || st.GetSeq() != r.seq || st.GetLastEventId() != r.lastID || !domain.IsTerminalStatus(st.GetStatus()) ||
		(r.tenant != "" && st.GetTenant() != r.tenant) {
		return nil
	}
	return proto.Clone(st).(*sbv1.ExecutionState)
}
