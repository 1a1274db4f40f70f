package domain

import "testing"

func TestOverrideName(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		tenant, path, name string
		ok                 bool
	}{
		{"acme", "acme/system/retention", "retention", true},
		{"acme", "/acme/system/retention", "retention", true},
		{"acme", "beta/system/retention", "", false}, // another tenant's path
		{"acme", "acme/system/a/b", "", false},
		{"acme", "acme/system/", "", false},
		{"acme", "system/retention", "", false},
		{"", "/system/retention", "", false},
		{"acme", "acmex/system/retention", "", false},
	} {
		name, ok := OverrideName(c.tenant, c.path)
		if name != c.name || ok != c.ok {
			t.Errorf("OverrideName(%q, %q) = %q, %v; want %q, %v", c.tenant, c.path, name, ok, c.name, c.ok)
		}
	}
	if n, ok := SystemName("system/cleanup"); !ok || n != "cleanup" {
		t.Errorf("SystemName(system/cleanup) = %q, %v", n, ok)
	}
}
