package playbook

import "testing"

func TestCatalogPaths(t *testing.T) {
	for in, want := range map[string]string{"/team/job": "team/job", "team/job": "team/job", "//x": "/x", "": ""} {
		if got := CleanPath(in); got != want {
			t.Errorf("CleanPath(%q) = %q, want %q", in, got, want)
		}
	}
	for _, ok := range []string{"team/job", "a", "_x/y.z-1", "A/B"} {
		if err := CheckPath(ok); err != nil {
			t.Errorf("CheckPath(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "/x", "a//b", "a/../b", "./a", "a/.", "-a", "a b", "é", string(make([]byte, MaxPathLen+1))} {
		if err := CheckPath(bad); err == nil {
			t.Errorf("CheckPath(%q) accepted", bad)
		}
	}
}
