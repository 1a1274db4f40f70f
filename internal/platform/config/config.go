// Package config binds service configuration to command-line flags whose defaults come
// from NOETL_* environment variables, so every setting has both a flag and an env var.
package config

import (
	"flag"
	"fmt"
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
	envs    map[string]string
	secrets map[string]bool
}

// New returns a FlagSet named after the program.
func New(name string) *FlagSet {
	return &FlagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), envs: map[string]string{}, secrets: map[string]bool{}}
}

func (f *FlagSet) note(name, env string) string {
	f.envs[name] = env
	return env
}

// String binds a string setting.
func (f *FlagSet) String(p *string, name, env, def, usage string) {
	if v, ok := os.LookupEnv(f.note(name, env)); ok {
		def = v
	}
	f.StringVar(p, name, def, usage+" ($"+env+")")
}

// Secret binds a string setting whose value is masked by Print.
func (f *FlagSet) Secret(p *string, name, env, def, usage string) {
	f.String(p, name, env, def, usage)
	f.secrets[name] = true
}

// Int binds an int setting.
func (f *FlagSet) Int(p *int, name, env string, def int, usage string) {
	if v, ok := os.LookupEnv(f.note(name, env)); ok {
		if n, err := strconv.Atoi(v); err == nil {
			def = n
		}
	}
	f.IntVar(p, name, def, usage+" ($"+env+")")
}

// Bool binds a bool setting.
func (f *FlagSet) Bool(p *bool, name, env string, def bool, usage string) {
	if v, ok := os.LookupEnv(f.note(name, env)); ok {
		if b, err := strconv.ParseBool(v); err == nil {
			def = b
		}
	}
	f.BoolVar(p, name, def, usage+" ($"+env+")")
}

// Duration binds a duration setting.
func (f *FlagSet) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	if v, ok := os.LookupEnv(f.note(name, env)); ok {
		if d, err := time.ParseDuration(v); err == nil {
			def = d
		}
	}
	f.DurationVar(p, name, def, usage+" ($"+env+")")
}

// Print writes the resolved settings, one per line, with secrets masked.
func (f *FlagSet) Print(w interface{ Write([]byte) (int, error) }) {
	var names []string
	f.VisitAll(func(fl *flag.Flag) { names = append(names, fl.Name) })
	sort.Strings(names)
	for _, n := range names {
		v := f.Lookup(n).Value.String()
		if f.secrets[n] && v != "" {
			v = "****"
		}
		env := f.envs[n]
		fmt.Fprintf(w, "%-28s %-36s %s\n", n, env, v)
	}
}

// Parse parses args; it also handles --print-config by printing and returning printed=true.
func (f *FlagSet) Parse(args []string) (printed bool, err error) {
	var print bool
	f.BoolVar(&print, "print-config", false, "print the resolved configuration and exit")
	if err := f.FlagSet.Parse(args); err != nil {
		return false, err
	}
	if print {
		f.Print(os.Stdout)
		return true, nil
	}
	return false, nil
}

// Required returns an error naming each empty string field of cfg listed in names.
func Required(cfg any, names ...string) error {
	v := reflect.Indirect(reflect.ValueOf(cfg))
	var missing []string
	for _, n := range names {
		fv := v.FieldByName(n)
		if fv.IsValid() && fv.Kind() == reflect.String && strings.TrimSpace(fv.String()) == "" {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing required configuration: %s", strings.Join(missing, ", "))
	}
	return nil
}
