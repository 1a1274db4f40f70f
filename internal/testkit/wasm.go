package testkit

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Plug-in packages of the repository that BuildWasm builds.
const (
	// SamplePlugin is the sample plug-in (docs/plugins.md).
	SamplePlugin = "./plugins/sample"
	// SpinPlugin never ends (a time limit's test).
	SpinPlugin = "./plugins/internal/fixtures/spin"
	// HogPlugin allocates until memory runs out (a memory limit's test).
	HogPlugin = "./plugins/internal/fixtures/hog"
	// SysinfoPlugin uses worker_info, a capability of system modules.
	SysinfoPlugin = "./plugins/internal/fixtures/sysinfo"
)

var wasmBuilds sync.Map // pkg + "\x00" + ldflags -> *wasmBuild

type wasmBuild struct {
	once sync.Once
	mod  []byte
	err  error
}

// BuildWasm builds a plug-in package of the repository (SamplePlugin, ...) with the
// standard Go toolchain, GOOS=wasip1 GOARCH=wasm go build, with the -ldflags given (for
// example "-X main.version=v2"), and returns the module; each build is made once per
// test binary, in a temporary directory.
func BuildWasm(t testing.TB, pkg, ldflags string) []byte {
	t.Helper()
	v, _ := wasmBuilds.LoadOrStore(pkg+"\x00"+ldflags, &wasmBuild{})
	b := v.(*wasmBuild)
	b.once.Do(func() {
		root, err := repoRoot()
		if err != nil {
			b.err = err
			return
		}
		dir, err := os.MkdirTemp("", "noetl-wasm-")
		if err != nil {
			b.err = err
			return
		}
		defer func() { _ = os.RemoveAll(dir) }()
		out := filepath.Join(dir, "plugin.wasm")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.err = errors.New("build " + pkg + ": " + err.Error() + ": " + string(msg))
			return
		}
		b.mod, b.err = os.ReadFile(out)
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.mod
}

// repoRoot is the directory holding go.work, above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work above the working directory")
		}
		dir = parent
	}
}
