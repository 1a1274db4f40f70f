package chaos

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// secretForms are the byte strings that would betray the sentinel: the value itself (its
// URL and JSON escapes are the same text: it is letters, digits and dashes) and its base64
// forms, alone and as the Authorization header the http tool sends.
func secretForms(sentinel string) [][]byte {
	var out [][]byte
	for _, v := range []string{sentinel, "Bearer " + sentinel} {
		if v == sentinel {
			out = append(out, []byte(v))
		}
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			out = append(out, []byte(enc.EncodeToString([]byte(v))))
		}
	}
	return minimalForms(out)
}

// minimalForms drops repeats and every form that contains another (the shorter one
// matches wherever it does), so that one occurrence counts once.
func minimalForms(forms [][]byte) [][]byte {
	var out [][]byte
	for i, f := range forms {
		keep := true
		for j, g := range forms {
			if i == j {
				continue
			}
			if bytes.Contains(f, g) && (len(g) < len(f) || j < i) {
				keep = false
				break
			}
		}
		if keep {
			out = append(out, f)
		}
	}
	return out
}

// grepDir counts, per file under dir (skipping the skip directories), the occurrences of
// any of the forms. It reads every file in 1 MiB pieces with an overlap, so a form split
// across two pieces is found.
func grepDir(dir string, skip []string, forms [][]byte) (map[string]int, int, error) {
	longest := 0
	for _, f := range forms {
		longest = max(longest, len(f))
	}
	hits := map[string]int{}
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a file removed while we walk (WAL recycling, NATS compaction)
			}
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			for _, s := range skip {
				if rel == s {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		files++
		n, err := grepFile(path, forms, longest)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if n > 0 {
			hits[rel] += n
		}
		return nil
	})
	return hits, files, err
}

func grepFile(path string, forms [][]byte, longest int) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	buf := make([]byte, 1<<20+longest)
	keep := 0
	n := 0
	for {
		m, err := io.ReadFull(f, buf[keep:])
		chunk := buf[:keep+m]
		for _, form := range forms {
			n += countIn(chunk, form, keep)
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return n, nil
			}
			return n, err
		}
		// Keep the tail that could start a form continuing in the next piece.
		keep = min(longest-1, len(chunk))
		copy(buf, chunk[len(chunk)-keep:])
	}
}

// countIn counts occurrences of form in chunk that end past the first kept bytes (those
// were counted with the previous piece).
func countIn(chunk, form []byte, kept int) int {
	n := 0
	for i := 0; ; {
		j := bytes.Index(chunk[i:], form)
		if j < 0 {
			return n
		}
		if i+j+len(form) > kept {
			n++
		}
		i += j + 1
	}
}

// secrets checks that the sentinel token appears nowhere: Postgres (its data directory:
// the log, results, snapshots, the WAL), the NATS nodes' JetStream stores (the streams'
// messages) and every service's log file, and reports how often the echo server saw it
// (that the secret was used at all).
func (k *checker) secrets() error {
	c := k.criterion("secrets", classUnexpected, "the sentinel token (a credential sent by the http tool to the echo server, which echoes it back) appears nowhere in Postgres's data directory (noetl.event, results, snapshots, WAL), the NATS JetStream stores or the service logs, raw or base64")
	hits, files, err := grepDir(k.c.dir, []string{"bin", "src"}, secretForms(k.sentinel))
	if err != nil {
		return err
	}
	c.Checked = files
	names := make([]string, 0, len(hits))
	for name := range hits {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c.fail("%s: %d occurrences", name, hits[name])
	}
	c.Detail["sent_to_echo_server"] = k.echo.withSentinel.Load()
	c.Detail["echo_requests"] = k.echo.requests.Load()
	if k.echo.withSentinel.Load() == 0 {
		c.Detail["note"] = "the echo server never saw the sentinel: the secret playbook did not exercise the credential"
	}
	c.Detail["searched"] = strings.Join([]string{"postgres/", "nats/", "logs/", "history.jsonl"}, " ")
	return nil
}
