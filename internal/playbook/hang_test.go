package playbook

import (
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestHangHunt(t *testing.T) {
	files, _ := filepath.Glob("testdata/conformance/*.yaml")
	rng := rand.New(rand.NewSource(1))
	for iter := 0; iter < 20000; iter++ {
		src, _ := os.ReadFile(files[rng.Intn(len(files))])
		b := []byte(string(src))
		for k := 0; k < 1+rng.Intn(4); k++ {
			i := rng.Intn(len(b))
			switch rng.Intn(3) {
			case 0:
				b[i] = byte(rng.Intn(256))
			case 1:
				b = append(b[:i], b[i+1:]...)
			case 2:
				b = append(b[:i], append([]byte{"{}[]%:-'\"\n "[rng.Intn(11)]}, b[i:]...)...)
			}
		}
		done := make(chan struct{})
		go func() { Parse(b); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			os.WriteFile("/tmp/hang.yaml", b, 0o644)
			t.Fatalf("hang at iter %d", iter)
		}
	}
}
