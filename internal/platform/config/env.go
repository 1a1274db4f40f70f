package config

import (
	"os"
	"strings"
	"time"
)

// Env reads NOETL_* variables by the rules Parse applies to them, for a program whose
// flags are bound elsewhere (noetl's cobra commands). Each getter returns the variable's
// value, or def when it is unset (or, for a typed one, empty); a malformed value, or one
// that fails a check, is recorded and def returned. Err reports every problem recorded,
// naming the variable and the value:
//
//	var env config.Env
//	pg := env.Secret("NOETL_PG_URL", "")
//	n := env.Int("NOETL_WORKER_CONCURRENCY", 64, config.Positive)
//	if err := env.Err(); err != nil {
//		return err
//	}
//
// The zero Env reads the process environment.
type Env struct {
	// Lookup, when set, is used instead of os.LookupEnv (tests).
	Lookup func(name string) (string, bool)
	errs   Errors
}

// Err returns the problems recorded so far: nil, one error, or Errors.
func (e *Env) Err() error { return e.errs.err() }

func (e *Env) lookup(name string) (string, bool) {
	if e.Lookup != nil {
		return e.Lookup(name)
	}
	return os.LookupEnv(name)
}

// read reads name into a setting of type T and records its problem.
func read[T any](e *Env, name string, def T, secret bool, parse func(string) (T, error), checks []func(T) error) T {
	text, ok := e.lookup(name)
	if !ok || (parse != nil && strings.TrimSpace(text) == "") {
		return def
	}
	x := def
	v := &value[T]{meta: meta{name: name, env: name, secret: secret}, p: &x, parse: parse, checks: checks}
	if err := v.Set(text); err != nil {
		e.errs = append(e.errs, problem(name, &v.meta, v.failed, err))
		return def
	}
	if err := v.check(); err != nil {
		e.errs = append(e.errs, problem(name, &v.meta, v.raw, err))
		return def
	}
	return x
}

// String returns the string variable name, or def when it is unset.
func (e *Env) String(name, def string, checks ...func(string) error) string {
	return read(e, name, def, false, nil, checks)
}

// Secret is String for a value that errors mask.
func (e *Env) Secret(name, def string, checks ...func(string) error) string {
	return read(e, name, def, true, nil, checks)
}

// Int returns the int variable name (see FlagSet.Int).
func (e *Env) Int(name string, def int, checks ...func(int) error) int {
	return read(e, name, def, false, ParseInt, checks)
}

// Bool returns the bool variable name (see FlagSet.Bool).
func (e *Env) Bool(name string, def bool, checks ...func(bool) error) bool {
	return read(e, name, def, false, ParseBool, checks)
}

// Duration returns the duration variable name (see FlagSet.Duration).
func (e *Env) Duration(name string, def time.Duration, checks ...func(time.Duration) error) time.Duration {
	return read(e, name, def, false, ParseDuration, checks)
}
