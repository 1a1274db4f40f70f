package playbook

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/noetl/noetl/internal/playbook/template"
	"go.yaml.in/yaml/v3"
)

// Keychain entry kinds this engine resolves (in the worker, when it renders a command).
const (
	// KeychainCredential is a stored credential's fields, by the credential's name.
	KeychainCredential = "credential"
	// KeychainOAuth2 is an OAuth2 token from a token endpoint (the client-credentials
	// grant by default), cached until shortly before it expires.
	KeychainOAuth2 = "oauth2"
)

// KeychainKinds are the keychain entry kinds Parse accepts.
var KeychainKinds = []string{KeychainCredential, KeychainOAuth2}

// keychainAliases maps NoETL's other spellings of a kind to the one this engine uses.
var keychainAliases = map[string]string{"postgres_credential": KeychainCredential}

// unsupportedKeychainKinds are NoETL keychain kinds this engine does not resolve, with
// the way to get the same value here.
var unsupportedKeychainKinds = map[string]string{
	"secret_manager": "store the secret as a credential (POST /v1/credentials) and declare kind: credential",
}

// keychainKeys are the keys of an entry this engine reads; scope, auto_renew and
// renew_config are NoETL's cache settings, accepted and subsumed by the worker's cache.
var keychainKeys = map[string][]string{
	KeychainCredential: {"name", "kind", "auth", "credential", "scope", "description"},
	KeychainOAuth2: {"name", "kind", "auth", "credential", "endpoint", "token_url", "url", "method", "headers", "data", "json",
		"token_field", "ttl_field", "ttl_seconds", "scope", "auto_renew", "renew_config", "description"},
}

var keychainName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// keychain validates the root keychain: list and keeps its entries (by name, with the
// kind spelled as this engine does) for the steps that reference them.
func (b *builder) keychain(n *yaml.Node, pb *Playbook) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		b.errorf(n, "", "keychain", "must be a list, not %s", kindName(n))
		return
	}
	pb.Keychain = toValue(n).([]any)
	b.kc = map[string]map[string]any{}
	var order []string
	lines := map[string]*yaml.Node{}
	for i, item := range n.Content {
		field := fmt.Sprintf("keychain[%d]", i)
		if item.Kind != yaml.MappingNode {
			b.errorf(item, "", field, "a keychain entry must be a mapping with name and kind, not %s", kindName(item))
			continue
		}
		name := ""
		if v := value(item, "name"); isNull(v) {
			b.errorf(item, "", field+".name", "a keychain entry needs a name (templates read it as keychain.<name>.<field>)")
			continue
		} else if s, ok := b.str(v, "", field+".name"); !ok {
			continue
		} else if !keychainName.MatchString(s) {
			b.errorf(v, "", field+".name", "keychain entry name %q must be letters, digits and _ (not starting with a digit)", s)
			continue
		} else {
			name = s
		}
		field = "keychain." + name
		if _, dup := b.kc[name]; dup {
			b.errorf(item, "", field, "duplicate keychain entry %q", name)
			continue
		}
		kind := ""
		if v := value(item, "kind"); isNull(v) {
			b.errorf(item, "", field+".kind", "keychain entry %q needs a kind (one of %s)", name, strings.Join(KeychainKinds, ", "))
			continue
		} else if s, ok := b.str(v, "", field+".kind"); !ok {
			continue
		} else {
			kind = s
			if a, ok := keychainAliases[s]; ok {
				kind = a
			}
			if !slices.Contains(KeychainKinds, kind) {
				msg := fmt.Sprintf("keychain entry %q: kind %q is not supported (this engine resolves: %s)", name, s, strings.Join(KeychainKinds, ", "))
				if how, ok := unsupportedKeychainKinds[s]; ok {
					msg += "; " + how
				}
				b.errorf(v, "", field+".kind", "%s", msg)
				continue
			}
		}
		entry, _ := toValue(item).(map[string]any)
		entry["kind"] = kind
		for i := 0; i+1 < len(item.Content); i += 2 {
			if k := item.Content[i]; !slices.Contains(keychainKeys[kind], k.Value) {
				b.warnings = append(b.warnings, Warning{Line: k.Line, Msg: fmt.Sprintf("%q is not read by this engine for a keychain entry of kind %s; it is ignored", field+"."+k.Value, kind)})
			}
		}
		if kind == KeychainOAuth2 && cfgAny(entry, "endpoint", "token_url", "url") == nil && cfgAny(entry, "auth", "credential") == nil {
			b.errorf(item, "", field+".endpoint", "keychain entry %q (oauth2) needs an endpoint (the token URL), or an auth credential holding token_url", name)
			continue
		}
		if err := template.FirstCompileError(entry); err != nil {
			b.errorf(item, "", field, "keychain entry %q: %v", name, err)
			continue
		}
		b.kc[name] = entry
		lines[name] = item
		order = append(order, name)
	}
	b.kcOrder = order
	// An entry may read others (an oauth2 entry's client secret from a credential entry):
	// each must be declared, and none may read itself through the others.
	deps := map[string][]string{}
	for _, name := range order {
		refs, _ := template.KeychainRefs(b.kc[name])
		for _, r := range refs {
			if _, ok := b.kc[r]; !ok {
				b.errorf(lines[name], "", "keychain."+name, "keychain entry %q reads keychain.%s, which the keychain does not declare", name, r)
			}
		}
		deps[name] = refs
	}
	state := map[string]int{} // 1: on the path, 2: done
	var visit func(name string, path []string) bool
	visit = func(name string, path []string) bool {
		switch state[name] {
		case 1:
			b.errorf(lines[path[0]], "", "keychain."+path[0], "keychain entries read each other in a cycle: %s", strings.Join(append(path, name), " -> "))
			return false
		case 2:
			return true
		}
		state[name] = 1
		for _, d := range deps[name] {
			if _, ok := b.kc[d]; ok && !visit(d, append(path, name)) {
				return false
			}
		}
		state[name] = 2
		return true
	}
	for _, name := range order {
		if !visit(name, nil) {
			return
		}
	}
}

// stepKeychains gives each step the keychain entries its tool and input templates
// reference, with the entries those read (Step.Keychain). A reference to an entry the
// keychain does not declare is an error; a keychain reference in what the orchestrator
// renders (set, next, loop, when) is a warning: the orchestrator never resolves secrets.
func (b *builder) stepKeychains(pb *Playbook) {
	for _, s := range pb.Steps {
		vals := []any{s.Input}
		for _, t := range s.Tool {
			vals = append(vals, t.Config)
			if t.Kind == "workbook" {
				name, _ := t.Config["name"].(string)
				if name == "" {
					name, _ = t.Config["task"].(string)
				}
				if task := pb.Workbook[name]; task != nil {
					vals = append(vals, task.Config)
				}
			}
		}
		names, all := template.KeychainRefs(vals)
		if len(names) == 0 && !all {
			b.orchestratorKeychain(s)
			continue
		}
		want := map[string]bool{}
		var add func(name string)
		add = func(name string) {
			if want[name] {
				return
			}
			want[name] = true
			refs, _ := template.KeychainRefs(b.kc[name])
			for _, r := range refs {
				add(r)
			}
		}
		for _, n := range names {
			if _, ok := b.kc[n]; !ok {
				b.errorf(&yaml.Node{Line: s.Line}, s.Name, "tool", "step %s reads keychain.%s, which the keychain does not declare", s.Name, n)
				continue
			}
			add(n)
		}
		if all {
			for _, n := range b.kcOrder {
				add(n)
			}
		}
		var entries []any
		for _, n := range b.kcOrder {
			if want[n] {
				entries = append(entries, b.kc[n])
			}
		}
		if len(entries) > 0 {
			s.Keychain, _ = json.Marshal(entries)
		}
		b.orchestratorKeychain(s)
	}
}

// orchestratorKeychain warns about keychain references in the parts of a step the
// orchestrator renders: there keychain is undefined.
func (b *builder) orchestratorKeychain(s *Step) {
	parts := map[string]any{"set": s.Set, "when": s.When}
	if s.Loop != nil {
		parts["loop"] = s.Loop.InValue
	}
	if s.Next != nil {
		var arcs []any
		for _, a := range s.Next.Arcs {
			arcs = append(arcs, a.When, a.Set, a.Args)
		}
		parts["next"] = arcs
	}
	keys := make([]string, 0, len(parts))
	for k := range parts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if names, all := template.KeychainRefs(parts[k]); len(names) > 0 || all {
			b.warnings = append(b.warnings, Warning{Line: s.Line, Step: s.Name,
				Msg: fmt.Sprintf("keychain is resolved by the worker for tool and input templates only; in the step's %s it is undefined", k)})
		}
	}
}

// cfgAny returns the first of keys m holds with a non-empty value, or nil.
func cfgAny(m map[string]any, keys ...string) any {
	for _, k := range keys {
		if v, ok := m[k]; ok && v != nil && v != "" {
			return v
		}
	}
	return nil
}
