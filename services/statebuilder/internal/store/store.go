// Package store rebuilds execution state from the event log incrementally: each cached
// state is advanced by reading only the events after its seq, and the cache is bounded.
package store

import (
	"container/list"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
)

// Store serves StateService.
type Store struct {
	sbv1.UnimplementedStateServiceServer

	db  *pgxpool.Pool
	max int

	mu    sync.Mutex
	lru   *list.List
	items map[string]*list.Element

	hits, misses prometheus.Counter
}

type entry struct {
	id    string
	mu    sync.Mutex
	state *sbv1.ExecutionState
}

// New returns a store caching at most maxEntries states.
func New(db *pgxpool.Pool, maxEntries int, reg prometheus.Registerer) *Store {
	if maxEntries <= 0 {
		maxEntries = 10000
	}
	s := &Store{db: db, max: maxEntries, lru: list.New(), items: map[string]*list.Element{},
		hits:   prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_statebuilder_cache_hits_total", Help: "GetState served from a cached state."}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_statebuilder_cache_misses_total", Help: "GetState that rebuilt a state from the log."}),
	}
	reg.MustRegister(s.hits, s.misses)
	return s
}

func (s *Store) entry(id string) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.items[id]; ok {
		s.lru.MoveToFront(el)
		s.hits.Inc()
		return el.Value.(*entry)
	}
	s.misses.Inc()
	e := &entry{id: id, state: domain.NewState(id)}
	s.items[id] = s.lru.PushFront(e)
	for s.lru.Len() > s.max {
		old := s.lru.Back()
		s.lru.Remove(old)
		delete(s.items, old.Value.(*entry).id)
	}
	return e
}

func (s *Store) drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.items[id]; ok {
		s.lru.Remove(el)
		delete(s.items, id)
	}
}

const readPage = 5000

// GetState returns the state of an execution at seq >= min_seq.
func (s *Store) GetState(ctx context.Context, req *sbv1.GetStateRequest) (*sbv1.GetStateResponse, error) {
	id := req.GetExecutionId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "execution_id: required")
	}
	e := s.entry(id)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state.GetSeq() < req.GetMinSeq() || req.GetMinSeq() == 0 {
		if err := s.advance(ctx, e); err != nil {
			s.drop(id)
			if errors.Is(err, domain.ErrGap) {
				return nil, status.Errorf(codes.Unavailable, "execution %s: %v; retry", id, err)
			}
			return nil, err
		}
	}
	st := e.state
	if st.GetSeq() == 0 || (req.GetTenant() != "" && st.GetTenant() != req.GetTenant()) {
		s.drop(id)
		return nil, status.Errorf(codes.NotFound, "execution %s not found", id)
	}
	if st.GetSeq() < req.GetMinSeq() {
		return nil, status.Errorf(codes.Unavailable, "execution %s: log at seq %d, behind requested seq %d; retry", id, st.GetSeq(), req.GetMinSeq())
	}
	return &sbv1.GetStateResponse{State: proto.Clone(st).(*sbv1.ExecutionState)}, nil
}

// advance folds the events after the cached seq.
func (s *Store) advance(ctx context.Context, e *entry) error {
	for {
		rows, err := s.db.Query(ctx, `SELECT seq, committed_at, body FROM noetl.event WHERE execution_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, e.id, e.state.GetSeq(), readPage)
		if err != nil {
			return err
		}
		n := 0
		for rows.Next() {
			ev, err := scanEvent(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("event of %s after seq %d: %w", e.id, e.state.GetSeq(), err)
			}
			if err := domain.Apply(e.state, ev); err != nil {
				rows.Close()
				e.state = domain.NewState(e.id)
				return err
			}
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if n < readPage {
			return nil
		}
	}
}

// ListEvents returns a page of events in seq order.
func (s *Store) ListEvents(ctx context.Context, req *sbv1.ListEventsRequest) (*sbv1.ListEventsResponse, error) {
	id := req.GetExecutionId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "execution_id: required")
	}
	var tenant string
	err := s.db.QueryRow(ctx, `SELECT tenant FROM noetl.execution WHERE execution_id = $1`, id).Scan(&tenant)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && req.GetTenant() != "" && tenant != req.GetTenant()) {
		return nil, status.Errorf(codes.NotFound, "execution %s not found", id)
	}
	if err != nil {
		return nil, err
	}
	n := int(req.GetPageSize())
	if n <= 0 {
		n = 100
	}
	if n > 1000 {
		n = 1000
	}
	rows, err := s.db.Query(ctx, `SELECT seq, committed_at, body FROM noetl.event WHERE execution_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, id, req.GetAfterSeq(), n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	resp := &sbv1.ListEventsResponse{}
	expect := req.GetAfterSeq() + 1
	for rows.Next() {
		ev, err := scanEvent(rows)
		if err != nil {
			return nil, err
		}
		if ev.GetSeq() != expect {
			return nil, status.Errorf(codes.Unavailable, "execution %s: gap in log at seq %d; retry", id, expect)
		}
		expect++
		resp.Events = append(resp.Events, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(resp.Events) == n {
		resp.NextAfterSeq = resp.Events[len(resp.Events)-1].GetSeq()
	}
	return resp, nil
}

// ListExecutions returns executions newest first with keyset paging.
func (s *Store) ListExecutions(ctx context.Context, req *sbv1.ListExecutionsRequest) (*sbv1.ListExecutionsResponse, error) {
	n := int(req.GetPageSize())
	if n <= 0 {
		n = 50
	}
	if n > 500 {
		n = 500
	}
	afterTime := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	afterID := ""
	if tok := req.GetPageToken(); tok != "" {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		parts := strings.SplitN(string(raw), "|", 2)
		if err != nil || len(parts) != 2 {
			return nil, status.Error(codes.InvalidArgument, "page_token: malformed")
		}
		t, err := time.Parse(time.RFC3339Nano, parts[0])
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, "page_token: malformed")
		}
		afterTime, afterID = t, parts[1]
	}
	rows, err := s.db.Query(ctx, `SELECT execution_id, tenant, playbook_path, playbook_version, status, last_seq, started_at, ended_at, parent_execution_id
		FROM noetl.execution
		WHERE ($1 = '' OR tenant = $1) AND ($2 = 0 OR status = $2) AND ($3 = '' OR playbook_path = $3)
		  AND ($7 = '' OR parent_execution_id = $7)
		  AND (started_at, execution_id) < ($4, $5)
		ORDER BY started_at DESC, execution_id DESC LIMIT $6`,
		req.GetTenant(), int16(req.GetStatus()), req.GetPlaybookPath(), afterTime, afterIDOrMax(afterID), n, req.GetParentExecutionId())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	resp := &sbv1.ListExecutionsResponse{}
	var lastStart time.Time
	for rows.Next() {
		var x sbv1.ExecutionSummary
		var st int16
		var started time.Time
		var ended *time.Time
		if err := rows.Scan(&x.ExecutionId, &x.Tenant, &x.PlaybookPath, &x.PlaybookVersion, &st, &x.LastSeq, &started, &ended, &x.ParentExecutionId); err != nil {
			return nil, err
		}
		x.Status = eventv1.ExecutionStatus(st)
		x.StartTime = timestamppb.New(started)
		if ended != nil {
			x.EndTime = timestamppb.New(*ended)
		}
		lastStart = started
		resp.Executions = append(resp.Executions, &x)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(resp.Executions) == n {
		last := resp.Executions[len(resp.Executions)-1]
		resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(lastStart.UTC().Format(time.RFC3339Nano) + "|" + last.GetExecutionId()))
	}
	return resp, nil
}

func afterIDOrMax(id string) string {
	if id == "" {
		return "\U0010FFFF"
	}
	return id
}

// scanEvent decodes a (seq, committed_at, body) row; seq and commit time live in columns.
func scanEvent(rows pgx.Rows) (*eventv1.Event, error) {
	var seq int64
	var committed time.Time
	var body []byte
	if err := rows.Scan(&seq, &committed, &body); err != nil {
		return nil, err
	}
	ev := &eventv1.Event{}
	if err := proto.Unmarshal(body, ev); err != nil {
		return nil, fmt.Errorf("seq %d: %w", seq, err)
	}
	ev.Seq = seq
	ev.CommitTime = timestamppb.New(committed)
	return ev, nil
}

// ListDueTimers returns unfired timers due now (by the database clock) and the due time of
// the next one.
func (s *Store) ListDueTimers(ctx context.Context, req *sbv1.ListDueTimersRequest) (*sbv1.ListDueTimersResponse, error) {
	n := int(req.GetLimit())
	if n <= 0 || n > 5000 {
		n = 500
	}
	rows, err := s.db.Query(ctx, `SELECT execution_id, tenant, timer_id, step, due_at FROM noetl.timer
		WHERE NOT fired AND due_at <= now() ORDER BY due_at LIMIT $1`, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	resp := &sbv1.ListDueTimersResponse{}
	for rows.Next() {
		var t sbv1.Timer
		var due time.Time
		if err := rows.Scan(&t.ExecutionId, &t.Tenant, &t.TimerId, &t.Step, &due); err != nil {
			return nil, err
		}
		t.DueTime = timestamppb.New(due)
		resp.Timers = append(resp.Timers, &t)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var next *time.Time
	if err := s.db.QueryRow(ctx, `SELECT min(due_at) FROM noetl.timer WHERE NOT fired AND due_at > now()`).Scan(&next); err != nil {
		return nil, err
	}
	if next != nil {
		resp.NextDueTime = timestamppb.New(*next)
	}
	return resp, nil
}
