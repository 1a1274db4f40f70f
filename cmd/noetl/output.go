package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The output formats of the read commands (-o).
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

// outputFormat resolves the -o flag: its value when set, else a table on a terminal and
// JSON anywhere else (a script reading the output).
func outputFormat(flag string, w io.Writer) (string, error) {
	switch flag {
	case formatTable, formatJSON, formatYAML:
		return flag, nil
	case "":
		if isTerminal(w) {
			return formatTable, nil
		}
		return formatJSON, nil
	}
	return "", fmt.Errorf("--output %q: want table, json or yaml", flag)
}

// listing is what a read command prints: its items as messages (for JSON and YAML) and as
// rows under columns (for a table).
type listing struct {
	columns []string
	rows    [][]string
	items   []proto.Message
}

// add appends an item with its table row.
func (l *listing) add(m proto.Message, row ...string) {
	l.items = append(l.items, m)
	l.rows = append(l.rows, row)
}

// print writes l in format: a table with a header, JSON Lines (one object per line, as
// `jq` and line tools read them), or a YAML sequence.
func (l *listing) print(w io.Writer, format string) error {
	switch format {
	case formatTable:
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(l.columns, "\t"))
		for _, r := range l.rows {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		return tw.Flush()
	case formatJSON:
		for _, m := range l.items {
			b, err := protojson.Marshal(m)
			if err != nil {
				return err
			}
			fmt.Fprintln(w, string(b))
		}
		return nil
	default:
		docs := make([]any, 0, len(l.items))
		for _, m := range l.items {
			v, err := plain(m)
			if err != nil {
				return err
			}
			docs = append(docs, v)
		}
		return writeYAML(w, docs)
	}
}

// printOne writes one message: indented JSON, YAML, or for a table the key/value lines
// of table (field, value pairs).
func printOne(w io.Writer, format string, m proto.Message, table [][2]string) error {
	switch format {
	case formatJSON:
		// protojson's own indentation varies from build to build, by design; encoding/json's
		// is stable, which scripts and diffs of the output prefer.
		b, err := protojson.Marshal(m)
		if err != nil {
			return err
		}
		var out bytes.Buffer
		if err := json.Indent(&out, b, "", "  "); err != nil {
			return err
		}
		out.WriteByte('\n')
		_, err = w.Write(out.Bytes())
		return err
	case formatYAML:
		v, err := plain(m)
		if err != nil {
			return err
		}
		return writeYAML(w, v)
	default:
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, kv := range table {
			fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
		}
		return tw.Flush()
	}
}

// plain is m as the generic value of its protojson form, so that YAML shows the same
// field names as JSON.
func plain(m proto.Message) (any, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return v, nil
}

func writeYAML(w io.Writer, v any) error {
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return err
	}
	return enc.Close()
}

// when formats a timestamp for a table: local time to the second, "-" when unset.
func when(ts *timestamppb.Timestamp) string {
	if ts == nil || !ts.IsValid() || ts.AsTime().IsZero() {
		return "-"
	}
	return ts.AsTime().Local().Format("2006-01-02 15:04:05")
}

// took formats the time from start to end for a table ("-" until it ended).
func took(start, end *timestamppb.Timestamp) string {
	if start == nil || end == nil || !start.IsValid() || !end.IsValid() {
		return "-"
	}
	d := end.AsTime().Sub(start.AsTime())
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}
