// Package config binds service configuration to command-line flags and NOETL_* environment
// variables, so every setting has both a flag and an env var: the flag wins over the
// variable, which wins over the default.
//
// Configuration errors are errors: a malformed value (NOETL_WORKER_CONCURRENCY=8x,
// --stale-after=soon) or one outside its setting's checks (a negative concurrency) makes
// Parse fail with a message naming the variable or flag and the value, never falls back to
// the default. An environment variable set to the empty string counts as unset for a typed
// (int, bool, duration) setting; for a string setting it sets the empty string.
//
// No flag/env library served: the variable names are a public contract (the README, the
// Helm chart, docs/operations.md) that does not derive from the flag names (--pg is
// NOETL_PG_URL, the worker's --flight is NOETL_RESULTSTORE_FLIGHT_ADDR, the resultstore's
// --flight is NOETL_RESULTSTORE_FLIGHT), and ff derives one from the other, while the
// env-only libraries bind struct tags with literal defaults and no flags.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// FlagSet wraps a flag.FlagSet and remembers the env var of each flag.
type FlagSet struct {
	*flag.FlagSet
	settings []setting
	byName   map[string]setting
	print    bool
}

// setting is one bound flag: its flag.Value plus what Parse needs to read its variable and
// to report a bad value.
type setting interface {
	flag.Value
	info() *meta
	// typed reports that the setting parses its text (an empty variable is then unset).
	typed() bool
	// check runs the setting's checks on its current value.
	check() error
}

// meta is what every setting knows about itself.
type meta struct {
	name, env string
	secret    bool
	// raw is the text of the last successful Set; failed is the text of the last failed
	// one and setErr its error (read after flag.FlagSet.Parse fails).
	raw, failed string
	setErr      error
}

func (m *meta) info() *meta { return m }

// value is a setting of type T.
type value[T any] struct {
	meta
	p      *T
	parse  func(string) (T, error)
	checks []func(T) error
	isBool bool
}

// Set parses s into the setting; the error says what is wrong without naming the setting.
func (v *value[T]) Set(s string) error {
	if v.parse != nil {
		s = strings.TrimSpace(s)
	}
	var x T
	var err error
	if v.parse == nil {
		x = any(s).(T)
	} else if x, err = v.parse(s); err != nil {
		v.failed, v.setErr = s, err
		return err
	}
	*v.p, v.raw = x, s
	return nil
}

// String formats the current value (the flag package calls it on a zero value too).
func (v *value[T]) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return fmt.Sprint(*v.p)
}

// addr is the address of the setting's variable.
func (v *value[T]) addr() uintptr { return reflect.ValueOf(v.p).Pointer() }

// Get returns the current value (flag.Getter): an int, bool, time.Duration or string.
func (v *value[T]) Get() any { return *v.p }

// IsBoolFlag lets a bool setting be given as a bare --name.
func (v *value[T]) IsBoolFlag() bool { return v.isBool }

func (v *value[T]) typed() bool { return v.parse != nil }

func (v *value[T]) check() error {
	for _, c := range v.checks {
		if err := c(*v.p); err != nil {
			return err
		}
	}
	return nil
}

// New returns a FlagSet named after the program. --print-config and -h print to standard
// output unless SetOutput says otherwise.
func New(name string) *FlagSet {
	f := &FlagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), byName: map[string]setting{}}
	f.SetOutput(os.Stdout)
	return f
}

func bind[T any](f *FlagSet, p *T, name, env string, def T, usage string, parse func(string) (T, error), checks []func(T) error) *value[T] {
	*p = def
	v := &value[T]{meta: meta{name: name, env: env}, p: p, parse: parse, checks: checks}
	f.Var(v, name, usage+" ($"+env+")")
	f.settings = append(f.settings, v)
	f.byName[name] = v
	return v
}

// String binds a string setting.
func (f *FlagSet) String(p *string, name, env, def, usage string, checks ...func(string) error) {
	bind(f, p, name, env, def, usage, nil, checks)
}

// Secret binds a string setting whose value is masked by Print and in errors.
func (f *FlagSet) Secret(p *string, name, env, def, usage string, checks ...func(string) error) {
	bind(f, p, name, env, def, usage, nil, checks).secret = true
}

// Int binds an int setting: a value that is not a decimal integer, or fails one of checks
// (Positive, NonNegative), makes Parse fail.
func (f *FlagSet) Int(p *int, name, env string, def int, usage string, checks ...func(int) error) {
	bind(f, p, name, env, def, usage, ParseInt, checks)
}

// Bool binds a bool setting (true, false, 1, 0, t, f in any case).
func (f *FlagSet) Bool(p *bool, name, env string, def bool, usage string, checks ...func(bool) error) {
	bind(f, p, name, env, def, usage, ParseBool, checks).isBool = true
}

// Duration binds a duration setting (a number with a unit: 30s, 5m, 1h30m; 0 alone): any
// other value, or one that fails one of checks (Positive, NonNegative), makes Parse fail.
func (f *FlagSet) Duration(p *time.Duration, name, env string, def time.Duration, usage string, checks ...func(time.Duration) error) {
	bind(f, p, name, env, def, usage, ParseDuration, checks)
}

// ParseInt parses a decimal int setting; its error says only what is wrong with the text.
func ParseInt(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if errors.Is(err, strconv.ErrRange) {
		return 0, errors.New("integer out of range")
	}
	if err != nil {
		return 0, errors.New("invalid integer")
	}
	return n, nil
}

// ParseBool parses a bool setting as strconv.ParseBool does.
func ParseBool(s string) (bool, error) {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, errors.New("invalid boolean (want true or false)")
	}
	return b, nil
}

// ParseDuration parses a duration setting as time.ParseDuration does.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("invalid duration (want a number with a unit, e.g. 30s, 5m, 1h)")
	}
	return d, nil
}

// Positive is a check of an int or duration setting that must be above zero.
func Positive[T int | time.Duration](v T) error {
	if v <= 0 {
		return errors.New("must be positive")
	}
	return nil
}

// NonNegative is a check of an int or duration setting that may be zero but not below.
func NonNegative[T int | time.Duration](v T) error {
	if v < 0 {
		return errors.New("must not be negative")
	}
	return nil
}

// Errors lists the configuration problems Parse or Env found, each naming its variable
// or flag; it prints them on one line.
type Errors []error

// Error joins the problems with "; ".
func (e Errors) Error() string {
	s := make([]string, len(e))
	for i, err := range e {
		s[i] = err.Error()
	}
	return strings.Join(s, "; ")
}

// Unwrap returns the problems, for errors.Is and errors.As.
func (e Errors) Unwrap() []error { return e }

// err returns nil, the one problem, or e.
func (e Errors) err() error {
	switch len(e) {
	case 0:
		return nil
	case 1:
		return e[0]
	}
	return e
}

// problem names where a bad value came from: `NAME="value": what is wrong`.
func problem(source string, m *meta, text string, err error) error {
	shown := strconv.Quote(text)
	if m.secret {
		shown = "****"
	}
	return fmt.Errorf("%s=%s: %w", source, shown, err)
}

// EnvVar returns the environment variable of the flag name ("" for none: --print-config).
func (f *FlagSet) EnvVar(name string) string {
	if s, ok := f.byName[name]; ok {
		return s.info().env
	}
	return ""
}

// Print writes the resolved settings, one per line, with secrets masked.
func (f *FlagSet) Print(w io.Writer) {
	var names []string
	f.VisitAll(func(fl *flag.Flag) { names = append(names, fl.Name) })
	sort.Strings(names)
	for _, n := range names {
		v := f.Lookup(n).Value.String()
		var env string
		if s, ok := f.byName[n]; ok {
			m := s.info()
			env = m.env
			if m.secret && v != "" {
				v = "****"
			}
		}
		fmt.Fprintf(w, "%-28s %-36s %s\n", n, env, v)
	}
}

// Parse reads every setting's variable, then args, then runs the settings' checks. A
// malformed value or a failed check is an error naming the variable (or, for a value given
// on the command line, the flag) and the value; every problem found is reported, on one
// line: malformed values first, then values that fail their checks. A variable overridden
// by its flag is not held against it. Parse also handles --print-config and -h, --help: it
// prints the settings or the usage to the output and returns printed=true (the program
// then exits 0).
func (f *FlagSet) Parse(args []string) (printed bool, err error) {
	if f.Lookup("print-config") == nil {
		f.BoolVar(&f.print, "print-config", false, "print the resolved configuration and exit")
	}
	envErrs, fromEnv := map[string]error{}, map[string]bool{}
	for _, s := range f.settings {
		m := s.info()
		text, ok := os.LookupEnv(m.env)
		if !ok || (s.typed() && strings.TrimSpace(text) == "") {
			continue
		}
		if err := s.Set(text); err != nil {
			envErrs[m.name] = problem(m.env, m, m.failed, err)
		} else {
			fromEnv[m.name] = true
		}
	}
	for _, s := range f.settings {
		s.info().setErr = nil
	}
	out := f.Output()
	f.SetOutput(io.Discard)
	perr := f.FlagSet.Parse(args)
	f.SetOutput(out)
	if errors.Is(perr, flag.ErrHelp) {
		f.Usage()
		return true, nil
	}
	fromFlag := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { fromFlag[fl.Name] = true })
	var errs Errors
	for _, s := range f.settings {
		if e := envErrs[s.info().name]; e != nil && !fromFlag[s.info().name] {
			errs = append(errs, e)
		}
	}
	if perr != nil {
		errs = append(errs, f.flagError(perr))
		return false, errs.err()
	}
	if f.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q (settings are flags, e.g. --name=value)", f.Arg(0)))
	}
	for _, s := range f.settings {
		m := s.info()
		if envErrs[m.name] != nil && !fromFlag[m.name] {
			continue
		}
		if err := s.check(); err != nil {
			source, text := "--"+m.name+" default", s.String()
			switch {
			case fromFlag[m.name]:
				source, text = "--"+m.name, m.raw
			case fromEnv[m.name]:
				source, text = m.env, m.raw
			}
			errs = append(errs, problem(source, m, text, err))
		}
	}
	if len(errs) > 0 {
		return false, errs.err()
	}
	if f.print {
		f.Print(out)
		return true, nil
	}
	return false, nil
}

// flagError rewrites the flag package's error for a malformed value the way env errors
// read (`--name="value": what is wrong`); other errors (an unknown flag) pass as they are.
func (f *FlagSet) flagError(err error) error {
	for _, s := range f.settings {
		if m := s.info(); m.setErr != nil {
			return problem("--"+m.name, m, m.failed, m.setErr)
		}
	}
	return err
}

// Binder is a configuration whose Flags method binds its settings (every service's Config).
type Binder interface{ Flags(*FlagSet) }

// Required returns an error naming each empty string field of cfg listed in names. When
// cfg is a Binder, the error names the field's variable and flag, as a user sets them
// ("NOETL_PG_URL (--pg-url)"), else the field.
func Required(cfg any, names ...string) error {
	v := reflect.Indirect(reflect.ValueOf(cfg))
	env := boundNames(v)
	var missing []string
	for _, n := range names {
		fv := v.FieldByName(n)
		if fv.IsValid() && fv.Kind() == reflect.String && strings.TrimSpace(fv.String()) == "" {
			if e, ok := env[n]; ok {
				n = e
			}
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing required configuration: %s", strings.Join(missing, ", "))
	}
	return nil
}

// boundNames maps the fields of the struct v that its Flags method binds to
// "VARIABLE (--flag)", by binding a fresh copy and matching addresses.
func boundNames(v reflect.Value) map[string]string {
	if v.Kind() != reflect.Struct {
		return nil
	}
	fresh := reflect.New(v.Type())
	b, ok := fresh.Interface().(Binder)
	if !ok {
		return nil
	}
	fs := New("required")
	b.Flags(fs)
	byAddr := map[uintptr]*meta{}
	for _, st := range fs.settings {
		if p, ok := st.(interface{ addr() uintptr }); ok {
			byAddr[p.addr()] = st.info()
		}
	}
	out := map[string]string{}
	for i := range v.NumField() {
		if m, ok := byAddr[fresh.Elem().Field(i).Addr().Pointer()]; ok {
			out[v.Type().Field(i).Name] = m.env + " (--" + m.name + ")"
		}
	}
	return out
}
