//go:build cgo

package conformance

import (
	"context"
	"database/sql"

	_ "github.com/duckdb/duckdb-go/v2" // the worker's DuckDB, to ask whether it has the postgres extension
)

// duckdbPostgresExtension reports whether DuckDB's postgres extension loads on this
// machine as the worker loads it: from the extension directory, never downloaded.
func duckdbPostgresExtension() bool {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return false
	}
	defer func() { _ = db.Close() }()
	_, err = db.ExecContext(context.Background(), "SET autoinstall_known_extensions = false; LOAD postgres_scanner")
	return err == nil
}
