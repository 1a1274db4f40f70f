package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/testkit"
)

func TestListExecutionsByStartTimeRange(t *testing.T) {
	url := testkit.StartMigratedPostgres(t)
	ctx := context.Background()
	s := newStore(t, url, Options{})
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// x0 started at base, x1 an hour later, ... x5 five hours later.
	for i := range 6 {
		_, err := s.db.Exec(ctx, `INSERT INTO noetl.execution (execution_id, tenant, started_at) VALUES ($1, 't', $2)`, fmt.Sprintf("x%d", i), base.Add(time.Duration(i)*time.Hour))
		require.NoError(t, err)
	}
	at := func(h int) *timestamppb.Timestamp { return timestamppb.New(base.Add(time.Duration(h) * time.Hour)) }
	for _, tc := range []struct {
		name          string
		after, before *timestamppb.Timestamp
		want          []string
	}{
		{"no range", nil, nil, []string{"x5", "x4", "x3", "x2", "x1", "x0"}},
		{"after is inclusive", at(3), nil, []string{"x5", "x4", "x3"}},
		{"before is exclusive", nil, at(2), []string{"x1", "x0"}},
		{"both", at(1), at(4), []string{"x3", "x2", "x1"}},
		{"empty", at(4), at(4), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Pages of two, so the range holds across page tokens.
			var got []string
			token := ""
			for {
				resp, err := s.ListExecutions(ctx, &sbv1.ListExecutionsRequest{Tenant: "t", PageSize: 2, PageToken: token, StartedAfter: tc.after, StartedBefore: tc.before})
				require.NoError(t, err)
				for _, x := range resp.GetExecutions() {
					got = append(got, x.GetExecutionId())
				}
				if token = resp.GetNextPageToken(); token == "" {
					break
				}
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestListExecutionsByLabels(t *testing.T) {
	url := testkit.StartMigratedPostgres(t)
	ctx := context.Background()
	s := newStore(t, url, Options{})
	for i, labels := range []string{`{}`, `{"team":"data"}`, `{"team":"data","env":"prod"}`, `{"team":"web","env":"prod"}`} {
		_, err := s.db.Exec(ctx, `INSERT INTO noetl.execution (execution_id, tenant, started_at, labels) VALUES ($1, 't', $2, $3::jsonb)`,
			fmt.Sprintf("x%d", i), time.Unix(int64(1000+i), 0), labels)
		require.NoError(t, err)
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   []string
	}{
		{"no filter", nil, []string{"x3", "x2", "x1", "x0"}},
		{"one label", map[string]string{"team": "data"}, []string{"x2", "x1"}},
		{"every label must match", map[string]string{"team": "data", "env": "prod"}, []string{"x2"}},
		{"a value that differs", map[string]string{"env": "dev"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := s.ListExecutions(ctx, &sbv1.ListExecutionsRequest{Tenant: "t", Labels: tc.labels})
			require.NoError(t, err)
			var got []string
			for _, x := range resp.GetExecutions() {
				got = append(got, x.GetExecutionId())
				if x.GetExecutionId() == "x2" {
					require.Equal(t, map[string]string{"team": "data", "env": "prod"}, x.GetLabels())
				}
			}
			require.Equal(t, tc.want, got)
		})
	}
}
