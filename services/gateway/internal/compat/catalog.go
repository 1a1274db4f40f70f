package compat

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
)

// MaxCatalogEntries bounds the entries POST /api/catalog/list answers with (the catalog is
// read a page at a time up to it); past it the answer says truncated.
const MaxCatalogEntries = 5000

// catalogPage is how many entries one read of the catalog asks for (the public API's
// largest page).
const catalogPage = 500

// catalogEntry is one catalog entry in NoETL's shape. The optional fields NoETL serialises
// as explicit nulls are nulls here too: layout always (this engine keeps no layout), content
// and payload in lists.
type catalogEntry struct {
	CatalogID string          `json:"catalog_id"`
	Path      string          `json:"path"`
	Kind      string          `json:"kind"`
	Version   string          `json:"version"`
	Content   *string         `json:"content"`
	Layout    json.RawMessage `json:"layout"`
	Payload   json.RawMessage `json:"payload"`
	Meta      json.RawMessage `json:"meta"`
	CreatedAt *string         `json:"created_at"`
}

// entryOf converts a playbook; with its content, the content is also given as payload (the
// document as JSON), as NoETL stores it.
func entryOf(p *apiv1.Playbook) catalogEntry {
	e := catalogEntry{
		CatalogID: catalogID(p.GetPath(), p.GetVersion()), Path: p.GetPath(), Kind: "Playbook",
		Version: strconv.FormatInt(p.GetVersion(), 10), CreatedAt: timeText(p.GetCreateTime()),
	}
	meta := map[string]any{}
	if p.GetName() != "" {
		meta["name"] = p.GetName()
	}
	if p.GetDescription() != "" {
		meta["description"] = p.GetDescription()
	}
	if len(p.GetWarnings()) > 0 {
		meta["warnings"] = p.GetWarnings()
	}
	if len(meta) > 0 {
		e.Meta, _ = json.Marshal(meta)
	}
	if c := p.GetContent(); c != "" {
		e.Content = &c
		e.Payload = documentJSON(c)
	}
	return e
}

// documentJSON is a registered YAML document as JSON; nil (null) when it does not convert
// (a key that is not a string, say).
func documentJSON(content string) json.RawMessage {
	var doc any
	if err := yaml.Unmarshal([]byte(content), &doc); err != nil {
		return nil
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil
	}
	return b
}

// playbookKind reports whether a NoETL resource_type names playbooks, the only kind this
// catalog holds; empty means any.
func playbookKind(t string) bool {
	t = strings.TrimSpace(t)
	return t == "" || strings.EqualFold(t, "playbook")
}

// catalogList handles POST /api/catalog/list {resource_type?, include_archived?, path?}:
// the latest version of every playbook, ordered by path, without content (or, with path,
// every version of that playbook, newest first). include_archived is accepted and changes
// nothing: this catalog archives nothing. path is this engine's addition.
func (h *handler) catalogList(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ResourceType    string `json:"resource_type"`
		IncludeArchived *bool  `json:"include_archived"`
		Path            string `json:"path"`
	}
	if err := decode(r, &req, true); err != nil {
		h.writeError(w, r, err)
		return
	}
	type answer struct {
		Entries   []catalogEntry `json:"entries"`
		Truncated bool           `json:"truncated,omitempty"`
	}
	out := answer{Entries: []catalogEntry{}}
	if !playbookKind(req.ResourceType) {
		writeJSON(w, http.StatusOK, out)
		return
	}
	token := ""
	for {
		resp, err := h.b.ListPlaybooks(r.Context(), &apiv1.ListPlaybooksRequest{PageSize: catalogPage, PageToken: token, Path: req.Path})
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		for _, p := range resp.GetPlaybooks() {
			if len(out.Entries) == MaxCatalogEntries {
				out.Truncated = true
				writeJSON(w, http.StatusOK, out)
				return
			}
			out.Entries = append(out.Entries, entryOf(p))
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// catalogResource handles POST /api/catalog/resource {catalog_id? | path?, version?}: one
// entry with its content, and the document as JSON in payload. version is a number, a
// string of digits or "latest" (the default); it overrides a catalog_id's.
func (h *handler) catalogResource(w http.ResponseWriter, r *http.Request) {
	var req struct {
		CatalogID json.RawMessage `json:"catalog_id"`
		Path      string          `json:"path"`
		Version   json.RawMessage `json:"version"`
	}
	if err := decode(r, &req, false); err != nil {
		h.writeError(w, r, err)
		return
	}
	path, version, err := parseCatalogID(req.CatalogID)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if req.Path != "" {
		path = req.Path
	}
	if path == "" {
		h.writeError(w, r, status.Error(codes.InvalidArgument, "path: path or catalog_id is required"))
		return
	}
	if v, err := parseVersion(req.Version); err != nil {
		h.writeError(w, r, err)
		return
	} else if v > 0 {
		version = v
	}
	resp, err := h.b.GetPlaybook(r.Context(), &apiv1.GetPlaybookRequest{Path: path, Version: version})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, entryOf(resp.GetPlaybook()))
}
