package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/testkit"
)

// planNode is a node of EXPLAIN (ANALYZE, FORMAT JSON).
type planNode struct {
	Type     string     `json:"Node Type"`
	Index    string     `json:"Index Name"`
	Rows     float64    `json:"Actual Rows"`
	Loops    float64    `json:"Actual Loops"`
	Filtered float64    `json:"Rows Removed by Filter"`
	Plans    []planNode `json:"Plans"`
}

// walk calls fn on n and every node below it.
func (n planNode) walk(fn func(planNode)) {
	fn(n)
	for _, c := range n.Plans {
		c.walk(fn)
	}
}

// TestListExecutionsPagesStayIndexedAt100k: with 100,000 executions in a tenant, the list's
// first page, a page 99,000 rows deep, a page filtered by status and the same of every
// tenant (a system principal's list) each walk an index in list order from the page
// token's key (execution_tenant_started, or execution_started, which the planner may pick
// for a tenant that holds nearly every row): no sequential scan, no sort, and about a page
// of rows read. (The plan, not a time, is what is asserted: rows read do not
// grow with the table.)
func TestListExecutionsPagesStayIndexedAt100k(t *testing.T) {
	url := testkit.StartMigratedPostgres(t)
	ctx := context.Background()
	s := newStore(t, url, Options{})
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Every tenth execution failed, the rest completed; a second tenant beside.
	_, err := s.db.Exec(ctx, `INSERT INTO noetl.execution (execution_id, tenant, playbook_path, status, started_at)
		SELECT format('x%s', lpad(i::text, 6, '0')), 'big', 'tests/scale', CASE WHEN i % 10 = 0 THEN 3 ELSE 2 END, $1::timestamptz + i * interval '1 second'
		FROM generate_series(0, 99999) AS i`, base)
	require.NoError(t, err)
	_, err = s.db.Exec(ctx, `INSERT INTO noetl.execution (execution_id, tenant, started_at)
		SELECT format('o%s', i), 'other', $1::timestamptz + i * interval '1 second' FROM generate_series(0, 999) AS i`, base)
	require.NoError(t, err)
	_, err = s.db.Exec(ctx, `ANALYZE noetl.execution`)
	require.NoError(t, err)

	token := func(i int) string {
		return base64.RawURLEncoding.EncodeToString([]byte(base.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano) + "|" + fmt.Sprintf("x%06d", i)))
	}
	const page = 50
	cases := []struct {
		name  string
		req   *sbv1.ListExecutionsRequest
		first string // the first execution of the page
	}{
		{"first page", &sbv1.ListExecutionsRequest{Tenant: "big", PageSize: page}, "x099999"},
		{"99,000 rows deep", &sbv1.ListExecutionsRequest{Tenant: "big", PageSize: page, PageToken: token(999)}, "x000998"},
		{"failed only", &sbv1.ListExecutionsRequest{Tenant: "big", PageSize: page, Status: eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, PageToken: token(50000)}, "x049990"},
		// A system principal's list of every tenant (tenant empty here).
		{"every tenant", &sbv1.ListExecutionsRequest{PageSize: page}, "x099999"},
		{"every tenant, 99,000 rows deep", &sbv1.ListExecutionsRequest{PageSize: page, PageToken: token(999)}, "o999"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := s.ListExecutions(ctx, tc.req)
			require.NoError(t, err)
			require.Len(t, resp.GetExecutions(), page)
			require.Equal(t, tc.first, resp.GetExecutions()[0].GetExecutionId())
			require.NotEmpty(t, resp.GetNextPageToken())

			args, _, err := listArgs(tc.req)
			require.NoError(t, err)
			var raw []byte
			require.NoError(t, s.db.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+listExecutionsSQL, args...).Scan(&raw))
			var plans []struct{ Plan planNode }
			require.NoError(t, json.Unmarshal(raw, &plans), string(raw))
			var read float64
			indexed := false
			plans[0].Plan.walk(func(n planNode) {
				require.NotEqual(t, "Seq Scan", n.Type, "plan: %s", raw)
				require.NotEqual(t, "Sort", n.Type, "plan: %s", raw)
				if n.Index == "execution_tenant_started" || n.Index == "execution_started" {
					indexed = true
					read += (n.Rows + n.Filtered) * max(n.Loops, 1)
				}
			})
			require.True(t, indexed, "the page walks an index in list order: %s", raw)
			// A status filter skips the other statuses' rows on the way: ten per failed one.
			require.LessOrEqual(t, read, float64(12*page), "rows read for a page of %d: %s", page, raw)
		})
	}
}
