package api

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/noetl/noetl/internal/playbook"
)

// Limits of the ids and paths a request names, checked here before anything is forwarded:
// a value that cannot name anything (a NUL byte, a path with '..', a 5 KB id) is an
// InvalidArgument naming the field, never a lookup.
const (
	// MaxPlaybookPath is the longest catalog path (the catalog's rule, playbook.CheckPath).
	MaxPlaybookPath = playbook.MaxPathLen
	// MaxResultID is the longest result id or noetl://results/ URI.
	MaxResultID = 512
	// MaxKeyID is the longest API key id.
	MaxKeyID = 64
)

// invalid is the InvalidArgument error of field, "field: why".
func invalid(field, why string) error {
	return status.Error(codes.InvalidArgument, field+": "+why)
}

// validExecutionID checks an execution id: a UUID in its canonical 36-character form, as
// every execution id is (a UUIDv7, or a UUIDv5 for a start with an idempotency key).
func validExecutionID(field, id string) error {
	if id == "" {
		return invalid(field, "required")
	}
	if len(id) != 36 {
		return invalid(field, "must be an execution id (a UUID such as 01930000-0000-7000-8000-000000000000)")
	}
	for i := range len(id) {
		c := id[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return invalid(field, "must be an execution id (a UUID such as 01930000-0000-7000-8000-000000000000)")
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return invalid(field, "must be an execution id (a UUID such as 01930000-0000-7000-8000-000000000000)")
			}
		}
	}
	return nil
}

// validPlaybookPath checks a clean catalog path by the catalog's rule (playbook.CheckPath).
func validPlaybookPath(field, path string) error {
	if err := playbook.CheckPath(path); err != nil {
		return invalid(field, err.Error())
	}
	return nil
}

// validResultID checks a result id or noetl://results/ URI: at most MaxResultID
// characters of letters, digits and "_.-:/".
func validResultID(field, id string) error {
	if strings.TrimSpace(id) == "" {
		return invalid(field, "required")
	}
	if len(id) > MaxResultID {
		return invalid(field, fmt.Sprintf("%d characters exceeds the limit of %d", len(id), MaxResultID))
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.-:/", r)) {
			return invalid(field, "must be a result id or a noetl://results/ URI (letters, digits and '_', '.', '-', ':', '/')")
		}
	}
	return nil
}

// validKeyID checks an API key id: 1 to MaxKeyID letters and digits.
func validKeyID(field, id string) error {
	if id == "" {
		return invalid(field, "required")
	}
	if len(id) > MaxKeyID {
		return invalid(field, fmt.Sprintf("%d characters exceeds the limit of %d", len(id), MaxKeyID))
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return invalid(field, "must be an API key id (letters and digits)")
		}
	}
	return nil
}

// CheckStrings refuses a request with a NUL byte in any string field (Postgres text cannot
// hold one), naming the field; the JSON values of a workload or of credential data
// (google.protobuf.Struct) are data and pass as they are. Nil passes.
func CheckStrings(m proto.Message) error {
	if m == nil {
		return nil
	}
	if field := nulField(m.ProtoReflect()); field != "" {
		return invalid(field, "must not contain a NUL character")
	}
	return nil
}

// nulField returns the path of the first string field of m holding a NUL byte, "" if none.
// The path is built only on the way back from a hit: a clean request, every request but a
// bad one, allocates nothing for it.
func nulField(m protoreflect.Message) string {
	if strings.HasPrefix(string(m.Descriptor().FullName()), "google.protobuf.") {
		return "" // Struct, Value, ListValue, Duration, Timestamp: data or numbers
	}
	var found string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if sub, hit := nulValue(fd, l.Get(i)); hit {
					found = string(fd.Name()) + "[" + strconv.Itoa(i) + "]" + sub
					return false
				}
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if strings.IndexByte(k.String(), 0) >= 0 {
					found = string(fd.Name())
				} else if sub, hit := nulValue(fd.MapValue(), mv); hit {
					found = string(fd.Name()) + "[" + k.String() + "]" + sub
				}
				return found == ""
			})
		default:
			if sub, hit := nulValue(fd, v); hit {
				found = string(fd.Name()) + sub
			}
		}
		return found == ""
	})
	return found
}

// nulValue reports whether v, a value of field fd, holds a NUL byte in a string, and the
// rest of its path below fd ("" for a string, ".field..." inside a message).
func nulValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) (string, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return "", strings.IndexByte(v.String(), 0) >= 0
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if sub := nulField(v.Message()); sub != "" {
			return "." + sub, true
		}
	}
	return "", false
}
