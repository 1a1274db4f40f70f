package writer

import (
	"fmt"
	"strings"
)

// Statements keyed by scalars.
//
// The writer's statements take arrays (unnest) so that one statement serves a batch of any
// size. A chain step's commit holds one execution and a few rows, and there the arrays
// cost more than the work: the same transaction (the head guard, the rival guard, an
// insert of one row and one of two, the projection) took a median of 401 us with arrays
// and 182 us with scalars and rows of values, 2,300 interleaved transactions against a
// private cluster on the development machine; in the mesh, chain 200 went from 1,920 to
// 2,098 steps a second (8 interleaved runs, medians). So a guard or projection of one
// execution, a rival guard of one outcome and an insert of at most valuesMax rows use the
// keyed forms below; larger ones keep the arrays.
//
// What holds: each keyed statement is its array form for one key, the same rows locked in
// the same order, the same guard failing the same way (noetl.writer_expect, or the log's
// unique key), so a batch commits the same whichever form it takes.

// valuesMax is the most rows an insert sends as rows of values.
const valuesMax = 8

// insertColumns is the number of parameters of one row of sqlInsertValues: every column
// of the log but committed_at, which is the statement's first parameter, shared.
const insertColumns = 8

// sqlInsertValues[n] inserts n rows of values (1 <= n <= valuesMax); its parameters are the
// commit time, then each row's execution_id, seq, event_id, tenant, type, step, command_id
// and body.
var sqlInsertValues = func() []string {
	out := make([]string, valuesMax+1)
	for n := 1; n <= valuesMax; n++ {
		var sb strings.Builder
		sb.WriteString("INSERT INTO noetl.event (execution_id, seq, event_id, tenant, type, step, command_id, committed_at, body) VALUES ")
		for k := range n {
			if k > 0 {
				sb.WriteString(", ")
			}
			p := 2 + k*insertColumns
			fmt.Fprintf(&sb, "($%d::text, $%d::bigint, $%d::text, $%d::text, $%d::text, $%d::text, $%d::text, $1::timestamptz, $%d::bytea)",
				p, p+1, p+2, p+3, p+4, p+5, p+6, p+7)
		}
		out[n] = sb.String()
	}
	return out
}()
