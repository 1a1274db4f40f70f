package playbook

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/noetl/noetl/internal/playbook/template"
	"go.yaml.in/yaml/v3"
)

// SQLLiteralDigestsKey is the tool configuration key under which Parse records the
// SHA-256 digests (hex) of the SQL fields of a tool that hold no template: the SQL text
// the author wrote as it stands. The postgres tool runs several statements only when the
// SQL it is about to run has one of these digests (or the tool sets multi_statement:
// true); any other SQL text runs as exactly one statement. Parse sets the key on the
// tools that carry SQL (kinds postgres and duckdb, and workbook calls that set a SQL
// field) and removes it from every other tool, so an author's own value never survives.
const SQLLiteralDigestsKey = "_sql_literal_sha256"

// SQLTextDigest returns the digest of sql that Parse records under SQLLiteralDigestsKey.
func SQLTextDigest(sql string) string {
	sum := sha256.Sum256([]byte(sql))
	return hex.EncodeToString(sum[:])
}

// sqlFields are the keys of a tool mapping that hold SQL text, in the order the postgres
// tool reads them.
var sqlFields = []string{"command", "query"}

// sqlKinds are the tool kinds whose SQL fields Parse checks.
var sqlKinds = map[string]bool{"postgres": true, "duckdb": true, "workbook": true}

// maxListedSQLTemplates bounds the templates one warning names.
const maxListedSQLTemplates = 3

// sqlTool is Parse's SQL check of one tool mapping n: for a tool that carries SQL text it
// records the digests of its template-free SQL fields under SQLLiteralDigestsKey, warns
// once per SQL field about the templates spliced into the text without sql_literal or
// sql_ident, and requires multi_statement to be a literal boolean (dropping any other
// value, so that a workbook task, kept despite errors, never honours one).
func (b *builder) sqlTool(n *yaml.Node, t *Tool, step, field string) {
	delete(t.Config, SQLLiteralDigestsKey)
	if !sqlKinds[t.Kind] {
		return
	}
	var digests []any
	for _, key := range sqlFields {
		src, ok := t.Config[key].(string)
		if !ok {
			continue
		}
		if !template.IsTemplate(src) {
			digests = append(digests, SQLTextDigest(src))
			continue
		}
		spliced := template.SQLSplices(src) // none when it does not compile: refs warns
		if len(spliced) == 0 {
			continue
		}
		line := n.Line
		if vn := value(n, key); vn != nil {
			line = vn.Line
			if vn.Style&yaml.LiteralStyle != 0 {
				line += spliced[0].Line // the text starts on the line after the indicator
			}
		}
		b.warnings = append(b.warnings, Warning{Line: line, Step: step, Msg: sqlWarning(field+"."+key, spliced)})
	}
	if len(digests) > 0 {
		t.Config[SQLLiteralDigestsKey] = digests
	}
	if v, ok := t.Config["multi_statement"]; ok && v != nil {
		if _, isBool := v.(bool); !isBool {
			b.errorf(value(n, "multi_statement"), step, field+".multi_statement", "must be a literal true or false, not %s", describeValue(v))
			// A workbook task is kept despite the error (as a warning): never honour the value.
			delete(t.Config, "multi_statement")
		}
	}
}

// describeValue names a configuration value for an error.
func describeValue(v any) string {
	switch x := v.(type) {
	case string:
		if template.IsTemplate(x) {
			return "a template"
		}
		return fmt.Sprintf("the string %q", template.Shorten(x))
	case int64, float64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return template.TypeName(v)
}

// sqlWarning formats the warning about the splices of one SQL field.
func sqlWarning(field string, spliced []template.Splice) string {
	var texts []string
	for _, s := range spliced {
		if !slices.Contains(texts, s.Text) {
			texts = append(texts, s.Text)
		}
	}
	if len(texts) == 1 {
		return fmt.Sprintf("template %s is spliced into SQL text (%s); pass it through sql_literal or sql_ident, or bind it with params", texts[0], field)
	}
	list := strings.Join(texts[:min(len(texts), maxListedSQLTemplates)], ", ")
	if more := len(texts) - maxListedSQLTemplates; more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Sprintf("templates %s are spliced into SQL text (%s); pass them through sql_literal or sql_ident, or bind them with params", list, field)
}
