// Package catalog stores playbook versions in noetl.catalog and keeps a bounded cache of
// compiled playbooks, so each catalog version is parsed and analysed once.
package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/internal/playbook/template"
	"github.com/noetl/noetl/services/orchestrator/internal/decide"
)

// ErrNotFound is returned for an unknown path or version.
var ErrNotFound = errors.New("playbook not found")

// Entry is one stored version.
type Entry struct {
	Tenant, Path, Name, Description, Content, SHA256 string
	Version                                          int64
	Warnings                                         []string
	Created                                          time.Time
}

// Catalog is the playbook catalog.
type Catalog struct {
	db       *pgxpool.Pool
	renderer *template.Renderer

	mu    sync.Mutex
	cache map[key]*decide.Compiled
	max   int
}

type key struct {
	tenant, path string
	version      int64
}

// New returns a catalog over db caching at most maxCached compiled playbooks.
func New(db *pgxpool.Pool, r *template.Renderer, maxCached int) *Catalog {
	if maxCached <= 0 {
		maxCached = 1024
	}
	return &Catalog{db: db, renderer: r, cache: map[key]*decide.Compiled{}, max: maxCached}
}

// PathOf returns the catalog path of a parsed playbook.
func PathOf(pb *playbook.Playbook) string {
	if pb.Metadata.Path != "" {
		return pb.Metadata.Path
	}
	return pb.Metadata.Name
}

// Register parses and validates content and stores it as the next version of its path.
// Registering content identical to the latest version returns that version. guard, when
// set, may refuse the parsed playbook before anything is stored.
func (c *Catalog) Register(ctx context.Context, tenant, content string, guard func(pb *playbook.Playbook, path string) error) (*Entry, error) {
	pb, err := playbook.Parse([]byte(content))
	if err != nil {
		return nil, err
	}
	path := playbook.CleanPath(PathOf(pb))
	pb.Metadata.Path = path
	if path == "" {
		return nil, &playbook.Error{Field: "metadata.path", Msg: "metadata.path or metadata.name is required"}
	}
	if err := ValidPath(path); err != nil {
		return nil, err
	}
	if guard != nil {
		if err := guard(pb, path); err != nil {
			return nil, err
		}
	}
	sum := sha256.Sum256([]byte(content))
	digest := hex.EncodeToString(sum[:])
	var warnings []string
	for _, w := range pb.Warnings {
		if w.Step == "" {
			warnings = append(warnings, fmt.Sprintf("line %d: %s", w.Line, w.Msg))
			continue
		}
		warnings = append(warnings, fmt.Sprintf("line %d: step %q: %s", w.Line, w.Step, w.Msg))
	}
	if warnings == nil {
		warnings = []string{}
	}
	e := &Entry{Tenant: tenant, Path: path, Name: pb.Metadata.Name, Description: pb.Metadata.Description, Content: content, SHA256: digest, Warnings: warnings}
	err = pgx.BeginFunc(ctx, c.db, func(tx pgx.Tx) error {
		// Serialise registrations of one path so versions stay dense.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2, 0))`, tenant, path); err != nil {
			return err
		}
		var latest int64
		var latestSum string
		err := tx.QueryRow(ctx, `SELECT version, content_sha256 FROM noetl.catalog WHERE tenant=$1 AND path=$2 ORDER BY version DESC LIMIT 1`, tenant, path).Scan(&latest, &latestSum)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if latestSum == digest {
			e.Version = latest
			return tx.QueryRow(ctx, `SELECT created_at FROM noetl.catalog WHERE tenant=$1 AND path=$2 AND version=$3`, tenant, path, latest).Scan(&e.Created)
		}
		e.Version = latest + 1
		return tx.QueryRow(ctx, `INSERT INTO noetl.catalog (tenant, path, version, name, description, content, content_sha256, warnings)
			VALUES ($1,$2,$3,$4,$5,$6,$7,$8) RETURNING created_at`,
			tenant, path, e.Version, e.Name, e.Description, content, digest, warnings).Scan(&e.Created)
	})
	if err != nil {
		return nil, fmt.Errorf("register %s: %w", path, err)
	}
	c.put(key{tenant, path, e.Version}, decide.Compile(pb, path, e.Version, c.renderer))
	return e, nil
}

// Get returns one version (the latest when version is 0).
func (c *Catalog) Get(ctx context.Context, tenant, path string, version int64) (*Entry, error) {
	path = playbook.CleanPath(path)
	e := &Entry{Tenant: tenant, Path: path}
	q := `SELECT version, name, description, content, content_sha256, warnings, created_at FROM noetl.catalog WHERE tenant=$1 AND path=$2 AND ($3 = 0 OR version = $3) ORDER BY version DESC LIMIT 1`
	err := c.db.QueryRow(ctx, q, tenant, path, version).Scan(&e.Version, &e.Name, &e.Description, &e.Content, &e.SHA256, &e.Warnings, &e.Created)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return e, nil
}

// List returns up to limit latest versions ordered by path, after the path in token.
func (c *Catalog) List(ctx context.Context, tenant string, limit int, after string) ([]*Entry, error) {
	rows, err := c.db.Query(ctx, `SELECT DISTINCT ON (path) path, version, name, description, content_sha256, warnings, created_at
		FROM noetl.catalog WHERE tenant=$1 AND path > $2 ORDER BY path, version DESC LIMIT $3`, tenant, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Entry
	for rows.Next() {
		e := &Entry{Tenant: tenant}
		if err := rows.Scan(&e.Path, &e.Version, &e.Name, &e.Description, &e.SHA256, &e.Warnings, &e.Created); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// Versions returns up to limit versions of the playbook at path, newest first, below
// version before (all versions when before is 0), without content. A path with no version
// is ErrNotFound.
func (c *Catalog) Versions(ctx context.Context, tenant, path string, limit int, before int64) ([]*Entry, error) {
	path = playbook.CleanPath(path)
	rows, err := c.db.Query(ctx, `SELECT version, name, description, content_sha256, warnings, created_at
		FROM noetl.catalog WHERE tenant=$1 AND path=$2 AND ($3 = 0 OR version < $3) ORDER BY version DESC LIMIT $4`, tenant, path, before, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Entry
	for rows.Next() {
		e := &Entry{Tenant: tenant, Path: path}
		if err := rows.Scan(&e.Version, &e.Name, &e.Description, &e.SHA256, &e.Warnings, &e.Created); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 && before == 0 {
		return nil, ErrNotFound
	}
	return out, nil
}

// Compiled returns the compiled form of a version (the latest when version is 0). The
// latest version's number is read from the catalog every time (another replica may have
// registered one since), but not its content when that version is compiled already: a
// start of a playbook read its whole text back for every execution.
func (c *Catalog) Compiled(ctx context.Context, tenant, path string, version int64) (*decide.Compiled, error) {
	path = playbook.CleanPath(path)
	if version == 0 {
		err := c.db.QueryRow(ctx, `SELECT version FROM noetl.catalog WHERE tenant=$1 AND path=$2 ORDER BY version DESC LIMIT 1`, tenant, path).Scan(&version)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, ErrNotFound
		}
		if err != nil {
			return nil, err
		}
	}
	if cp := c.get(key{tenant, path, version}); cp != nil {
		return cp, nil
	}
	e, err := c.Get(ctx, tenant, path, version)
	if err != nil {
		return nil, err
	}
	if cp := c.get(key{tenant, path, e.Version}); cp != nil {
		return cp, nil
	}
	pb, err := playbook.Parse([]byte(e.Content))
	if err != nil {
		return nil, fmt.Errorf("stored playbook %s v%d no longer parses: %w", path, e.Version, err)
	}
	cp := decide.Compile(pb, path, e.Version, c.renderer)
	c.put(key{tenant, path, e.Version}, cp)
	return cp, nil
}

func (c *Catalog) get(k key) *decide.Compiled {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cache[k]
}

func (c *Catalog) put(k key, v *decide.Compiled) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cache) >= c.max {
		// Versions are immutable, so dropping the cache only costs a re-parse.
		clear(c.cache)
	}
	c.cache[k] = v
}

// ValidPath checks a clean catalog path by playbook.CheckPath, as a playbook error naming
// metadata.path.
func ValidPath(path string) error {
	if err := playbook.CheckPath(path); err != nil {
		return &playbook.Error{Field: "metadata.path", Msg: fmt.Sprintf("%q %v", path, err)}
	}
	return nil
}
