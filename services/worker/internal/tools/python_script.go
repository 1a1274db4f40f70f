package tools

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// MaxScriptBytes bounds a python tool's script loaded by script: (a file or a URL).
const MaxScriptBytes = 4 << 20

// scriptFetchTimeout bounds the request of a script served over HTTP unless its
// source.timeout says otherwise.
const scriptFetchTimeout = 30 * time.Second

// pythonCode returns the code a python tool runs, in NoETL's order: script: (a file of
// the worker's script directory, or a URL fetched through the egress check), else
// code_b64 (or code_base64), else code.
func (p *Python) pythonCode(ctx context.Context, c *Call) (string, error) {
	if v, ok := c.Config["script"]; ok && v != nil {
		return p.loadScript(ctx, v)
	}
	for _, k := range []string{"code_b64", "code_base64"} {
		if v, ok := c.Config[k]; ok && v != nil {
			s, _ := v.(string)
			b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
			if err != nil {
				return "", &Error{Msg: fmt.Sprintf("python: %s is not base64: %v", k, err)}
			}
			return string(b), nil
		}
	}
	code, _ := c.Config["code"].(string)
	return code, nil
}

// script is a python tool's script: key, in NoETL's form ({path | uri, source: {type,
// endpoint, headers, timeout}}) or a bare path or URL.
type script struct {
	path, kind, endpoint string
	headers              map[string]string
	timeout              time.Duration
}

// parseScript reads a script: value; the source type defaults from the path (http and
// https URLs are http, gs:// gcs, s3:// s3, anything else a file).
func parseScript(v any) (script, error) {
	var s script
	fail := func(format string, a ...any) (script, error) {
		return script{}, &Error{Msg: "python: script" + fmt.Sprintf(format, a...)}
	}
	var source map[string]any
	switch x := v.(type) {
	case string:
		s.path = x
	case map[string]any:
		for _, k := range []string{"path", "uri"} {
			if p, ok := x[k].(string); ok && p != "" && s.path == "" {
				s.path = p
			}
		}
		if src, ok := x["source"]; ok && src != nil {
			if source, ok = src.(map[string]any); !ok {
				return fail(".source must be a mapping ({type, endpoint, headers, timeout})")
			}
		}
	default:
		return fail(" must be a path, a URL or a mapping {path, source}, not %T", v)
	}
	if source != nil {
		s.kind, _ = source["type"].(string)
		s.endpoint, _ = source["endpoint"].(string)
		if m, ok := source["method"].(string); ok && m != "" && !strings.EqualFold(m, http.MethodGet) {
			return fail(".source.method %q: a script is fetched with GET", m)
		}
		if h, ok := source["headers"]; ok && h != nil {
			hm, ok := h.(map[string]any)
			if !ok {
				return fail(".source.headers must be a mapping of names to values")
			}
			s.headers = make(map[string]string, len(hm))
			for k, v := range hm {
				s.headers[k] = scalarText(v)
			}
		}
		if t, ok := source["timeout"].(float64); ok && t > 0 {
			s.timeout = time.Duration(t * float64(time.Second))
		}
	}
	s.path = strings.TrimSpace(s.path)
	if s.kind == "" {
		switch lower := strings.ToLower(s.path); {
		case s.endpoint != "", strings.HasPrefix(lower, "http://"), strings.HasPrefix(lower, "https://"):
			s.kind = "http"
		case strings.HasPrefix(lower, "gs://"):
			s.kind = "gcs"
		case strings.HasPrefix(lower, "s3://"):
			s.kind = "s3"
		default:
			s.kind = "file"
		}
	}
	s.kind = strings.ToLower(s.kind)
	if s.path == "" && s.endpoint == "" {
		return fail(".path is required (a file of the worker's script directory or a URL)")
	}
	return s, nil
}

// loadScript loads the code a script: value names.
func (p *Python) loadScript(ctx context.Context, v any) (string, error) {
	s, err := parseScript(v)
	if err != nil {
		return "", err
	}
	switch s.kind {
	case "file":
		return p.readScript(s.path)
	case "http", "https":
		return p.fetchScript(ctx, s)
	case "gcs", "s3":
		return "", &Error{Msg: fmt.Sprintf("python: script.source.type %s is not supported by this worker (file or http): serve the script over http, or put it in the worker's script directory", s.kind)}
	default:
		return "", &Error{Msg: fmt.Sprintf("python: script.source.type %q: want file or http", s.kind)}
	}
}

// readScript reads a script of the worker's script directory (ScriptDir). The path is
// relative to it; nothing outside it is read, also through a symbolic link.
func (p *Python) readScript(path string) (string, error) {
	if p.ScriptDir == "" {
		return "", &Error{Msg: fmt.Sprintf("python: script %q: this worker has no script directory (NOETL_WORKER_SCRIPT_DIR); inline the code or serve the script over http", path)}
	}
	rel := filepath.Clean(strings.TrimPrefix(path, "file://"))
	if !filepath.IsLocal(rel) {
		return "", &Error{Msg: fmt.Sprintf("python: script %q must be a relative path inside the worker's script directory (no .., not absolute)", path)}
	}
	root, err := os.OpenRoot(p.ScriptDir)
	if err != nil {
		return "", &Error{Msg: fmt.Sprintf("python: script directory: %v", err)}
	}
	defer func() { _ = root.Close() }()
	f, err := root.Open(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", &Error{Msg: fmt.Sprintf("python: script %q not found in the worker's script directory", path)}
		}
		return "", &Error{Msg: fmt.Sprintf("python: script %q: %v", path, err)}
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, MaxScriptBytes+1))
	if err != nil {
		return "", &Error{Msg: fmt.Sprintf("python: script %q: %v", path, err)}
	}
	if len(b) > MaxScriptBytes {
		return "", &Error{Msg: fmt.Sprintf("python: script %q exceeds %s", path, byteSize(MaxScriptBytes))}
	}
	return string(b), nil
}

// fetchScript fetches a script over HTTP with the http tool's transport, so the egress
// policy applies to it (and to its redirects) as to any http step.
func (p *Python) fetchScript(ctx context.Context, s script) (string, error) {
	target := s.endpoint
	if target == "" {
		target = s.path
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", &Error{Msg: fmt.Sprintf("python: script URL %q: want an http or https URL", target)}
	}
	if p.HTTP == nil {
		return "", &Error{Msg: "python: this worker cannot fetch scripts over http"}
	}
	timeout := s.timeout
	if timeout <= 0 {
		timeout = scriptFetchTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", &Error{Msg: fmt.Sprintf("python: script URL %q: %v", u.Redacted(), err)}
	}
	for k, v := range s.headers {
		req.Header.Set(k, v)
	}
	what := "GET " + u.Redacted()
	p.HTTP.once.Do(p.HTTP.init)
	client := &http.Client{Transport: p.HTTP.transport, CheckRedirect: func(_ *http.Request, via []*http.Request) error {
		if len(via) >= httpMaxRedirects {
			return fmt.Errorf("stopped after %d redirects", httpMaxRedirects)
		}
		return nil
	}}
	resp, err := client.Do(req)
	if err != nil {
		e := p.HTTP.transportError(ctx, what, timeout, err)
		var te *Error
		if errors.As(e, &te) {
			te.Msg = "python: script: " + strings.TrimPrefix(te.Msg, "http: ")
		}
		return "", e
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode/100 != 2 {
		return "", &Error{Msg: fmt.Sprintf("python: script: %s answered %s", what, resp.Status), Retryable: resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxScriptBytes+1))
	if err != nil {
		return "", &Error{Msg: fmt.Sprintf("python: script: %s: %v", what, err), Retryable: true}
	}
	if len(b) > MaxScriptBytes {
		return "", &Error{Msg: fmt.Sprintf("python: script: %s: the script exceeds %s", what, byteSize(MaxScriptBytes))}
	}
	return string(b), nil
}
