package tools

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// SecretMask is what the secrets tool's result holds in place of every credential value.
const SecretMask = "***"

// Secrets fetches a stored credential (kind: secrets, auth: or credential: its name) and
// returns which fields it holds, never their values: the result is
//
//	{credential: <name>, type: <type>, fields: {<field>: "***", ...}}
//
// with every value masked by the tool itself, so the result the worker publishes, stores
// and logs, and the templates of later steps that read it, see SecretMask only. fields, a
// list of names, picks the fields (a name the credential lacks fails the step). Every
// value fetched is also registered with the command's scrubber (Register), so an echo of
// one anywhere else in what the command produces is masked too.
type Secrets struct {
	// Resolve fetches credentials by name; nil means the tool cannot be used.
	Resolve CredentialResolver
	// Register adds a secret value to the scrubber of the command ctx runs.
	Register func(ctx context.Context, value string)
}

// Run implements Tool.
func (s *Secrets) Run(ctx context.Context, c *Call) (any, error) {
	auth := c.Config["auth"]
	if auth == nil {
		auth = c.Config["credential"]
	}
	if auth == nil {
		return nil, &Error{Msg: "secrets: tool.auth (or tool.credential) must name a stored credential"}
	}
	if name, inline := authName(auth); name == "" || inline != nil {
		return nil, &Error{Msg: "secrets: tool.auth must name a stored credential, not hold its data"}
	}
	want, err := secretFields(c.Config["fields"])
	if err != nil {
		return nil, err
	}
	ra, err := resolveAuth(ctx, s.Resolve, "secrets", auth)
	if err != nil {
		return nil, err
	}
	if s.Register != nil {
		registerValues(ctx, s.Register, ra.data)
	}
	if want == nil {
		for k := range ra.data {
			want = append(want, k)
		}
		sort.Strings(want)
	}
	fields := make(map[string]any, len(want))
	var missing []string
	for _, k := range want {
		if _, ok := ra.data[k]; !ok {
			missing = append(missing, k)
			continue
		}
		fields[k] = SecretMask
	}
	if len(missing) > 0 {
		have := make([]string, 0, len(ra.data))
		for k := range ra.data {
			have = append(have, k)
		}
		sort.Strings(have)
		return nil, &Error{Msg: fmt.Sprintf("secrets: credential %q has no field %s (it has: %s)", ra.name, strings.Join(quoteAll(missing), ", "), strings.Join(have, ", "))}
	}
	return map[string]any{"credential": ra.name, "type": ra.typ, "fields": fields}, nil
}

// secretFields reads the tool's fields: nil (every field), or a list of names.
func secretFields(v any) ([]string, error) {
	switch f := v.(type) {
	case nil:
		return nil, nil
	case []any:
		out := make([]string, 0, len(f))
		for i, e := range f {
			name, ok := e.(string)
			if !ok || strings.TrimSpace(name) == "" {
				return nil, &Error{Msg: fmt.Sprintf("secrets: tool.fields[%d] must be a field name", i)}
			}
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
		return out, nil
	default:
		return nil, &Error{Msg: "secrets: tool.fields must be a list of field names"}
	}
}

// registerValues registers every scalar value of a credential's data, at any depth.
func registerValues(ctx context.Context, register func(context.Context, string), v any) {
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			registerValues(ctx, register, e)
		}
	case []any:
		for _, e := range x {
			registerValues(ctx, register, e)
		}
	case string:
		register(ctx, x)
	case float64:
		register(ctx, strconv.FormatFloat(x, 'f', -1, 64))
	case nil, bool:
	default:
		register(ctx, fmt.Sprint(x))
	}
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}
