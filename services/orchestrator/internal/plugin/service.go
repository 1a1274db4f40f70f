// Package plugin stores the WebAssembly plug-ins steps of kind wasm run (noetl.plugin):
// each registration of new bytes under a path is the next version of that path, and a
// version is immutable. The workers fetch a module by (tenant, path, version) through
// PluginService and cache its compiled form by digest, so a new version reaches the next
// command without a restart. CheckSteps refuses, at playbook registration, a wasm step
// naming a module the tenant does not have or one of the wrong class for the playbook.
package plugin

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/playbook"
)

// MaxModuleBytes is the largest module a registration accepts.
const MaxModuleBytes = 24 << 20

// Kind is the tool kind of a plug-in step.
const Kind = "wasm"

// wasmMagic opens every WebAssembly binary: "\0asm" and version 1.
var wasmMagic = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}

// unpack returns a module sent gzip-compressed (the CLI does, to stay within the
// gateway's body limit) decompressed, and any other bytes as they are.
func unpack(b []byte) ([]byte, error) {
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		return b, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "module: gzip: %v", err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, MaxModuleBytes+1))
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "module: gzip: %v", err)
	}
	return out, nil
}

// ErrNotFound is returned for a plug-in path or version that does not exist.
var ErrNotFound = errors.New("plug-in not found")

// Service implements orchv1.PluginServiceServer over noetl.plugin.
type Service struct {
	orchv1.UnimplementedPluginServiceServer

	DB *pgxpool.Pool
}

// checkPath cleans and validates a plug-in path, as an InvalidArgument error naming field.
func checkPath(field, path string) (string, error) {
	path = playbook.CleanPath(strings.Trim(path, "/"))
	if err := playbook.CheckPath(path); err != nil {
		return "", status.Errorf(codes.InvalidArgument, "%s: %q %v", field, path, err)
	}
	return path, nil
}

const columns = `path, version, content_sha256, octet_length(module), description, created_by, created_at`

func scan(r pgx.Row, tenant string, extra ...any) (*orchv1.Plugin, error) {
	p := &orchv1.Plugin{Tenant: tenant}
	var created time.Time
	if err := r.Scan(append([]any{&p.Path, &p.Version, &p.ContentSha256, &p.SizeBytes, &p.Description, &p.CreatedBy, &created}, extra...)...); err != nil {
		return nil, err
	}
	p.CreateTime = timestamppb.New(created)
	return p, nil
}

// RegisterPlugin implements PluginService.
func (s *Service) RegisterPlugin(ctx context.Context, req *orchv1.RegisterPluginRequest) (*orchv1.RegisterPluginResponse, error) {
	tenant := domain.TenantOrDefault(req.GetTenant())
	path, err := checkPath("path", req.GetPath())
	if err != nil {
		return nil, err
	}
	mod, err := unpack(req.GetModule())
	if err != nil {
		return nil, err
	}
	switch {
	case len(mod) == 0:
		return nil, status.Error(codes.InvalidArgument, "module: the WebAssembly binary is required")
	case len(mod) > MaxModuleBytes:
		return nil, status.Errorf(codes.InvalidArgument, "module: %d bytes exceeds the limit of %d", len(mod), MaxModuleBytes)
	case !bytes.HasPrefix(mod, wasmMagic):
		return nil, status.Error(codes.InvalidArgument, "module: not a WebAssembly binary (it must start with \\0asm and version 1)")
	}
	caller := auth.FromContext(ctx)
	if domain.PoolFor(path) == "system" && !caller.Can(auth.PermSystem) {
		return nil, status.Error(codes.PermissionDenied, "path: registering system/ plug-ins requires the system role")
	}
	createdBy := ""
	if caller != nil {
		createdBy = caller.Subject
	}
	sum := sha256.Sum256(mod)
	digest := hex.EncodeToString(sum[:])
	var out *orchv1.Plugin
	unchanged := false
	err = pgx.BeginFunc(ctx, s.DB, func(tx pgx.Tx) error {
		// Serialise registrations of one path so versions stay dense.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('plugin/' || $1 || '/' || $2, 0))`, tenant, path); err != nil {
			return err
		}
		latest, err := scan(tx.QueryRow(ctx, `SELECT `+columns+` FROM noetl.plugin WHERE tenant=$1 AND path=$2 ORDER BY version DESC LIMIT 1`, tenant, path), tenant)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			latest = &orchv1.Plugin{}
		case err != nil:
			return err
		}
		if latest.GetContentSha256() == digest {
			out, unchanged = latest, true
			return nil
		}
		out, err = scan(tx.QueryRow(ctx, `INSERT INTO noetl.plugin (tenant, path, version, module, content_sha256, description, created_by)
			VALUES ($1,$2,$3,$4,$5,$6,$7) RETURNING `+columns, tenant, path, latest.GetVersion()+1, mod, digest, req.GetDescription(), createdBy), tenant)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("register plug-in %s: %w", path, err)
	}
	return &orchv1.RegisterPluginResponse{Plugin: out, Unchanged: unchanged}, nil
}

// Get returns one version of a plug-in (the latest when version is zero), with its bytes
// when withModule; ErrNotFound when there is none.
func (s *Service) Get(ctx context.Context, tenant, path string, version int64, withModule bool) (*orchv1.Plugin, error) {
	var mod []byte
	var extra []any
	cols := columns
	if withModule {
		cols += ", module"
		extra = append(extra, &mod)
	}
	p, err := scan(s.DB.QueryRow(ctx, `SELECT `+cols+` FROM noetl.plugin WHERE tenant=$1 AND path=$2 AND ($3 = 0 OR version = $3) ORDER BY version DESC LIMIT 1`,
		tenant, path, version), tenant, extra...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	p.Module = mod
	return p, nil
}

// GetPlugin implements PluginService.
func (s *Service) GetPlugin(ctx context.Context, req *orchv1.GetPluginRequest) (*orchv1.GetPluginResponse, error) {
	path, err := checkPath("path", req.GetPath())
	if err != nil {
		return nil, err
	}
	if req.GetVersion() < 0 {
		return nil, status.Error(codes.InvalidArgument, "version: must be zero (the latest) or positive")
	}
	p, err := s.Get(ctx, domain.TenantOrDefault(req.GetTenant()), path, req.GetVersion(), req.GetIncludeModule())
	if errors.Is(err, ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "plug-in %q (version %d) not found", path, req.GetVersion())
	}
	if err != nil {
		return nil, err
	}
	return &orchv1.GetPluginResponse{Plugin: p}, nil
}

// ListPlugins implements PluginService: the latest version of each path after the token
// path, or the versions of one path below the token version.
func (s *Service) ListPlugins(ctx context.Context, req *orchv1.ListPluginsRequest) (*orchv1.ListPluginsResponse, error) {
	n := int(req.GetPageSize())
	if n <= 0 {
		n = 50
	}
	n = min(n, 500)
	tenant := domain.TenantOrDefault(req.GetTenant())
	var rows pgx.Rows
	var err error
	if req.GetPath() != "" {
		path, perr := checkPath("path", req.GetPath())
		if perr != nil {
			return nil, perr
		}
		var before int64
		if t := req.GetPageToken(); t != "" {
			if _, serr := fmt.Sscan(t, &before); serr != nil || before <= 0 {
				return nil, status.Errorf(codes.InvalidArgument, "page_token: %q is not a version", t)
			}
		}
		rows, err = s.DB.Query(ctx, `SELECT `+columns+` FROM noetl.plugin WHERE tenant=$1 AND path=$2 AND ($3 = 0 OR version < $3) ORDER BY version DESC LIMIT $4`, tenant, path, before, n)
	} else {
		rows, err = s.DB.Query(ctx, `SELECT DISTINCT ON (path) `+columns+` FROM noetl.plugin WHERE tenant=$1 AND path > $2 ORDER BY path, version DESC LIMIT $3`, tenant, req.GetPageToken(), n)
	}
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := &orchv1.ListPluginsResponse{}
	for rows.Next() {
		p, err := scan(rows, tenant)
		if err != nil {
			return nil, err
		}
		out.Plugins = append(out.Plugins, p)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out.Plugins) == n {
		last := out.Plugins[n-1]
		out.NextPageToken = last.GetPath()
		if req.GetPath() != "" {
			out.NextPageToken = fmt.Sprint(last.GetVersion())
		}
	}
	return out, nil
}

// hasTemplate reports whether s is rendered when the step runs.
func hasTemplate(s string) bool { return strings.Contains(s, "{{") || strings.Contains(s, "{%") }

// CheckSteps refuses, at registration of the playbook at path, a wasm tool (in a step, a
// pipeline or the workbook) that names no module, a module the tenant has not registered
// (or not at the pinned version), or a module of the wrong class: system/ modules run
// only in system/ playbooks, on the system pool, and system/ playbooks run only system/
// modules. A module named by a template is checked when the step runs.
func (s *Service) CheckSteps(ctx context.Context, tenant string, pb *playbook.Playbook, path string) error {
	system := domain.PoolFor(path) == "system"
	check := func(where string, t *playbook.Tool) error {
		if t.Kind != Kind {
			return nil
		}
		mod, ok := t.Config["module"].(string)
		if !ok || mod == "" {
			return status.Errorf(codes.InvalidArgument, "%s: tool kind wasm needs module: the plug-in's catalog path", where)
		}
		if hasTemplate(mod) {
			return nil
		}
		mod = playbook.CleanPath(strings.Trim(mod, "/"))
		if err := playbook.CheckPath(mod); err != nil {
			return status.Errorf(codes.InvalidArgument, "%s: module %q %v", where, mod, err)
		}
		modSystem := domain.PoolFor(mod) == "system"
		if modSystem && !system {
			return status.Errorf(codes.InvalidArgument, "%s: module %q is a system/ plug-in, which only system/ playbooks run", where, mod)
		}
		if system && !modSystem {
			return status.Errorf(codes.InvalidArgument, "%s: module %q: a system/ playbook runs only system/ plug-ins on the system pool", where, mod)
		}
		var version int64
		switch v := t.Config["version"].(type) {
		case nil:
		case int:
			version = int64(v)
		case int64:
			version = v
		case float64:
			version = int64(v)
		default:
			if !hasTemplate(fmt.Sprint(v)) {
				return status.Errorf(codes.InvalidArgument, "%s: version: %v is not a whole number", where, v)
			}
			return nil
		}
		if version < 0 {
			return status.Errorf(codes.InvalidArgument, "%s: version: must be zero (the latest) or positive", where)
		}
		if _, err := s.Get(ctx, tenant, mod, version, false); errors.Is(err, ErrNotFound) {
			if version > 0 {
				return status.Errorf(codes.FailedPrecondition, "%s: module %q has no version %d (register it first: noetl plugin register)", where, mod, version)
			}
			return status.Errorf(codes.FailedPrecondition, "%s: module %q is not registered (register it first: noetl plugin register)", where, mod)
		} else if err != nil {
			return err
		}
		return nil
	}
	for _, st := range pb.Steps {
		for _, t := range st.Tool {
			where := fmt.Sprintf("line %d: step %q", st.Line, st.Name)
			if t.Label != "" {
				where += fmt.Sprintf(" tool %q", t.Label)
			}
			if err := check(where, t); err != nil {
				return err
			}
		}
	}
	for name, t := range pb.Workbook {
		if err := check(fmt.Sprintf("workbook task %q", name), t); err != nil {
			return err
		}
	}
	return nil
}
