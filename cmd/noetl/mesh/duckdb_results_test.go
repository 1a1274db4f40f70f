//go:build cgo

package mesh_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/tabular"
)

const duckTable = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: ducktable, path: tests/ducktable}
workflow:
  - step: start
    tool:
      kind: duckdb
      max_rows: 50000
      command: |
        CREATE TABLE t AS SELECT range AS id, 'row-' || range AS name FROM range(20000);
        SELECT id, name FROM t ORDER BY id;
    next: [{step: total}]
  - step: total
    tool:
      kind: python
      input: {rows: "{{ start.rows }}"}
      code: |
        result = {"n": len(rows), "last": rows[-1]}
`

// TestDuckDBTablesTravelAsArrow: a duckdb step's rows over the inline budget are uploaded
// to the resultstore as Arrow record batches (Flight DoPut), with the columns' types, and
// the next step reads them back as the same rows.
func TestDuckDBTablesTravelAsArrow(t *testing.T) {
	h := start(t, false)
	x := h.run(t, duckTable, nil, "")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
	ref := x.GetSteps()["start"].GetResultRef()
	require.NotNil(t, ref, "20,000 rows travel by reference")
	require.Equal(t, tabular.ContentType, ref.GetContentType())
	require.EqualValues(t, 20000, ref.GetRowCount())
	require.Contains(t, ref.GetSchemaJson(), `{"name":"id","type":"int64"}`)
	require.Equal(t, map[string]any{"n": float64(20000), "last": map[string]any{"id": float64(19999), "name": "row-19999"}},
		x.GetSteps()["total"].GetResult().AsInterface())
}
