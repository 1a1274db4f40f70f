package domain

import "testing"

// TestPoolForLeadingSlash: the catalog takes /system/x for system/x, so the pool rule
// must too, or a leading slash would start a system playbook without the system role.
func TestPoolForLeadingSlash(t *testing.T) {
	for path, want := range map[string]string{"system/x": "system", "/system/x": "system", "systemx/y": "shared", "a/system/x": "shared", "/a": "shared"} {
		if got := PoolFor(path); got != want {
			t.Errorf("PoolFor(%q) = %q, want %q", path, got, want)
		}
	}
}
