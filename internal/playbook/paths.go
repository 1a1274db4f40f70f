package playbook

import (
	"fmt"
	"strings"
)

// MaxPathLen is the longest catalog path.
const MaxPathLen = 256

// CleanPath is a catalog path as the catalog keeps it: without the leading '/' NoETL's
// playbooks often write (`/team/job` and `team/job` name one entry). Nothing else is
// rewritten: a path CheckPath refuses stays refused.
func CleanPath(path string) string { return strings.TrimPrefix(path, "/") }

// CheckPath checks a clean catalog path: slash-separated segments of letters, digits, '_',
// '.' and '-', each starting with a letter, digit or '_' (so no empty, '.' or '..'
// segment), at most MaxPathLen characters. Its error says what is wrong without naming
// the field, for the caller to name it.
func CheckPath(path string) error {
	if path == "" {
		return fmt.Errorf("required")
	}
	if len(path) > MaxPathLen {
		return fmt.Errorf("%d characters exceeds the limit of %d", len(path), MaxPathLen)
	}
	for seg := range strings.SplitSeq(path, "/") {
		if !pathSegment(seg) {
			return fmt.Errorf("must be a catalog path (segments of letters, digits, '_', '.' and '-' separated by '/', no '..')")
		}
	}
	return nil
}

// pathSegment reports whether seg is one segment of a catalog path.
func pathSegment(seg string) bool {
	if seg == "" {
		return false
	}
	for i, r := range seg {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_'
		if i > 0 {
			ok = ok || r == '.' || r == '-'
		}
		if !ok {
			return false
		}
	}
	return true
}
