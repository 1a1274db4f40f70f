package chaos

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// secretColumns are the columns that could hold a value a command produced, read
// through SQL: on disk Postgres compresses large values (TOAST), where a grep cannot see.
var secretColumns = []struct{ table, expr string }{
	{"noetl.event", "body"},
	{"noetl.result", "extracted"},
	{"noetl.result", "convert_to(schema_json, 'UTF8')"},
	{"noetl.result_chunk", "data"},
	{"noetl.state_snapshot", "body"},
	{"noetl.credential", "convert_to(coalesce(data::text, ''), 'UTF8')"},
	{"noetl.credential", "ciphertext"},
	{"noetl.catalog", "convert_to(content, 'UTF8')"},
}

// secrets checks that the sentinel token appears nowhere: the tables of noetl (through
// SQL), Postgres's data directory (the WAL included), every message left in the three
// streams (read back through JetStream), the NATS nodes' stores and every service's log
// file; and reports how often the echo server saw it (that the secret was used at all).
func (k *checker) secrets(ctx context.Context, js jetstream.JetStream) error {
	c := k.criterion("secrets", classUnexpected, "the sentinel token (a credential sent by the http tool to the echo server, which echoes it back) appears nowhere, raw or base64: not in noetl.event, results, snapshots, credentials or the catalog (SQL), the messages of the three streams (JetStream), Postgres's data directory and WAL, the NATS stores, or the service logs")
	forms := secretForms(k.sentinel)
	for _, col := range secretColumns {
		for _, f := range forms {
			c.Checked++
			var n int
			q := fmt.Sprintf("SELECT count(*) FROM %s WHERE position($1::bytea IN %s) > 0", col.table, col.expr)
			if err := k.db.QueryRow(ctx, q, f).Scan(&n); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
			if n > 0 {
				c.fail("%s.%s: %d rows", col.table, col.expr, n)
			}
		}
	}
	msgs := 0
	for _, stream := range []string{"NOETL_EVENTS", "NOETL_COMMANDS", "NOETL_COMMITTED"} {
		n, found, err := grepStreamRetrying(ctx, js, stream, forms)
		if err != nil {
			return fmt.Errorf("read %s: %w", stream, err)
		}
		msgs += n
		if found > 0 {
			c.fail("stream %s: %d messages", stream, found)
		}
	}
	c.Detail["stream_messages_read"] = msgs
	hits, files, err := grepDir(k.c.dir, []string{"bin", "src"}, forms)
	if err != nil {
		return err
	}
	c.Checked += files
	c.Detail["files_read"] = files
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
	return nil
}

// grepStreamRetrying is grepStream, read again from the start while JetStream answers
// nothing (its meta leader re-elected after a node's restart: "no responders") or times
// out, for up to a minute.
func grepStreamRetrying(ctx context.Context, js jetstream.JetStream, stream string, forms [][]byte) (read, found int, err error) {
	deadline := time.Now().Add(time.Minute)
	backoff := 250 * time.Millisecond
	for {
		read, found, err = grepStream(ctx, js, stream, forms)
		transient := errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrNoHeartbeat)
		if err == nil || !transient || time.Now().After(deadline) || ctx.Err() != nil {
			return read, found, err
		}
		select {
		case <-ctx.Done():
			return read, found, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 4*time.Second)
	}
}

// grepStream reads every message a stream holds with an ordered consumer and counts
// those whose data or headers hold a form.
func grepStream(ctx context.Context, js jetstream.JetStream, stream string, forms [][]byte) (read, found int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, 0, err
	}
	if info.State.Msgs == 0 {
		return 0, 0, nil
	}
	last := info.State.LastSeq
	holds := func(data []byte, h nats.Header) bool {
		for _, f := range forms {
			if bytes.Contains(data, f) {
				return true
			}
			for _, vs := range h {
				for _, v := range vs {
					if bytes.Contains([]byte(v), f) {
						return true
					}
				}
			}
		}
		return false
	}
	if info.Config.Retention != jetstream.LimitsPolicy {
		// A work queue (NOETL_COMMANDS) takes no consumer beside its pools' (and a
		// replicated one none of another replica count): read what it holds, its pending
		// commands and its keeper, message by message.
		for seq := info.State.FirstSeq; seq > 0 && seq <= last; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue // acknowledged, or replaced
			}
			if err != nil {
				return read, found, err
			}
			read++
			if holds(m.Data, m.Header) {
				found++
			}
		}
		return read, found, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, 0, err
	}
	for {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return read, found, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			read++
			if holds(m.Data(), m.Headers()) {
				found++
			}
			if md, err := m.Metadata(); err == nil && md.Sequence.Stream >= last {
				return read, found, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return read, found, err
		}
		if got == 0 {
			return read, found, nil // nothing more within the wait: the stream's end
		}
	}
}
