package domain

import "strings"

// SystemPrefix is the path prefix of the system playbooks shipped with the platform.
const SystemPrefix = "system/"

// SystemName returns the name of a system playbook's path (system/<name>), or false.
func SystemName(path string) (string, bool) {
	name, ok := strings.CutPrefix(strings.TrimPrefix(path, "/"), SystemPrefix)
	if !ok || name == "" || strings.Contains(name, "/") {
		return "", false
	}
	return name, true
}

// OverrideName returns the name of the system playbook a tenant's path overrides: the path
// is <tenant>/system/<name> for that very tenant. Any other path is no override (a
// tenant cannot override for another).
func OverrideName(tenant, path string) (string, bool) {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(path, "/"), tenant+"/")
	if !ok || tenant == "" {
		return "", false
	}
	return SystemName(rest)
}

// OverridePath is the path of tenant's override of the system playbook name.
func OverridePath(tenant, name string) string { return tenant + "/" + SystemPrefix + name }
