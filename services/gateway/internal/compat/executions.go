package compat

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/services/gateway/internal/apierr"
)

// Bounds of GET /api/executions.
const (
	// DefaultListLimit is the page size when limit is not given.
	DefaultListLimit = 50
	// MaxListLimit bounds limit (the public API's largest page).
	MaxListLimit = 500
	// MaxListOffset bounds offset: skipping rows costs reading them.
	MaxListOffset = 10000
)

// nextPageHeader carries the token of the next page of GET /api/executions, whose body is
// NoETL's bare list.
const nextPageHeader = "X-Next-Page-Token"

// executionRow is one row of GET /api/executions in NoETL's shape. event_count is the
// execution's committed events (its seq, which has no gaps).
type executionRow struct {
	ExecutionID       string  `json:"execution_id"`
	CatalogID         string  `json:"catalog_id"`
	Path              string  `json:"path"`
	Version           string  `json:"version"`
	Status            string  `json:"status"`
	StartedAt         *string `json:"started_at"`
	CompletedAt       *string `json:"completed_at"`
	EventCount        int64   `json:"event_count"`
	ParentExecutionID string  `json:"parent_execution_id,omitempty"`
}

// parseStatus reads a status filter: NoETL's names (RUNNING, COMPLETED, FAILED,
// CANCELLED, any case) or the public API's (EXECUTION_STATUS_RUNNING, ...).
func parseStatus(s string) (eventv1.ExecutionStatus, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	u = strings.TrimPrefix(u, "EXECUTION_STATUS_")
	if u == "CANCELED" {
		u = "CANCELLED"
	}
	switch u {
	case "RUNNING", "COMPLETED", "FAILED", "CANCELLED":
		return eventv1.ExecutionStatus(eventv1.ExecutionStatus_value["EXECUTION_STATUS_"+u]), nil
	}
	return 0, status.Error(codes.InvalidArgument, "status: must be RUNNING, COMPLETED, FAILED or CANCELLED")
}

// queryInt reads a non-negative integer query parameter, def when absent.
func queryInt(q url.Values, name string, def, limit int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, status.Errorf(codes.InvalidArgument, "%s: must be a non-negative integer", name)
	}
	if n > limit {
		return 0, status.Errorf(codes.InvalidArgument, "%s: %d exceeds the limit of %d", name, n, limit)
	}
	return n, nil
}

// queryTime reads an RFC 3339 time query parameter; nil when absent.
func queryTime(q url.Values, name string) (*timestamppb.Timestamp, error) {
	v := q.Get(name)
	if v == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s: must be an RFC 3339 time such as 2026-01-02T15:04:05Z", name)
	}
	return timestamppb.New(t), nil
}

// listExecutions handles GET /api/executions?path=&catalog_id=&status=&started_after=
// &started_before=&limit=&offset=&page_token=: the caller's executions, newest first, as
// a bare list. catalog_id (path@version) filters by path and version; started_after and
// started_before (RFC 3339) bound the start time. Paging is NoETL's limit and offset, or
// this engine's page_token: without offset and version filter the answer's
// X-Next-Page-Token header carries the token of the next page (absent on the last).
func (h *handler) listExecutions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := &apiv1.ListExecutionsRequest{Path: q.Get("path"), PageToken: q.Get("page_token")}
	var version int64
	if c := q.Get("catalog_id"); c != "" {
		raw, _ := json.Marshal(c)
		p, v, err := parseCatalogID(raw)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		if req.Path != "" && req.Path != p {
			h.writeError(w, r, status.Error(codes.InvalidArgument, "catalog_id: names another path than path"))
			return
		}
		req.Path, version = p, v
	}
	if s := q.Get("status"); s != "" {
		st, err := parseStatus(s)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		req.Status = st
	}
	var err error
	if req.StartTimeAfter, err = queryTime(q, "started_after"); err != nil {
		h.writeError(w, r, err)
		return
	}
	if req.StartTimeBefore, err = queryTime(q, "started_before"); err != nil {
		h.writeError(w, r, err)
		return
	}
	limit, err := queryInt(q, "limit", DefaultListLimit, MaxListLimit)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if limit == 0 {
		limit = DefaultListLimit
	}
	offset, err := queryInt(q, "offset", 0, MaxListOffset)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	rows := []executionRow{}
	if offset == 0 && version == 0 {
		// One page of the public API, its token passed on.
		req.PageSize = int32(limit)
		resp, err := h.b.ListExecutions(r.Context(), req)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		for _, e := range resp.GetExecutions() {
			rows = append(rows, rowOf(e))
		}
		if t := resp.GetNextPageToken(); t != "" {
			w.Header().Set(nextPageHeader, t)
		}
		writeJSON(w, http.StatusOK, rows)
		return
	}
	// Skip offset matching rows, then take limit, reading full pages.
	req.PageSize = MaxListLimit
	for len(rows) < limit {
		resp, err := h.b.ListExecutions(r.Context(), req)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		for _, e := range resp.GetExecutions() {
			if version > 0 && e.GetVersion() != version {
				continue
			}
			if offset > 0 {
				offset--
				continue
			}
			if len(rows) < limit {
				rows = append(rows, rowOf(e))
			}
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	writeJSON(w, http.StatusOK, rows)
}

func rowOf(e *apiv1.Execution) executionRow {
	var completedAt *string
	if terminal(e.GetStatus()) {
		completedAt = timeText(e.GetEndTime())
	}
	return executionRow{
		ExecutionID: e.GetExecutionId(), CatalogID: catalogID(e.GetPath(), e.GetVersion()), Path: e.GetPath(),
		Version: strconv.FormatInt(e.GetVersion(), 10), Status: statusName(e.GetStatus()), StartedAt: timeText(e.GetStartTime()),
		CompletedAt: completedAt, EventCount: e.GetLastSeq(), ParentExecutionID: e.GetParentExecutionId(),
	}
}

// Bounds of POST /api/execute/batch.
const (
	// MaxBatch is how many starts one batch may hold, as in NoETL.
	MaxBatch = 1000
	// batchParallel is how many starts of a batch are in flight at once.
	batchParallel = 8
	// batchRetries is how many times a start refused by the tenant's rate limit is retried
	// after the delay the refusal names.
	batchRetries = 5
)

// batchItem is one start's outcome in a batch: started, duplicate (its idempotency key
// named an execution started before, by an earlier item or an earlier call) or error.
type batchItem struct {
	Index       int    `json:"index"`
	Status      string `json:"status"`
	ExecutionID string `json:"execution_id,omitempty"`
	Path        string `json:"path,omitempty"`
	Version     string `json:"version,omitempty"`
	CatalogID   string `json:"catalog_id,omitempty"`
	Error       string `json:"error,omitempty"`
	Code        string `json:"code,omitempty"`
}

// executeBatch handles POST /api/execute/batch {executions: [execute request, ...]}: each
// item is started as POST /api/execute would start it, and answered in the item's place
// in results; an item that fails (bad input, a playbook not found, ...) fails alone. At
// most MaxBatch items.
func (h *handler) executeBatch(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Executions []json.RawMessage `json:"executions"`
	}
	if err := decode(r, &req, false); err != nil {
		h.writeError(w, r, err)
		return
	}
	switch n := len(req.Executions); {
	case req.Executions == nil:
		h.writeError(w, r, status.Error(codes.InvalidArgument, "executions: required (a list of execute requests)"))
		return
	case n > MaxBatch:
		h.writeError(w, r, status.Errorf(codes.InvalidArgument, "executions: %d items exceeds the limit of %d", n, MaxBatch))
		return
	}
	results := make([]batchItem, len(req.Executions))
	firstOfKey := map[string]int{} // idempotency key -> first item holding it
	dupOf := make([]int, len(req.Executions))
	reqs := make([]*apiv1.StartExecutionRequest, len(req.Executions))
	for i, raw := range req.Executions {
		dupOf[i] = -1
		results[i].Index = i
		sr, err := parseStart(raw, "executions["+strconv.Itoa(i)+"].")
		if err != nil {
			results[i].fail(err)
			continue
		}
		reqs[i] = sr
		if k := sr.GetIdempotencyKey(); k != "" {
			if first, ok := firstOfKey[k]; ok {
				dupOf[i] = first
				continue
			}
			firstOfKey[k] = i
		}
	}
	sem := make(chan struct{}, batchParallel)
	var wg sync.WaitGroup
	for i, sr := range reqs {
		if sr == nil || dupOf[i] >= 0 {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			resp, err := h.startWithRetry(r.Context(), sr)
			if err != nil {
				results[i].fail(h.maskError(r, err))
				return
			}
			s := startedOf(sr.GetPath(), resp)
			results[i].Status = "started"
			if resp.GetExisting() {
				results[i].Status = "duplicate" // its key named an execution started before
			}
			results[i].ExecutionID, results[i].Path, results[i].Version, results[i].CatalogID = s.ExecutionID, s.Path, s.Version, s.CatalogID
		}()
	}
	wg.Wait()
	out := struct {
		Count      int         `json:"count"`
		Started    int         `json:"started"`
		Duplicates int         `json:"duplicates"`
		Failed     int         `json:"failed"`
		Results    []batchItem `json:"results"`
	}{Count: len(results), Results: results}
	for i := range results {
		if f := dupOf[i]; f >= 0 {
			if results[f].Status == "started" || results[f].Status == "duplicate" {
				results[i] = results[f]
				results[i].Index, results[i].Status = i, "duplicate"
			} else {
				results[i].Status, results[i].Error, results[i].Code = results[f].Status, results[f].Error, results[f].Code
			}
		}
		switch results[i].Status {
		case "started":
			out.Started++
		case "duplicate":
			out.Duplicates++
		default:
			out.Failed++
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (b *batchItem) fail(err error) {
	st := status.Convert(err)
	b.Status, b.Error, b.Code = "error", st.Message(), codeName(st.Code())
}

// startWithRetry starts one execution of a batch; a refusal by the tenant's rate limit that
// names a delay is retried after it, at most batchRetries times.
func (h *handler) startWithRetry(ctx context.Context, req *apiv1.StartExecutionRequest) (*apiv1.StartExecutionResponse, error) {
	for attempt := 0; ; attempt++ {
		resp, err := h.b.StartExecution(ctx, req)
		if err == nil || attempt == batchRetries {
			return resp, err
		}
		st := status.Convert(err)
		d, ok := apierr.RetryAfter(st)
		if st.Code() != codes.ResourceExhausted || !ok || apierr.TooLarge(apierr.Reason(st)) {
			return nil, err
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// maskError is what a batch item shows of err: the error, unless it is unexpected, which
// is logged and shown as "internal error" (as writeError does for a whole request).
func (h *handler) maskError(r *http.Request, err error) error {
	st := status.Convert(err)
	if apierr.CorrelationID(st) != "" {
		return status.Error(codes.Internal, st.Message())
	}
	if _, known := httpStatus(st.Code()); known {
		return err
	}
	if h.log != nil {
		h.log.Error("compat batch start failed", slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("code", st.Code().String()), slog.String("error", st.Message()))
	}
	return status.Error(codes.Internal, "internal error")
}
