package template

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// The exact input of issue 12: an identifier that closes its quotes and adds a statement.
const injectedName = `users"; drop table victim; --`

func TestSQLLiteral(t *testing.T) {
	t.Parallel()
	r := NewRenderer()
	ctx := map[string]any{
		"s": "it's a \\ test", "n": int64(-3), "f": 2.5, "neg": -0.25, "big": 1e21, "whole": 3.0,
		"yes": true, "no": false, "none": nil, "list": []any{int64(1), "a'b"}, "doc": map[string]any{"k": "<v>"},
		"nan": math.NaN(), "inf": math.Inf(1), "ninf": math.Inf(-1), "t": injectedName,
	}
	for src, want := range map[string]string{
		"{{ s | sql_literal }}":                        `'it''s a \ test'`,
		"{{ t | sql_literal }}":                        `'users"; drop table victim; --'`,
		"{{ n | sql_literal }}":                        `(-3)`,
		"{{ 7 | sql_literal }}":                        `7`,
		"{{ f | sql_literal }}":                        `2.5`,
		"{{ neg | sql_literal }}":                      `(-0.25)`,
		"{{ big | sql_literal }}":                      `1e+21`,
		"{{ whole | sql_literal }}":                    `3.0`,
		"{{ yes | sql_literal }}":                      `TRUE`,
		"{{ no | sql_literal }}":                       `FALSE`,
		"{{ none | sql_literal }}":                     `NULL`,
		"{{ missing | sql_literal }}":                  `NULL`,
		"{{ list | sql_literal }}":                     `'[1,"a''b"]'`,
		"{{ doc | sql_literal }}":                      `'{"k":"<v>"}'`,
		"{{ nan | sql_literal }}":                      `CAST('NaN' AS DOUBLE PRECISION)`,
		"{{ inf | sql_literal }}":                      `CAST('Infinity' AS DOUBLE PRECISION)`,
		"{{ ninf | sql_literal }}":                     `CAST('-Infinity' AS DOUBLE PRECISION)`,
		"x -{{ n | sql_literal }}":                     `x -(-3)`,
		"{{ list | map('sql_literal') | join(', ') }}": `1, 'a''b'`,
	} {
		got, err := r.Render(src, ctx)
		require.NoError(t, err, src)
		require.Equal(t, want, got, src)
	}
	for src, msg := range map[string]string{
		`{{ "a\x00b" | sql_literal }}`: "NUL",
		`{{ "\xff" | sql_literal }}`:   "UTF-8",
	} {
		_, err := r.Render(src, ctx)
		require.ErrorContains(t, err, msg, src)
		require.ErrorContains(t, err, "filter sql_literal", src)
	}
}

func TestSQLIdent(t *testing.T) {
	t.Parallel()
	r := NewRenderer()
	ctx := map[string]any{"t": injectedName, "q": "public.users", "parts": []any{"my schema", `a"b`}, "n": int64(1), "none": nil}
	for src, want := range map[string]string{
		"{{ t | sql_ident }}":              `"users""; drop table victim; --"`,
		"{{ 'users' | sql_ident }}":        `"users"`,
		"{{ q | sql_ident }}":              `"public.users"`,
		"{{ q | sql_ident(true) }}":        `"public"."users"`,
		"{{ q | sql_ident(dotted=true) }}": `"public"."users"`,
		"{{ parts | sql_ident }}":          `"my schema"."a""b"`,
		"{{ 'Ünïcode' | sql_ident }}":      `"Ünïcode"`,
	} {
		got, err := r.Render(src, ctx)
		require.NoError(t, err, src)
		require.Equal(t, want, got, src)
	}
	for src, msg := range map[string]string{
		"{{ '' | sql_ident }}":              "empty name",
		"{{ 'a..b' | sql_ident(true) }}":    "empty name",
		`{{ "a\x00" | sql_ident }}`:         "NUL",
		"{{ n | sql_ident }}":               "must be a string",
		"{{ none | sql_ident }}":            "null is not a name",
		"{{ missing | sql_ident }}":         "missing is undefined",
		"{{ [] | sql_ident }}":              "empty list",
		"{{ [1] | sql_ident }}":             "list of strings",
		"{{ ['a', ''] | sql_ident }}":       "empty name",
		"select * from {{ n | sql_ident }}": "filter sql_ident",
	} {
		_, err := r.Render(src, ctx)
		require.ErrorContains(t, err, msg, src)
	}
}
