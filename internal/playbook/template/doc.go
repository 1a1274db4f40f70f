// Package template evaluates the Jinja2 templates that appear in playbook values, with
// NoETL's semantics, and analyses them for the playbook parser.
//
// Renderer uses gonja v2 for lexing and parsing and its own evaluator, which gives:
// chainable undefined values (a.b.c of an undefined a is undefined, not an error);
// typed results for a string that is exactly one expression ("{{ n }}" renders the
// number, a mapping or a list, not its text); and real errors, never a silent false,
// for syntax errors, unknown filters and tests and type errors (*TemplateError).
//
// What it guarantees to a caller rendering untrusted templates:
//
//   - Limits: one Render or Eval call produces at most MaxOutput bytes (the sum over every
//     string it renders, and the longest string or list an expression may build) and runs
//     at most MaxRenderTime; values nest at most 128 levels, expressions 256, and range()
//     yields at most 100,000 items. Past a limit the call fails with ErrOutputLimit or
//     ErrTimeLimit (wrapped), never with a partial result.
//   - Sandbox: templates only read the data they are given. There are no globals but the
//     context's names and three pure functions (range, dict, namespace); no attribute of a
//     value leads to code: dunder attributes, Python frame and code attributes and Jinja's
//     engine globals (config, lipsum, self, ...) fail the render with ErrForbidden.
//   - Compiled templates are cached, bounded by count and by total source size; a
//     Renderer is safe for concurrent use.
//
// The sql_literal and sql_ident filters quote values for SQL text; SQLSplices finds the
// outputs of a template spliced into SQL without them. Names, NameRefs and KeychainRefs
// list the names a template reads, without evaluating it.
package template
