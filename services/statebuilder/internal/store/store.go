// Package store rebuilds execution state from the event log incrementally: each cached
// state is advanced by reading only the events after its seq, and the cache is bounded. A
// terminal state is served only while its execution exists (retention may have purged it
// since it was cached). An execution's head (tenant, status, last seq) is read from its
// row, without the cache.
package store

import (
	"container/list"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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

	db       *pgxpool.Pool
	max      int
	maxBytes int64
	// snapshotEvery is how many events may follow the last snapshot before a new one is
	// written, so a cold rebuild reads at most that many events.
	snapshotEvery int64

	mu    sync.Mutex
	lru   *list.List
	items map[string]*list.Element
	bytes int64

	hits, misses, snapshotReads, snapshotWrites, evictions prometheus.Counter
	cacheBytes, cacheEntries                               prometheus.Gauge
}

type entry struct {
	id    string
	mu    sync.Mutex
	state *sbv1.ExecutionState
	// size is the state's encoded size as last accounted in Store.bytes.
	size int64
	// snapSeq is the seq of the last snapshot persisted for this execution.
	snapSeq int64
	// loaded is set once the snapshot (if any) was read.
	loaded bool
}

// Options tune a Store.
type Options struct {
	// MaxEntries bounds the number of cached states (default 10,000).
	MaxEntries int
	// MaxBytes bounds the encoded size of cached states (default 256 MiB).
	MaxBytes int64
	// SnapshotEvery is the number of events between snapshots (default 1,000).
	SnapshotEvery int64
}

// New returns a store.
func New(db *pgxpool.Pool, opt Options, reg prometheus.Registerer) *Store {
	if opt.MaxEntries <= 0 {
		opt.MaxEntries = 10000
	}
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = 256 << 20
	}
	if opt.SnapshotEvery <= 0 {
		opt.SnapshotEvery = 1000
	}
	s := &Store{db: db, max: opt.MaxEntries, maxBytes: opt.MaxBytes, snapshotEvery: opt.SnapshotEvery, lru: list.New(), items: map[string]*list.Element{},
		hits:           prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_statebuilder_cache_hits_total", Help: "GetState served from a cached state."}),
		misses:         prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_statebuilder_cache_misses_total", Help: "GetState that rebuilt a state from a snapshot and the log."}),
		snapshotReads:  prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_statebuilder_snapshot_reads_total", Help: "Cold rebuilds that started from a snapshot."}),
		snapshotWrites: prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_statebuilder_snapshot_writes_total", Help: "Snapshots persisted."}),
		cacheBytes:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "noetl_statebuilder_cache_bytes", Help: "Encoded size of the cached states."}),
		cacheEntries:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "noetl_statebuilder_cache_entries", Help: "Cached execution states."}),
		evictions:      prometheus.NewCounter(prometheus.CounterOpts{Name: "noetl_statebuilder_cache_evictions_total", Help: "States evicted from the cache to keep it within its bounds."}),
	}
	reg.MustRegister(s.hits, s.misses, s.snapshotReads, s.snapshotWrites, s.cacheBytes, s.cacheEntries, s.evictions)
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
	s.evictLocked()
	return e
}

// account records the new encoded size of an entry and evicts least recently used
// states while the cache is over its bounds.
func (s *Store) account(e *entry, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.items[e.id]; !ok {
		return // evicted meanwhile
	}
	s.bytes += size - e.size
	e.size = size
	s.evictLocked()
}

func (s *Store) evictLocked() {
	for s.lru.Len() > 1 && (s.lru.Len() > s.max || s.bytes > s.maxBytes) {
		old := s.lru.Back()
		s.lru.Remove(old)
		oe := old.Value.(*entry)
		delete(s.items, oe.id)
		s.bytes -= oe.size
		s.evictions.Inc()
	}
	s.cacheBytes.Set(float64(s.bytes))
	s.cacheEntries.Set(float64(s.lru.Len()))
}

func (s *Store) drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.items[id]; ok {
		s.lru.Remove(el)
		delete(s.items, id)
		s.bytes -= el.Value.(*entry).size
		s.cacheBytes.Set(float64(s.bytes))
		s.cacheEntries.Set(float64(s.lru.Len()))
	}
}

// RunningExecutions counts the executions that are not terminal yet.
func (s *Store) RunningExecutions(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.QueryRow(ctx, `SELECT count(*) FROM noetl.execution WHERE status = $1`, int16(eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING)).Scan(&n)
	return n, err
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
	// read counts the events this call read from the log: at least one means the
	// execution was in the log at that read, within this call.
	read, cold := 0, !e.loaded
	if e.state.GetSeq() < req.GetMinSeq() || req.GetMinSeq() == 0 {
		var err error
		if read, err = s.advance(ctx, e); err != nil {
			s.drop(id)
			if errors.Is(err, domain.ErrGap) {
				return nil, status.Errorf(codes.Unavailable, "execution %s: %v; retry", id, err)
			}
			return nil, err
		}
	}
	st := e.state
	if read > 0 || cold {
		// Only a snapshot's load or a fold changes the state's size; a read of the cached
		// state leaves it.
		s.account(e, int64(proto.Size(st)))
	}
	if st.GetSeq()-e.snapSeq >= s.snapshotEvery {
		if err := s.snapshot(ctx, e); err != nil {
			return nil, err
		}
	}
	gone := false
	if st.GetSeq() > 0 && domain.IsTerminalStatus(st.GetStatus()) && read == 0 {
		// Retention may have purged it since it was cached (by another replica's
		// request, too): a terminal state is served only while its execution exists.
		// Events this call read prove it did: retention deletes an execution's row and
		// its events in one transaction (noetl.purge_executions).
		var err error
		if gone, err = s.purged(ctx, id); err != nil {
			return nil, err
		}
	}
	if gone || st.GetSeq() == 0 || (req.GetTenant() != "" && st.GetTenant() != req.GetTenant()) {
		s.drop(id)
		return nil, status.Errorf(codes.NotFound, "execution %s not found", id)
	}
	if st.GetSeq() < req.GetMinSeq() {
		return nil, status.Errorf(codes.Unavailable, "execution %s: log at seq %d, behind requested seq %d; retry", id, st.GetSeq(), req.GetMinSeq())
	}
	return &sbv1.GetStateResponse{State: proto.Clone(st).(*sbv1.ExecutionState)}, nil
}

// GetExecutionHead returns an execution's tenant, status and last seq from its row in
// noetl.execution, which the materializer updates in the transaction that commits the
// events: no fold, no cache. An execution of another tenant, or one retention purged, is
// not found, as in GetState.
func (s *Store) GetExecutionHead(ctx context.Context, req *sbv1.GetExecutionHeadRequest) (*sbv1.GetExecutionHeadResponse, error) {
	id := req.GetExecutionId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "execution_id: required")
	}
	var resp sbv1.GetExecutionHeadResponse
	var st int16
	err := s.db.QueryRow(ctx, `SELECT tenant, status, last_seq FROM noetl.execution WHERE execution_id = $1`, id).Scan(&resp.Tenant, &st, &resp.LastSeq)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && (resp.GetLastSeq() == 0 || (req.GetTenant() != "" && resp.GetTenant() != req.GetTenant()))) {
		return nil, status.Errorf(codes.NotFound, "execution %s not found", id)
	}
	if err != nil {
		return nil, err
	}
	resp.Status = eventv1.ExecutionStatus(st)
	return &resp, nil
}

// snapshot persists an entry's state so a cold rebuild reads at most snapshotEvery events.
func (s *Store) snapshot(ctx context.Context, e *entry) error {
	body, err := proto.Marshal(e.state)
	if err != nil {
		return err
	}
	if _, err := s.db.Exec(ctx, `INSERT INTO noetl.state_snapshot (execution_id, seq, body, updated_at) VALUES ($1, $2, $3, now())
		ON CONFLICT (execution_id) DO UPDATE SET seq = EXCLUDED.seq, body = EXCLUDED.body, updated_at = now()
		WHERE noetl.state_snapshot.seq < EXCLUDED.seq`, e.id, e.state.GetSeq(), body); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	e.snapSeq = e.state.GetSeq()
	s.snapshotWrites.Inc()
	return nil
}

// advance folds the events after the cached seq, starting a cold entry from its latest
// snapshot, and returns how many events it read from the log.
func (s *Store) advance(ctx context.Context, e *entry) (read int, err error) {
	if !e.loaded {
		// A cold state: its snapshot, if any, and the first page of events after it, in one
		// round trip (a statement's snapshot sees one state_snapshot row for both parts).
		n, err := s.load(ctx, e)
		if err != nil || n < readPage {
			return n, err
		}
		read = n
	}
	for {
		rows, err := s.db.Query(ctx, `SELECT seq, committed_at, body FROM noetl.event WHERE execution_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, e.id, e.state.GetSeq(), readPage)
		if err != nil {
			return read, err
		}
		n, err := s.fold(e, rows)
		read += n
		if err != nil || n < readPage {
			return read, err
		}
	}
}

// WarmReads are the reads a new connection of the statebuilder's pool makes before it
// serves calls (pgxext.WarmUp): one by a key no row has in each table the store reads
// (executions, the log, state snapshots).
var WarmReads = []string{
	`SELECT 1 FROM noetl.execution WHERE execution_id = ''`,
	`SELECT 1 FROM noetl.event WHERE execution_id = '' AND seq = 0`,
	`SELECT 1 FROM noetl.state_snapshot WHERE execution_id = ''`,
}

// sqlLoad reads an execution's snapshot (part 0, at most one row) and the first $2 events
// after it (part 1), in seq order.
const sqlLoad = `SELECT 0 AS part, s.seq, NULL::timestamptz, s.body FROM noetl.state_snapshot s WHERE s.execution_id = $1
	UNION ALL
	(SELECT 1, e.seq, e.committed_at, e.body FROM noetl.event e
	  WHERE e.execution_id = $1 AND e.seq > coalesce((SELECT seq FROM noetl.state_snapshot WHERE execution_id = $1), 0)
	  ORDER BY e.seq LIMIT $2)
	ORDER BY part, seq`

// load brings a cold entry to its snapshot and folds the first page of events after it
// (sqlLoad), returning how many events it folded.
func (s *Store) load(ctx context.Context, e *entry) (int, error) {
	rows, err := s.db.Query(ctx, sqlLoad, e.id, readPage)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var part int
		var seq int64
		var committed *time.Time // NULL in the snapshot's row only
		var body []byte
		if err := rows.Scan(&part, &seq, &committed, &body); err != nil {
			return n, err
		}
		if part == 0 {
			st := &sbv1.ExecutionState{}
			if err := proto.Unmarshal(body, st); err != nil {
				return 0, fmt.Errorf("snapshot of %s: %w", e.id, err)
			}
			if st.GetSeq() != seq {
				return 0, fmt.Errorf("snapshot of %s: body at seq %d, row at %d", e.id, st.GetSeq(), seq)
			}
			e.state, e.snapSeq = st, seq
			s.snapshotReads.Inc()
			continue
		}
		ev, err := decodeEvent(seq, *committed, body)
		if err := s.foldOne(e, ev, err); err != nil {
			return n, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	e.loaded = true
	return n, nil
}

// fold applies the events of rows (seq, committed_at, body, in seq order) to e's state and
// returns how many it applied.
func (s *Store) fold(e *entry, rows pgx.Rows) (int, error) {
	defer rows.Close()
	n := 0
	for rows.Next() {
		ev, _, err := scanEvent(rows)
		if err := s.foldOne(e, ev, err); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

// foldOne applies ev, read with err, to e's state; an event that does not fold leaves the
// entry cold again.
func (s *Store) foldOne(e *entry, ev *eventv1.Event, err error) error {
	if err != nil {
		return fmt.Errorf("event of %s after seq %d: %w", e.id, e.state.GetSeq(), err)
	}
	if err := domain.Apply(e.state, ev); err != nil {
		e.state, e.loaded, e.snapSeq = domain.NewState(e.id), false, 0
		return err
	}
	return nil
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
	if req.GetStep() != "" || len(req.GetTypes()) > 0 {
		return s.listFiltered(ctx, req, n)
	}
	upTo := req.GetUpToSeq()
	if upTo <= 0 {
		upTo = math.MaxInt64
	}
	q, args := boundedPage(`SELECT seq, committed_at, body FROM noetl.event WHERE execution_id = $1 AND seq > $2 AND seq <= $3 ORDER BY seq LIMIT $4`,
		req.GetMaxBytes(), id, req.GetAfterSeq(), upTo, n)
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	resp := &sbv1.ListEventsResponse{}
	expect := req.GetAfterSeq() + 1
	page := pageBound{events: n, bytes: int(req.GetMaxBytes())}
	for rows.Next() {
		ev, size, err := scanEvent(rows)
		if err != nil {
			return nil, err
		}
		if ev.GetSeq() != expect {
			return nil, status.Errorf(codes.Unavailable, "execution %s: gap in log at seq %d; retry", id, expect)
		}
		expect++
		resp.Events = append(resp.Events, ev)
		if page.full(len(resp.Events), size) {
			break
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if page.reached {
		resp.NextAfterSeq = resp.Events[len(resp.Events)-1].GetSeq()
	}
	return resp, nil
}

// boundedPage returns query (of (seq, committed_at, body) rows in seq order) and its
// args, wrapped, when maxBytes is set, so that Postgres sends only the rows up to the one
// that brings their bodies to maxBytes (pageBound ends the page at the same row); an
// unbounded page is the query as it is.
func boundedPage(query string, maxBytes int32, args ...any) (string, []any) {
	if maxBytes <= 0 {
		return query, args
	}
	n := len(args) + 1
	return fmt.Sprintf(`SELECT seq, committed_at, body FROM (
		SELECT seq, committed_at, body, sum(octet_length(body)) OVER (ORDER BY seq) - octet_length(body) AS before FROM (%s) page
	) sized WHERE before < $%d ORDER BY seq`, query, n), append(args, maxBytes)
}

// pageBound ends a page of events at page_size events or, when max_bytes is set, after
// the event that brings the page's bodies to max_bytes.
type pageBound struct {
	events, bytes int
	sum           int
	// reached reports that the page ended at a bound, so more events may follow.
	reached bool
}

// full takes the size of the page's latest event (its count) and reports whether the page
// ends with it.
func (b *pageBound) full(count, size int) bool {
	b.sum += size
	b.reached = count >= b.events || (b.bytes > 0 && b.sum >= b.bytes)
	return b.reached
}

// listFiltered returns a page of the events of one step and/or of some types. Postgres
// skips the others, so a reader of a few events of a long log does not receive the rest;
// the range the page covers is checked to have no gap by counting its rows.
func (s *Store) listFiltered(ctx context.Context, req *sbv1.ListEventsRequest, n int) (*sbv1.ListEventsResponse, error) {
	id, after := req.GetExecutionId(), req.GetAfterSeq()
	// Without an upper seq the page may reach the end of the log; with one past the end,
	// the range count below reports the missing events as a gap (retry later).
	upTo := req.GetUpToSeq()
	if upTo <= 0 {
		if err := s.db.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM noetl.event WHERE execution_id = $1`, id).Scan(&upTo); err != nil {
			return nil, err
		}
	}
	q, args := boundedPage(`SELECT seq, committed_at, body FROM noetl.event
		WHERE execution_id = $1 AND seq > $2 AND seq <= $3 AND ($4 = '' OR step = $4) AND (cardinality($5::text[]) = 0 OR type = ANY($5))
		ORDER BY seq LIMIT $6`, req.GetMaxBytes(), id, after, upTo, req.GetStep(), req.GetTypes(), n)
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	resp := &sbv1.ListEventsResponse{}
	page := pageBound{events: n, bytes: int(req.GetMaxBytes())}
	for rows.Next() {
		ev, size, err := scanEvent(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		resp.Events = append(resp.Events, ev)
		if page.full(len(resp.Events), size) {
			break
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	covered := upTo
	if page.reached {
		covered = resp.Events[len(resp.Events)-1].GetSeq()
		resp.NextAfterSeq = covered
	}
	var count int64
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM noetl.event WHERE execution_id = $1 AND seq > $2 AND seq <= $3`, id, after, covered).Scan(&count); err != nil {
		return nil, err
	}
	if count != covered-after {
		return nil, status.Errorf(codes.Unavailable, "execution %s: gap in log between seq %d and %d; retry", id, after, covered)
	}
	return resp, nil
}

// listExecutionsSQL is the page query of ListExecutions (arguments: listArgs). Within a
// tenant it walks the index execution_tenant_started from the page token's key, so a page
// reads about its own rows however many executions the tenant has.
const listExecutionsSQL = `SELECT execution_id, tenant, playbook_path, playbook_version, status, last_seq, started_at, ended_at, parent_execution_id, labels
		FROM noetl.execution
		WHERE ($1 = '' OR tenant = $1) AND ($2 = 0 OR status = $2) AND ($3 = '' OR playbook_path = $3)
		  AND ($7 = '' OR parent_execution_id = $7)
		  AND ($8::timestamptz IS NULL OR updated_at < $8)
		  AND ($9::timestamptz IS NULL OR started_at >= $9)
		  AND ($10::timestamptz IS NULL OR started_at < $10)
		  AND ($11::text = '' OR labels @> $11::text::jsonb)
		  AND (started_at, execution_id) < ($4, $5)
		ORDER BY started_at DESC, execution_id DESC LIMIT $6`

// listArgs are the arguments of listExecutionsSQL for req, and its page size.
func listArgs(req *sbv1.ListExecutionsRequest) ([]any, int, error) {
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
			return nil, 0, status.Error(codes.InvalidArgument, "page_token: malformed")
		}
		t, err := time.Parse(time.RFC3339Nano, parts[0])
		if err != nil {
			return nil, 0, status.Error(codes.InvalidArgument, "page_token: malformed")
		}
		afterTime, afterID = t, parts[1]
	}
	labels := ""
	if len(req.GetLabels()) > 0 {
		b, err := json.Marshal(req.GetLabels())
		if err != nil {
			return nil, 0, err
		}
		labels = string(b)
	}
	return []any{req.GetTenant(), int16(req.GetStatus()), req.GetPlaybookPath(), afterTime, afterIDOrMax(afterID), n, req.GetParentExecutionId(), updatedBefore(req),
		optTime(req.GetStartedAfter()), optTime(req.GetStartedBefore()), labels}, n, nil
}

// ListExecutions returns executions newest first with keyset paging.
func (s *Store) ListExecutions(ctx context.Context, req *sbv1.ListExecutionsRequest) (*sbv1.ListExecutionsResponse, error) {
	args, n, err := listArgs(req)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, listExecutionsSQL, args...)
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
		var labels []byte
		if err := rows.Scan(&x.ExecutionId, &x.Tenant, &x.PlaybookPath, &x.PlaybookVersion, &st, &x.LastSeq, &started, &ended, &x.ParentExecutionId, &labels); err != nil {
			return nil, err
		}
		if len(labels) > 2 {
			if err := json.Unmarshal(labels, &x.Labels); err != nil {
				return nil, fmt.Errorf("execution %s: labels: %w", x.ExecutionId, err)
			}
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
func scanEvent(rows pgx.Rows) (*eventv1.Event, int, error) {
	var seq int64
	var committed time.Time
	var body []byte
	if err := rows.Scan(&seq, &committed, &body); err != nil {
		return nil, 0, err
	}
	ev, err := decodeEvent(seq, committed, body)
	return ev, len(body), err
}

// decodeEvent is the event of a log row.
func decodeEvent(seq int64, committed time.Time, body []byte) (*eventv1.Event, error) {
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

func updatedBefore(req *sbv1.ListExecutionsRequest) *time.Time {
	return optTime(req.GetUpdatedBefore())
}

// optTime is ts as a time, nil when ts is unset (a query argument that turns a filter off).
func optTime(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime()
	return &t
}
