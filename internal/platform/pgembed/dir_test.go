//go:build unix

package pgembed

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDirForOrdinaryUser(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("as root the server user differs; TestDirForRoot covers it")
	}
	state := filepath.Join(t.TempDir(), "state")
	d, err := DirFor(state)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(state, "postgres"), d)
}

func TestDirForRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only as root does the server run as another user (postgres)")
	}
	if _, err := runAs(); err != nil {
		t.Skip("no postgres system user:", err)
	}
	sys := filepath.Join(tempDir(t), "sys")
	old := systemDir
	systemDir = sys
	t.Cleanup(func() { systemDir = old })

	// Reachable: a state directory under a 0755 directory stays beside its state.
	open := tempDir(t)
	require.NoError(t, os.Chmod(open, 0o755))
	d, err := DirFor(filepath.Join(open, "state"))
	require.NoError(t, err)
	require.Equal(t, filepath.Join(open, "state", "postgres"), d)

	// Unreachable (t.TempDir's parent is 0700 root, like /root): the cluster moves under
	// the system dir, to the same place every time, and another state dir gets another.
	private := filepath.Join(t.TempDir(), "home", ".cache", "noetl", "dev")
	d1, err := DirFor(private)
	require.NoError(t, err)
	require.Equal(t, sys, filepath.Dir(d1))
	require.Regexp(t, `^dev-[0-9a-f]{12}$`, filepath.Base(d1))
	d2, err := DirFor(private + "/")
	require.NoError(t, err)
	require.Equal(t, d1, d2, "the same state dir maps to the same cluster")
	other, err := DirFor(filepath.Join(t.TempDir(), "dev"))
	require.NoError(t, err)
	require.NotEqual(t, d1, other, "two state dirs never share a cluster")

	// A system dir another user could write is refused, naming the directory.
	require.NoError(t, os.MkdirAll(sys, 0o755))
	require.NoError(t, os.Chmod(sys, 0o777))
	_, err = DirFor(private)
	require.ErrorContains(t, err, sys+" must be a directory owned by root")
}

// TestStartInDirForAsRoot starts a cluster where DirFor puts it for a state dir the
// postgres user cannot reach, as `noetl dev` does for root's default state dir.
func TestStartInDirForAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only meaningful as root")
	}
	base := tempDir(t)
	require.NoError(t, os.Chmod(base, 0o755)) // as /var/lib is
	old := systemDir
	systemDir = filepath.Join(base, "noetl", "postgres")
	t.Cleanup(func() { systemDir = old })
	d, err := DirFor(filepath.Join(t.TempDir(), "state"))
	require.NoError(t, err)
	c := start(t, Options{Dir: d, Fast: true})
	require.Equal(t, 1, queryInt(t, c.URL(), "select 1"))
	require.NoError(t, c.Stop())
}
