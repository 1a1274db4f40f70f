package tools

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// CredentialResolver returns a named credential's type and data (e.g. for postgres: host, port, user, password, database/dbname, or connection_string/dsn).
type CredentialResolver func(ctx context.Context, name string) (typ string, data map[string]any, err error)

// resolvedAuth is the outcome of resolving a tool's auth key.
type resolvedAuth struct {
	name string // credential name; empty for inline data
	typ  string
	data map[string]any
}

// resolveAuth turns a tool's rendered auth value into credential data. It accepts a
// credential name (the usual form), a map naming one ({credential|key|name: ...}, or
// NoETL's unified {alias: {source: credential, key: ...}}), or a map of inline data.
// A nil result with a nil error means the tool has no auth. Resolver failures keep
// the Retryable flag of a returned *Error and are otherwise not retryable.
func resolveAuth(ctx context.Context, r CredentialResolver, tool string, auth any) (*resolvedAuth, error) {
	name, inline := authName(auth)
	if inline != nil {
		typ, _ := inline["type"].(string)
		return &resolvedAuth{typ: typ, data: inline}, nil
	}
	if name == "" {
		return nil, nil
	}
	if r == nil {
		return nil, &Error{Msg: fmt.Sprintf("%s: auth %q is set but this worker has no credential resolver", tool, name)}
	}
	typ, data, err := r(ctx, name)
	if err != nil {
		retry := false
		var te *Error
		if errors.As(err, &te) {
			retry = te.Retryable
		}
		return nil, &Error{Msg: tool + ": " + CredentialMessage(name, err.Error()), Retryable: retry}
	}
	if data == nil {
		data = map[string]any{}
	}
	return &resolvedAuth{name: name, typ: typ, data: data}, nil
}

// authName extracts a credential name from an auth value, or returns the value as
// inline credential data when it names none.
func authName(auth any) (string, map[string]any) {
	switch a := auth.(type) {
	case nil:
		return "", nil
	case string:
		return strings.TrimSpace(a), nil
	case map[string]any:
		if len(a) == 0 {
			return "", nil
		}
		for _, k := range []string{"credential", "key", "name"} {
			if s, ok := a[k].(string); ok && s != "" {
				if src, ok := a["source"].(string); !ok || src == "credential" {
					return s, nil
				}
			}
		}
		if len(a) == 1 {
			for _, v := range a {
				if m, ok := v.(map[string]any); ok {
					if s, ok := m["key"].(string); ok && s != "" {
						return s, nil
					}
				}
			}
		}
		return "", a
	default:
		return fmt.Sprint(a), nil
	}
}

// cfgString returns the first of keys in m that holds a non-empty scalar, as a string.
func cfgString(m map[string]any, keys ...string) string {
	for _, k := range keys {
		switch v := m[k].(type) {
		case nil:
		case string:
			if v != "" {
				return v
			}
		case float64:
			return strconv.FormatFloat(v, 'f', -1, 64)
		case bool:
			return strconv.FormatBool(v)
		default:
			if s := fmt.Sprint(v); s != "" {
				return s
			}
		}
	}
	return ""
}

// cfgNumber reads a numeric config value given as a number or a numeric string.
func cfgNumber(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint64:
		return float64(n), true
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
		return f, err == nil
	}
	return 0, false
}

// cfgBool reads a boolean config value given as a bool or a string; def when absent.
func cfgBool(v any, def bool) (bool, error) {
	switch b := v.(type) {
	case nil:
		return def, nil
	case bool:
		return b, nil
	case string:
		if strings.TrimSpace(b) == "" {
			return def, nil
		}
		p, err := strconv.ParseBool(strings.TrimSpace(b))
		if err != nil {
			return def, fmt.Errorf("not a boolean: %q", b)
		}
		return p, nil
	}
	return def, fmt.Errorf("not a boolean: %v", v)
}

// CredentialMessage is msg about the credential name, naming it once: as it stands when
// msg names it already (the orchestrator's "credential \"pg\" not found"), else prefixed.
func CredentialMessage(name, msg string) string {
	if strings.Contains(msg, strconv.Quote(name)) {
		return msg
	}
	return fmt.Sprintf("credential %q: %s", name, msg)
}
