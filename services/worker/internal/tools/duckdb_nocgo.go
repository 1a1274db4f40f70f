//go:build !cgo

package tools

import "context"

// Run implements Tool: without cgo there is no DuckDB, so every call fails with
// ErrDuckDBNeedsCgo (after checking the config, so a bad one is still named).
func (d *DuckDB) Run(_ context.Context, c *Call) (any, error) {
	if _, err := parseDuckRequest(c.Config); err != nil {
		return nil, err
	}
	return nil, &Error{Msg: "duckdb: " + ErrDuckDBNeedsCgo.Error()}
}
