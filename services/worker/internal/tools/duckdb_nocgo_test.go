//go:build !cgo

package tools

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// Without cgo there is no DuckDB: a step fails saying why, and a bad config is still named.
func TestDuckDBNeedsCgo(t *testing.T) {
	_, err := (&DuckDB{}).Run(context.Background(), &Call{Kind: "duckdb", Config: map[string]any{"command": "SELECT 1"}})
	require.ErrorContains(t, err, "duckdb needs a worker built with cgo")
	_, err = (&DuckDB{}).Run(context.Background(), &Call{Kind: "duckdb", Config: map[string]any{}})
	require.ErrorContains(t, err, "tool.command (or tool.query) is required")
}
