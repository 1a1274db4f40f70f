//go:build !cgo

package conformance

// duckdbPostgresExtension is false without cgo: there is no DuckDB.
func duckdbPostgresExtension() bool { return false }
