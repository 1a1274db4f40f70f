package playbook

import (
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"
)

// Cursor is the work queue a cursor loop drains: loop.cursor with the loop's
// spec.frame. The orchestrator runs the claim on up to max_in_flight slots; each
// claim's rows form a frame, whose bodies (the step's tool, the row or the frame bound
// to the iterator) run before the slot claims again, until a claim returns no rows.
type Cursor struct {
	// Kind is the claim's tool kind (postgres).
	Kind string
	// Claim is the claim's SQL: one statement returning the rows of one frame (none once
	// the queue is drained).
	Claim string
	// Config is the claim command's tool configuration: the cursor's keys other than
	// kind, claim and options, the options mapping merged in, and command set to Claim.
	Config map[string]any
	// Frame holds the spec.frame settings.
	Frame Frame
}

// Frame is a cursor loop's spec.frame.
type Frame struct {
	// MaxRows is the most rows one claim should return; the claim reads it as
	// {{ cursor.max_rows }} (default 1).
	MaxRows int
	// LeaseSeconds is how long a body attempt holds its frame: once it is over without
	// an outcome, the frame's body is issued again (default 300; 0 in the document: the
	// default).
	LeaseSeconds int
	// HeartbeatSeconds is how often a worker running a body reports command.heartbeat
	// (0: never). Each heartbeat keeps the attempt's lease alive: it runs out
	// LeaseSeconds after the latest heartbeat rather than after the claim. Below
	// LeaseSeconds.
	HeartbeatSeconds int
	// MaxSeconds bounds one body attempt: past it the worker stops the body and the
	// attempt fails (deadline_exceeded), counting against MaxAttempts (0: no bound but
	// the step's spec.timeout).
	MaxSeconds int
	// MaxBytes bounds the rows one body binds (the sum of their JSON sizes; 0: no
	// bound): the claim reads it as {{ cursor.max_bytes }}; with process: frame a frame
	// over it is cut into sub-frames of consecutive rows within it, one body each, and a
	// row over it alone is never sent: its body is refused, failing the row.
	MaxBytes int
	// MaxAttempts is how many body attempts a row (or frame) gets (default 3).
	MaxAttempts int
	// Process is row (a body command per row, the default) or frame (one body command
	// per frame, with the frame's rows bound to the iterator as a list).
	Process string
	// RowConcurrency caps the bodies of one frame in flight at once with process: row
	// (0: every row of the frame at once).
	RowConcurrency int
}

// Cursor defaults and bounds.
const (
	// CursorDefaultMaxRows is a frame's default max_rows.
	CursorDefaultMaxRows = 1
	// CursorDefaultLeaseSeconds is a frame's default lease_seconds.
	CursorDefaultLeaseSeconds = 300
	// CursorDefaultMaxAttempts is a frame's default max_attempts.
	CursorDefaultMaxAttempts = 3
	// CursorMaxSlots bounds a cursor loop's max_in_flight.
	CursorMaxSlots = 256
	// CursorMaxRows bounds a frame's max_rows.
	CursorMaxRows = 10_000
	// ProcessRow and ProcessFrame are the values of frame.process.
	ProcessRow   = "row"
	ProcessFrame = "frame"
)

// cursorFrameKeys are the keys of loop.spec.frame.
var cursorFrameKeys = map[string]bool{
	"max_rows": true, "max_seconds": true, "max_bytes": true, "lease_seconds": true,
	"heartbeat_seconds": true, "row_concurrency": true, "process": true, "max_attempts": true,
}

// cursor parses loop.cursor (n) and the loop's spec.frame.
func (b *builder) cursor(n, spec *yaml.Node, step string) *Cursor {
	if n.Kind != yaml.MappingNode {
		b.errorf(n, step, "loop.cursor", "must be a mapping, not %s", kindName(n))
		return nil
	}
	c := &Cursor{Kind: "postgres", Frame: Frame{MaxRows: CursorDefaultMaxRows, LeaseSeconds: CursorDefaultLeaseSeconds, MaxAttempts: CursorDefaultMaxAttempts, Process: ProcessRow}}
	ok := true
	if kn := value(n, "kind"); !isNull(kn) {
		if s, good := b.str(kn, step, "loop.cursor.kind"); good && s != "postgres" {
			b.errorf(kn, step, "loop.cursor.kind", "unknown cursor kind %q (want postgres)", s)
			ok = false
		}
	}
	if cn := value(n, "claim"); isNull(cn) {
		b.errorf(n, step, "loop.cursor.claim", "a cursor needs a claim: SQL returning the rows of one frame")
		ok = false
	} else if s, good := b.str(cn, step, "loop.cursor.claim"); !good {
		ok = false
	} else if s == "" {
		b.errorf(cn, step, "loop.cursor.claim", "the claim SQL is empty")
		ok = false
	} else {
		c.Claim = s
	}
	cfg := map[string]any{}
	// The claim runs as a tool of the cursor's kind: a key that tool does not read is
	// ignored, and registration says so (toolkeys.go).
	known := ToolKeys(c.Kind)
	ignored := func(line int, where, key string) {
		if known != nil && !slices.Contains(known, key) {
			b.warnings = append(b.warnings, Warning{Line: line, Step: step, Msg: fmt.Sprintf("%s key %q is not read by the %q claim; it is ignored", where, key, c.Kind)})
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i].Value
		switch key {
		case "kind", "claim", "options":
		default:
			ignored(n.Content[i].Line, "loop.cursor", key)
			cfg[key] = toValue(n.Content[i+1])
		}
	}
	if on := value(n, "options"); !isNull(on) {
		if opts := b.mapping(on, step, "loop.cursor.options"); opts != nil {
			for key, v := range opts {
				if key != "kind" && key != "command" && key != "query" {
					ignored(on.Line, "loop.cursor.options", key)
					cfg[key] = v
				}
			}
		}
	}
	cfg["command"] = c.Claim
	t := &Tool{Kind: c.Kind, Config: cfg}
	b.sqlTool(n, t, step, "loop.cursor")
	c.Config = t.Config
	if !isNull(spec) {
		if f := value(spec, "frame"); !isNull(f) {
			ok = b.frame(f, step, &c.Frame) && ok
		}
	}
	if !ok {
		return nil
	}
	return c
}

// frame parses loop.spec.frame into f.
func (b *builder) frame(n *yaml.Node, step string, f *Frame) bool {
	if n.Kind != yaml.MappingNode {
		b.errorf(n, step, "loop.spec.frame", "must be a mapping, not %s", kindName(n))
		return false
	}
	ok := true
	var hbNode *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, v := n.Content[i].Value, n.Content[i+1]
		field := "loop.spec.frame." + key
		if !cursorFrameKeys[key] {
			b.errorf(n.Content[i], step, field, "unknown frame field %q (want max_rows, lease_seconds, heartbeat_seconds, max_attempts, process, max_seconds, max_bytes, row_concurrency)", key)
			ok = false
			continue
		}
		if isNull(v) {
			continue
		}
		if key == "process" {
			s, good := b.str(v, step, field)
			switch {
			case !good:
				ok = false
			case s == ProcessRow, s == ProcessFrame:
				f.Process = s
			default:
				b.errorf(v, step, field, "unknown process %q (want row or frame)", s)
				ok = false
			}
			continue
		}
		num, good := b.nonNegInt(v, step, field)
		if !good {
			ok = false
			continue
		}
		switch key {
		case "max_rows":
			if num < 1 || num > CursorMaxRows {
				b.errorf(v, step, field, "must be between 1 and %d", CursorMaxRows)
				ok = false
				continue
			}
			f.MaxRows = num
		case "lease_seconds":
			if num > 0 {
				f.LeaseSeconds = num
			}
		case "heartbeat_seconds":
			f.HeartbeatSeconds = num
			hbNode = v
		case "max_seconds":
			f.MaxSeconds = num
		case "max_bytes":
			f.MaxBytes = num
		case "row_concurrency":
			f.RowConcurrency = num
		case "max_attempts":
			if num < 1 {
				b.errorf(v, step, field, "must be at least 1")
				ok = false
				continue
			}
			f.MaxAttempts = num
		}
	}
	if hbNode != nil && f.HeartbeatSeconds >= f.LeaseSeconds {
		// A heartbeat at or past the lease could not keep it alive: the frame would be
		// issued again while its worker runs it.
		b.errorf(hbNode, step, "loop.spec.frame.heartbeat_seconds", "must be under lease_seconds (%d), or the lease runs out between heartbeats", f.LeaseSeconds)
		ok = false
	}
	return ok
}

// checkCursorSlots bounds a cursor loop's literal max_in_flight.
func (b *builder) checkCursorSlots(n *yaml.Node, l *Loop, step, field string) {
	if l.Cursor != nil && l.MaxInFlight > CursorMaxSlots {
		b.errorf(n, step, field, "a cursor loop runs at most %d claim slots", CursorMaxSlots)
	}
}
