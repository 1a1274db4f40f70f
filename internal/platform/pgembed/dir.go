//go:build unix

package pgembed

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// SystemDir holds the clusters that DirFor places outside their state
// directory. Only root can write under /var/lib, so no other user can plant a
// cluster or a symlink there for root's server to use.
const SystemDir = "/var/lib/noetl/postgres"

// systemDir is SystemDir, replaced in tests.
var systemDir = SystemDir

// DirFor returns the directory for the private cluster that belongs to the
// state directory state (a path that need not exist yet).
//
// For an ordinary user the server runs as that user, and the cluster is
// state/postgres. Running as root, the server runs as "postgres", which may
// not be able to reach state: /root is mode 0700 on Debian, so a state
// directory under root's cache is out of its reach. The cluster is then
// SystemDir/<base>-<hash>, where hash is derived from state's absolute path,
// so the same state directory finds its cluster again on the next start and
// two state directories never share one. DirFor refuses a SystemDir whose
// existing parts another user could write, and creates its missing parts
// with mode 0755.
func DirFor(state string) (string, error) {
	abs, err := filepath.Abs(state)
	if err != nil {
		return "", fmt.Errorf("pgembed: %w", err)
	}
	beside := filepath.Join(abs, "postgres")
	cred, err := runAs()
	if err != nil || cred == nil {
		return beside, err
	}
	if reachable(filepath.Dir(beside), cred) {
		return beside, nil
	}
	if err := rootOnly(systemDir); err != nil {
		return "", err
	}
	if err := mkdirSearchable(systemDir); err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(systemDir, filepath.Base(abs)+"-"+hex.EncodeToString(sum[:6])), nil
}

// mkdirSearchable creates dir and its missing parents with mode 0755 whatever
// the umask, so that the server user can traverse them.
func mkdirSearchable(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := mkdirSearchable(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("pgembed: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("pgembed: %w", err)
	}
	return nil
}

// reachable reports whether the user in cred can traverse every existing
// directory from dir up to the root (missing ones are created searchable).
func reachable(dir string, cred *syscall.Credential) bool {
	for p := dir; ; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil && !searchable(fi, cred) {
			return false
		}
		if p == filepath.Dir(p) {
			return true
		}
	}
}

// rootOnly checks that every existing directory from dir up to the root is
// owned by root and writable by no one else.
func rootOnly(dir string) error {
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return fmt.Errorf("pgembed: %w", err)
		default:
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !fi.IsDir() || !ok || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
				return fmt.Errorf("pgembed: %s must be a directory owned by root and writable only by root to hold root's private Postgres clusters (it is %v, owner uid %d); fix it, or set NOETL_PG_URL", p, fi.Mode(), uidOf(fi))
			}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

func uidOf(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
