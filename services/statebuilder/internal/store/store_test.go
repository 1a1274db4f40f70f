package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// insert writes events at the given seqs directly (as the materializer would).
func insert(t *testing.T, s *Store, exec string, seqs ...int64) {
	t.Helper()
	ctx := context.Background()
	_, err := s.db.Exec(ctx, `INSERT INTO noetl.execution (execution_id, tenant) VALUES ($1, 't') ON CONFLICT DO NOTHING`, exec)
	require.NoError(t, err)
	for _, seq := range seqs {
		ev := &eventv1.Event{EventId: fmt.Sprintf("e%d", seq), ExecutionId: exec, Tenant: "t", Type: domain.EventCtxUpdated, PayloadJson: []byte(fmt.Sprintf(`{"values":{"k%d":%d}}`, seq%7, seq))}
		if seq == 1 {
			ev.Type, ev.PayloadJson = domain.EventPlaybookStarted, []byte(`{"path":"p","version":1,"workload":{}}`)
		}
		body, err := proto.Marshal(ev)
		require.NoError(t, err)
		_, err = s.db.Exec(ctx, `INSERT INTO noetl.event (execution_id, seq, event_id, tenant, type, body) VALUES ($1,$2,$3,'t',$4,$5)`, exec, seq, ev.GetEventId(), ev.GetType(), body)
		require.NoError(t, err)
	}
}

func newStore(t *testing.T, url string, opt Options) *Store {
	db, err := pgxext.Open(context.Background(), url, 4)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return New(db, opt, prometheus.NewRegistry())
}

func seqs(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func TestSnapshotsBoundColdRebuilds(t *testing.T) {
	url := testkit.StartMigratedPostgres(t)
	ctx := context.Background()
	s := newStore(t, url, Options{SnapshotEvery: 10})
	insert(t, s, "x", seqs(1, 25)...)
	warm, err := s.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: "x"})
	require.NoError(t, err)
	require.Equal(t, int64(25), warm.GetState().GetSeq())
	require.Equal(t, 1.0, testutil.ToFloat64(s.snapshotWrites))

	// A cold store starts from the snapshot and reads only what follows it.
	insert(t, s, "x", seqs(26, 30)...)
	cold := newStore(t, url, Options{SnapshotEvery: 10})
	got, err := cold.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: "x", MinSeq: 30})
	require.NoError(t, err)
	require.Equal(t, 1.0, testutil.ToFloat64(cold.snapshotReads))
	full, err := s.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: "x", MinSeq: 30})
	require.NoError(t, err)
	require.True(t, proto.Equal(full.GetState(), got.GetState()), "snapshot + tail equals the incremental state")
}

// A cold read past one page of events (readPage) without a snapshot folds every page, and
// one from a snapshot plus more than a page after it does too: the first page comes with
// the snapshot (sqlLoad), the rest page by page.
func TestColdReadsFoldEveryPage(t *testing.T) {
	url := testkit.StartMigratedPostgres(t)
	ctx := context.Background()
	writer := newStore(t, url, Options{SnapshotEvery: 1 << 30})
	insert(t, writer, "long", seqs(1, readPage+3)...)
	cold := newStore(t, url, Options{SnapshotEvery: 1 << 30})
	got, err := cold.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: "long"})
	require.NoError(t, err)
	require.Equal(t, int64(readPage+3), got.GetState().GetSeq())
	require.Equal(t, 0.0, testutil.ToFloat64(cold.snapshotReads))

	snap := newStore(t, url, Options{SnapshotEvery: 2})
	_, err = snap.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: "long"}) // snapshots at readPage+3
	require.NoError(t, err)
	insert(t, writer, "long", seqs(readPage+4, 2*readPage+10)...)
	cold = newStore(t, url, Options{SnapshotEvery: 1 << 30})
	got, err = cold.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: "long"})
	require.NoError(t, err)
	require.Equal(t, int64(2*readPage+10), got.GetState().GetSeq())
	require.Equal(t, 1.0, testutil.ToFloat64(cold.snapshotReads))
	full, err := writer.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: "long"})
	require.NoError(t, err)
	require.True(t, proto.Equal(full.GetState(), got.GetState()), "snapshot + pages equals the incremental state")
}

func TestGapsAndStaleReadsAreRefused(t *testing.T) {
	url := testkit.StartMigratedPostgres(t)
	ctx := context.Background()
	s := newStore(t, url, Options{})
	insert(t, s, "g", 1, 2, 4)
	_, err := s.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: "g"})
	require.Equal(t, codes.Unavailable, status.Code(err), "a gap is an error, never a silent answer: %v", err)
	insert(t, s, "ok", 1, 2, 3)
	_, err = s.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: "ok", MinSeq: 9})
	require.Equal(t, codes.Unavailable, status.Code(err), "never older than min_seq")
	_, err = s.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: "nope"})
	require.Equal(t, codes.NotFound, status.Code(err))
	_, err = s.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: "ok", Tenant: "other"})
	require.Equal(t, codes.NotFound, status.Code(err), "another tenant's execution is not found")
}

func TestCacheStaysWithinItsByteBound(t *testing.T) {
	url := testkit.StartMigratedPostgres(t)
	ctx := context.Background()
	s := newStore(t, url, Options{MaxBytes: 1000})
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("b%d", i)
		insert(t, s, id, seqs(1, 20)...)
		_, err := s.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: id})
		require.NoError(t, err)
		require.LessOrEqual(t, testutil.ToFloat64(s.cacheBytes), 1000.0+float64(500), "bounded (one entry may exceed alone)")
	}
	require.Less(t, s.lru.Len(), 20, "older states were evicted (cache bytes %v)", testutil.ToFloat64(s.cacheBytes))
}

func TestFilteredEventPagesSkipOthersButNotGaps(t *testing.T) {
	url := testkit.StartMigratedPostgres(t)
	ctx := context.Background()
	s := newStore(t, url, Options{})
	insert(t, s, "f", seqs(1, 30)...)
	var got []int64
	req := &sbv1.ListEventsRequest{ExecutionId: "f", Types: []string{domain.EventCtxUpdated}, UpToSeq: 25, PageSize: 10}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		resp, err := s.ListEvents(ctx, req)
		require.NoError(t, err)
		for _, ev := range resp.GetEvents() {
			require.Equal(t, domain.EventCtxUpdated, ev.GetType())
			got = append(got, ev.GetSeq())
		}
		if resp.GetNextAfterSeq() == 0 {
			break
		}
		req.AfterSeq = resp.GetNextAfterSeq()
	}
	require.Equal(t, seqs(2, 25), got, "every ctx.updated up to seq 25, nothing else")
	resp, err := s.ListEvents(ctx, &sbv1.ListEventsRequest{ExecutionId: "f", Types: []string{domain.EventPlaybookStarted}})
	require.NoError(t, err)
	require.Len(t, resp.GetEvents(), 1)
	resp, err = s.ListEvents(ctx, &sbv1.ListEventsRequest{ExecutionId: "f", Step: "no-such-step"})
	require.NoError(t, err)
	require.Empty(t, resp.GetEvents())

	_, err = s.ListEvents(ctx, &sbv1.ListEventsRequest{ExecutionId: "f", Types: []string{domain.EventCtxUpdated}, UpToSeq: 40})
	require.Equal(t, codes.Unavailable, status.Code(err), "events up to a seq the log has not reached: %v", err)

	insert(t, s, "fg", 1, 2, 4, 5)
	_, err = s.ListEvents(ctx, &sbv1.ListEventsRequest{ExecutionId: "fg", Types: []string{domain.EventCtxUpdated}})
	require.Equal(t, codes.Unavailable, status.Code(err), "a gap under a filter is still an error: %v", err)
	resp, err = s.ListEvents(ctx, &sbv1.ListEventsRequest{ExecutionId: "fg", UpToSeq: 2})
	require.NoError(t, err)
	require.Len(t, resp.GetEvents(), 2, "up_to_seq bounds an unfiltered page too")
}

func TestEventPagesAreBoundedInBytes(t *testing.T) {
	url := testkit.StartMigratedPostgres(t)
	ctx := context.Background()
	s := newStore(t, url, Options{})
	insert(t, s, "b", seqs(1, 30)...)
	size := map[int64]int{}
	rows, err := s.db.Query(ctx, `SELECT seq, octet_length(body) FROM noetl.event WHERE execution_id = 'b'`)
	require.NoError(t, err)
	for rows.Next() {
		var seq int64
		var n int
		require.NoError(t, rows.Scan(&seq, &n))
		size[seq] = n
	}
	require.NoError(t, rows.Err())
	for _, tc := range []struct {
		name string
		req  *sbv1.ListEventsRequest
		from int64
	}{
		{"unfiltered", &sbv1.ListEventsRequest{ExecutionId: "b", PageSize: 1000}, 1},
		{"filtered", &sbv1.ListEventsRequest{ExecutionId: "b", PageSize: 1000, Types: []string{domain.EventCtxUpdated}}, 2},
	} {
		for _, bound := range []int32{1, 150, 400} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, bound), func(t *testing.T) {
				req := proto.Clone(tc.req).(*sbv1.ListEventsRequest)
				req.MaxBytes = bound
				var got []int64
				for pages := 0; ; pages++ {
					require.Less(t, pages, 31)
					resp, err := s.ListEvents(ctx, req)
					require.NoError(t, err)
					if len(resp.GetEvents()) == 0 {
						require.Zero(t, resp.GetNextAfterSeq(), "an empty page is the last")
						break // the page before ended at its bound with the last event
					}
					sum := 0
					for i, ev := range resp.GetEvents() {
						if i > 0 {
							require.Less(t, sum, int(bound), "an event after the page reached its bound")
						}
						sum += size[ev.GetSeq()]
						got = append(got, ev.GetSeq())
					}
					if resp.GetNextAfterSeq() == 0 {
						break
					}
					require.GreaterOrEqual(t, sum, int(bound), "a page that ends before its bound says it is the last")
					req.AfterSeq = resp.GetNextAfterSeq()
				}
				require.Equal(t, seqs(tc.from, 30), got, "every event once, in order")
			})
		}
	}
}
