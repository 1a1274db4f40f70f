package writer

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Warming a connection.
//
// A statement's first use on a connection costs a round trip to prepare it: pgx prepares a
// batch's new statements in one extra round trip before the batch, and a head start
// prepares its statements one by one before its pipeline starts (a pipeline cannot wait for
// a description), nineteen of them. A pool's connections are made at start and whenever it
// grows, and each paid this on the first commits it carried, on their critical path: in a
// fan-out of 1,000, the first commit of outcomes on a fresh connection spent 22-44 ms
// preparing before its first statement, while the whole fan-out took about 120 ms.
//
// Warm does that work once, when the pool makes the connection (the pool's AfterConnect):
// it gives the session the writer's settings and prepares every statement a commit sends,
// each under its own SQL as its name, which is where pgx's batches and the head start look
// first. A commit then sends only its statements. Nothing about what a commit does
// changes: the same statements, prepared earlier.

// warmStatements are the statements a commit may send: its first round trip's, the guards,
// inserts and projections of both forms, the timers and the cursor.
var warmStatements = slices.Concat([]string{"BEGIN", "COMMIT", sqlStart, sqlLock, sqlLockLast, sqlLogged}, headStatements)

// Warm readies a connection the pool has just made for the writer's commits: the session's
// settings (sqlSettings, marking the connection settled) and every statement of
// warmStatements prepared. A COPY needs nothing more: the writer encodes its rows itself
// (copydata.go). It is meant as the pool's AfterConnect hook (pgxext.AfterConnect). It
// never refuses the connection: should a statement fail to prepare (a schema not yet
// migrated, which the materializer's schema check at start reports), Warm stops there and
// returns nil, and what is left is prepared on first use, as without it.
func Warm(ctx context.Context, c *pgx.Conn) error {
	if _, err := c.Exec(ctx, sqlSettings); err != nil {
		return nil
	}
	markSettled(c)
	for _, sql := range warmStatements {
		if _, err := c.Prepare(ctx, sql, sql); err != nil {
			return nil
		}
	}
	return nil
}
