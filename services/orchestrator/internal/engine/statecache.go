package engine

import (
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/services/orchestrator/internal/decide"
)

// stateCache holds the execution states one shard decided on, each advanced by the events
// committed after it: the events a commit notice carries (the common case, no read at
// all), or the log's events after the state's seq read from the statebuilder. It is
// derived from the log, never authoritative: a state that cannot be advanced gap-free is
// dropped, and the next decision reads the state afresh.
//
// Only the shard's goroutine touches it. It is bounded in bytes: a state's size is
// counted when it is cached, plus the size of every event folded into it since, and past
// the budget the whole cache is dropped (a full state read per execution rebuilds it).
type stateCache struct {
	budget  int64
	bytes   int64
	entries map[string]*cachedState
}

type cachedState struct {
	st    *sbv1.ExecutionState
	bytes int64
	// spec lists the events folded into st before they were committed (inline.go), in
	// seq order: each is confirmed, and forgotten, by the commit notice that carries it or
	// by the next request to decide inside a commit, which names the head they lead to.
	spec []specEvent
	// active follows st's active steps as events are folded into it (folded), so that a
	// decision on a long execution does not walk all its steps.
	active decide.ActiveIndex
}

// specEvent is an event folded before its commit: its seq and id.
type specEvent struct {
	seq int64
	id  string
}

func newStateCache(budget int64) *stateCache {
	return &stateCache{budget: budget, entries: map[string]*cachedState{}}
}

// get returns the cached state of an execution, or nil.
func (c *stateCache) get(id string) *sbv1.ExecutionState {
	if e := c.entries[id]; e != nil {
		return e.st
	}
	return nil
}

// put caches st, dropping the whole cache first when it would pass its budget.
func (c *stateCache) put(st *sbv1.ExecutionState) {
	c.drop(st.GetExecutionId())
	n := int64(proto.Size(st))
	if c.bytes+n > c.budget {
		clear(c.entries)
		c.bytes = 0
	}
	if n > c.budget {
		return
	}
	c.entries[st.GetExecutionId()] = &cachedState{st: st, bytes: n}
	c.bytes += n
}

// folded notes that ev was folded into st, the cached state of its execution (nothing
// when st is not the one cached).
func (c *stateCache) folded(st *sbv1.ExecutionState, ev *eventv1.Event) {
	if e := c.entries[st.GetExecutionId()]; e != nil && e.st == st {
		e.active.Folded(st, ev)
	}
}

// activeOf is st's decide.Active: from the index of its cache entry when st is the cached
// state, else from a walk of its steps.
func activeOf(s *shard, st *sbv1.ExecutionState) *decide.Active {
	if s != nil {
		if e := s.states.entries[st.GetExecutionId()]; e != nil && e.st == st {
			return e.active.Of(st)
		}
	}
	return decide.ActiveOf(st)
}

// take forgets an execution's state and returns it with its counted size (nil, 0 when
// none is cached).
func (c *stateCache) take(id string) (*sbv1.ExecutionState, int64) {
	e := c.entries[id]
	if e == nil {
		return nil, 0
	}
	c.drop(id)
	return e.st, e.bytes
}

// drop forgets an execution's state.
func (c *stateCache) drop(id string) {
	if e := c.entries[id]; e != nil {
		c.bytes -= e.bytes
		delete(c.entries, id)
	}
}

// speculate records that the event of id eventID was folded into the execution's cached
// state at seq before it was committed (n is its size, counted as grew does). Past
// maxSpeculated unconfirmed events the state is dropped.
func (c *stateCache) speculate(execID string, seq int64, eventID string, n int64) {
	e := c.entries[execID]
	if e == nil {
		return
	}
	if len(e.spec) >= maxSpeculated {
		c.drop(execID)
		return
	}
	e.spec = append(e.spec, specEvent{seq: seq, id: eventID})
	c.grew(execID, n)
}

// confirmed forgets the execution's speculated events: a request to decide inside a
// commit named, as the log's head under its lock or as its writer last committed it, the
// seq and last event id the cached state stands at, so the log holds them.
func (c *stateCache) confirmed(execID string) {
	if e := c.entries[execID]; e != nil {
		e.spec = e.spec[:0]
	}
}

// speculative reports whether the execution's cached state holds unconfirmed events.
func (c *stateCache) speculative(execID string) bool {
	e := c.entries[execID]
	return e != nil && len(e.spec) > 0
}

// confirm checks the entry's speculated events up to seq upTo against the events a notice
// carries: each must be carried, with the same id. It forgets those it confirmed and
// reports false on the first one the notice contradicts or does not carry.
func (e *cachedState) confirm(evs []*eventv1.Event, upTo int64) bool {
	k := 0
	for k < len(e.spec) && e.spec[k].seq <= upTo {
		sp := e.spec[k]
		ok := false
		if len(evs) > 0 {
			if i := sp.seq - evs[0].GetSeq(); i >= 0 && i < int64(len(evs)) && evs[i].GetSeq() == sp.seq {
				ok = evs[i].GetEventId() == sp.id
			}
		}
		if !ok {
			return false
		}
		k++
	}
	e.spec = e.spec[k:]
	return true
}

// confirmHead confirms, and forgets, the entry's speculated events up to seq when the
// state speculated the event lastID at exactly seq: a notice names as the log's head (seq
// and the id of its event there) an event this state folded at that seq, so the commits
// up to it went as the state speculated them, by the argument that lets a request to
// decide inside a commit confirm a state (confirmed). A notice of a commit too large to
// carry its events (a wide fan-out's start) so keeps the state, which confirm, finding
// none of them carried, would drop. It reports whether it confirmed; an entry speculated
// at seq with another id, or none there, confirms nothing.
func (e *cachedState) confirmHead(seq int64, lastID string) bool {
	if lastID == "" {
		return false // a notice from before notices named their head
	}
	for k, sp := range e.spec {
		if sp.seq == seq {
			if sp.id != lastID {
				return false
			}
			e.spec = e.spec[k+1:]
			return true
		}
	}
	return false
}

// grew counts n more bytes folded into an execution's cached state.
func (c *stateCache) grew(id string, n int64) {
	e := c.entries[id]
	if e == nil {
		return
	}
	e.bytes += n
	c.bytes += n
	if c.bytes > c.budget {
		clear(c.entries)
		c.bytes = 0
	}
}

// applyCarried folds the events a commit notice carries into the execution's cached state,
// those after its seq, or builds the state from them when they start at the execution's
// first event; it reports whether the state now stands at the notice's seq (or past it,
// on events it speculated). Events the state speculated (inline.go) are confirmed first:
// by the notice's head (confirmHead), or else against the carried events. A state the
// events do not continue gap-free (a notice this replica did not receive, a batch too
// large to be carried) is left as it is, to be advanced from the log; one the fold
// refuses is dropped.
//
// size is the notice's encoded size: what the state grows by is counted as that, an upper
// bound of its events' size read off the message rather than measured event by event.
func (c *stateCache) applyCarried(n *eventv1.CommitNotice, size int64) bool {
	evs := n.GetEvents()
	e := c.entries[n.GetExecutionId()]
	if e != nil && len(e.spec) > 0 && !e.confirmHead(n.GetSeq(), n.GetLastEventId()) && !e.confirm(evs, n.GetSeq()) {
		c.drop(n.GetExecutionId()) // the log committed otherwise than speculated
		return false
	}
	st := c.get(n.GetExecutionId())
	if st == nil {
		// A notice from the execution's first event on (its start's) builds the state.
		if len(evs) == 0 || evs[0].GetSeq() != 1 || evs[len(evs)-1].GetSeq() != n.GetSeq() {
			return false
		}
		st = domain.NewState(n.GetExecutionId())
		for _, ev := range evs {
			if err := domain.Apply(st, ev); err != nil {
				return false
			}
		}
		c.put(st)
		return true
	}
	if st.GetSeq() >= n.GetSeq() {
		return true
	}
	if len(evs) == 0 || evs[0].GetSeq() > st.GetSeq()+1 || evs[len(evs)-1].GetSeq() != n.GetSeq() {
		return false
	}
	for _, ev := range evs {
		if ev.GetSeq() <= st.GetSeq() {
			continue
		}
		if err := domain.Apply(st, ev); err != nil {
			c.drop(n.GetExecutionId())
			return false
		}
		c.folded(st, ev)
	}
	c.grew(n.GetExecutionId(), size)
	return true
}
