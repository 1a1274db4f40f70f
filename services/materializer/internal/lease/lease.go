// Package lease shares the partitions of NOETL_EVENTS among the materializer replicas of
// one group through leases in Postgres (noetl.materializer_partition, migration 00008),
// and keeps each partition's cursor: the stream sequence up to which its events are
// committed and forwarded.
//
// Every replica heartbeats; the number of live replicas sets a fair share,
// ceil(partitions / live). A replica renews the leases it holds, releases those above its
// share (so a new replica gets work) and acquires free or expired ones up to it (so a dead
// replica's partitions are taken over once its leases expire, or at once when the replica
// is provably gone: TakeOver). Expiry is judged by Postgres's clock, so replicas' clocks
// need not agree.
package lease

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Table is one replica's handle on the leases of its group.
type Table struct {
	DB *pgxpool.Pool
	// Group is the consumer name the replicas share (NOETL_MATERIALIZER_CONSUMER).
	Group string
	// Replica identifies this replica within the group.
	Replica string
	// Partitions is the number of partitions.
	Partitions int
	// TTL is how long a lease (and a heartbeat) lasts unless renewed.
	TTL time.Duration
}

// Share is the fair share of partitions per replica when live replicas are alive.
func Share(partitions, live int) int {
	if live < 1 {
		live = 1
	}
	return (partitions + live - 1) / live
}

func (t *Table) ttl() float64 { return t.TTL.Seconds() }

// Init creates the partition rows of the group (idempotent).
func (t *Table) Init(ctx context.Context) error {
	_, err := t.DB.Exec(ctx, `INSERT INTO noetl.materializer_partition (consumer, partition)
		SELECT $1, p FROM generate_series(0, $2 - 1) AS p ON CONFLICT DO NOTHING`, t.Group, t.Partitions)
	return err
}

// Renew heartbeats, extends every lease this replica holds, and returns the partitions it
// holds (ascending) and the number of live replicas of the group (itself included).
func (t *Table) Renew(ctx context.Context) (held []int, live int, err error) {
	tx, err := t.DB.Begin(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `INSERT INTO noetl.materializer_replica (consumer, replica, expires_at)
		VALUES ($1, $2, now() + make_interval(secs => $3))
		ON CONFLICT (consumer, replica) DO UPDATE SET expires_at = excluded.expires_at`, t.Group, t.Replica, t.ttl()); err != nil {
		return nil, 0, err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM noetl.materializer_replica WHERE consumer = $1 AND expires_at <= now()`, t.Group); err != nil {
		return nil, 0, err
	}
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM noetl.materializer_replica WHERE consumer = $1`, t.Group).Scan(&live); err != nil {
		return nil, 0, err
	}
	rows, err := tx.Query(ctx, `UPDATE noetl.materializer_partition SET expires_at = now() + make_interval(secs => $3)
		WHERE consumer = $1 AND owner = $2 AND partition < $4 RETURNING partition`, t.Group, t.Replica, t.ttl(), t.Partitions)
	if err != nil {
		return nil, 0, err
	}
	held, err = scanPartitions(rows)
	if err != nil {
		return nil, 0, err
	}
	return held, live, tx.Commit(ctx)
}

// Acquire takes up to n free or expired leases and returns the partitions taken.
func (t *Table) Acquire(ctx context.Context, n int) ([]int, error) {
	if n <= 0 {
		return nil, nil
	}
	rows, err := t.DB.Query(ctx, `UPDATE noetl.materializer_partition l
		SET owner = $2, expires_at = now() + make_interval(secs => $3)
		FROM (SELECT partition FROM noetl.materializer_partition
		      WHERE consumer = $1 AND partition < $4 AND (owner = '' OR expires_at <= now())
		      ORDER BY partition LIMIT $5 FOR UPDATE SKIP LOCKED) f
		WHERE l.consumer = $1 AND l.partition = f.partition
		RETURNING l.partition`, t.Group, t.Replica, t.ttl(), t.Partitions, n)
	if err != nil {
		return nil, err
	}
	return scanPartitions(rows)
}

// TakeOver frees the leases and removes the heartbeat of every other replica of the group
// that gone says has exited (a predecessor of this replica whose process is provably
// gone), so they are acquired at once instead of after the TTL. It returns the replicas
// taken over.
func (t *Table) TakeOver(ctx context.Context, gone func(replica string) bool) ([]string, error) {
	rows, err := t.DB.Query(ctx, `SELECT owner FROM noetl.materializer_partition
		WHERE consumer = $1 AND owner <> '' AND owner <> $2 AND expires_at > now()
		UNION SELECT replica FROM noetl.materializer_replica WHERE consumer = $1 AND replica <> $2`, t.Group, t.Replica)
	if err != nil {
		return nil, err
	}
	var others []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			rows.Close()
			return nil, err
		}
		others = append(others, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var taken []string
	for _, r := range others {
		if !gone(r) {
			continue
		}
		if _, err := t.DB.Exec(ctx, `UPDATE noetl.materializer_partition SET owner = '', expires_at = '-infinity'
			WHERE consumer = $1 AND owner = $2`, t.Group, r); err != nil {
			return taken, err
		}
		if _, err := t.DB.Exec(ctx, `DELETE FROM noetl.materializer_replica WHERE consumer = $1 AND replica = $2`, t.Group, r); err != nil {
			return taken, err
		}
		taken = append(taken, r)
	}
	slices.Sort(taken)
	return taken, nil
}

// Release gives up the leases of partitions this replica holds.
func (t *Table) Release(ctx context.Context, partitions []int) error {
	if len(partitions) == 0 {
		return nil
	}
	_, err := t.DB.Exec(ctx, `UPDATE noetl.materializer_partition SET owner = '', expires_at = '-infinity'
		WHERE consumer = $1 AND owner = $2 AND partition = ANY ($3)`, t.Group, t.Replica, partitions)
	return err
}

// Leave releases every lease this replica holds and removes its heartbeat, so the others
// take its partitions at once instead of after the TTL.
func (t *Table) Leave(ctx context.Context) error {
	if _, err := t.DB.Exec(ctx, `UPDATE noetl.materializer_partition SET owner = '', expires_at = '-infinity'
		WHERE consumer = $1 AND owner = $2`, t.Group, t.Replica); err != nil {
		return err
	}
	_, err := t.DB.Exec(ctx, `DELETE FROM noetl.materializer_replica WHERE consumer = $1 AND replica = $2`, t.Group, t.Replica)
	return err
}

// Cursors are the stream positions of a consumer group's partitions.
type Cursors struct {
	DB    *pgxpool.Pool
	Group string
}

// Get is Cursor for c's group.
func (c Cursors) Get(ctx context.Context, partition int) (uint64, error) {
	return Cursor(ctx, c.DB, c.Group, partition)
}

// Advance is Advance for c's group.
func (c Cursors) Advance(ctx context.Context, partition int, seq uint64) error {
	return Advance(ctx, c.DB, c.Group, partition, seq)
}

// Floors returns, for each partition with a cursor, the lowest cursor over every group:
// the stream sequence up to which every group has committed and forwarded the
// partition's events.
func (c Cursors) Floors(ctx context.Context) (map[int]uint64, error) {
	rows, err := c.DB.Query(ctx, `SELECT partition, min(stream_seq) FROM noetl.materializer_partition GROUP BY partition`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int]uint64{}
	for rows.Next() {
		var p int
		var seq int64
		if err := rows.Scan(&p, &seq); err != nil {
			return nil, err
		}
		out[p] = uint64(max(seq, 0))
	}
	return out, rows.Err()
}

// Cursor returns the stream sequence up to which partition's events are committed and
// forwarded (0: none yet).
func Cursor(ctx context.Context, db *pgxpool.Pool, group string, partition int) (uint64, error) {
	var seq int64
	err := db.QueryRow(ctx, `INSERT INTO noetl.materializer_partition AS p (consumer, partition) VALUES ($1, $2)
		ON CONFLICT (consumer, partition) DO UPDATE SET stream_seq = p.stream_seq
		RETURNING stream_seq`, group, partition).Scan(&seq)
	return uint64(max(seq, 0)), err
}

// Advance moves partition's cursor forward to seq (never back: two replicas that both
// consume the partition may advance it out of step).
func Advance(ctx context.Context, db *pgxpool.Pool, group string, partition int, seq uint64) error {
	_, err := db.Exec(ctx, `UPDATE noetl.materializer_partition SET stream_seq = greatest(stream_seq, $3)
		WHERE consumer = $1 AND partition = $2`, group, partition, int64(seq))
	return err
}

type partitionRows interface {
	Next() bool
	Scan(...any) error
	Close()
	Err() error
}

func scanPartitions(rows partitionRows) ([]int, error) {
	defer rows.Close()
	var out []int
	for rows.Next() {
		var p int32
		if err := rows.Scan(&p); err != nil {
			return nil, err
		}
		out = append(out, int(p))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// Cleanup deletes the replica rows, of any group, that expired more than grace ago (a
// group whose replicas are all gone has no one left to delete them) and releases the
// partition leases that did, in one transaction, and returns how many of each.
func Cleanup(ctx context.Context, db *pgxpool.Pool, grace time.Duration) (replicas, leases int64, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM noetl.materializer_replica WHERE expires_at < now() - make_interval(secs => $1)`, grace.Seconds())
		if err != nil {
			return err
		}
		replicas = tag.RowsAffected()
		tag, err = tx.Exec(ctx, `UPDATE noetl.materializer_partition SET owner = '', expires_at = '-infinity'
			WHERE owner <> '' AND expires_at < now() - make_interval(secs => $1)`, grace.Seconds())
		if err != nil {
			return err
		}
		leases = tag.RowsAffected()
		return nil
	})
	return replicas, leases, err
}
