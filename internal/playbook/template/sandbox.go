package template

import (
	"errors"
	"fmt"
	"strings"
)

// ErrForbidden is returned (wrapped) when a template reaches for the internals of a
// template engine or an interpreter: a dunder attribute such as __class__ or
// __globals__, a Python frame or code attribute, or a Jinja global such as config or
// lipsum. Templates here only read data, so such a name can never yield a value; it is a
// probe or a template written for another engine, and the render fails saying so rather
// than quietly rendering null.
var ErrForbidden = errors.New("template: forbidden attribute")

// interpreterAttrs are Python attributes that lead from a value to code, frames or
// globals (Jinja's sandbox refuses the same).
var interpreterAttrs = map[string]bool{
	"mro": true, "func_globals": true, "func_code": true, "func_closure": true,
	"gi_frame": true, "gi_code": true, "cr_frame": true, "cr_code": true, "ag_frame": true, "ag_code": true,
	"f_globals": true, "f_locals": true, "f_builtins": true, "f_back": true, "tb_frame": true,
}

// jinjaGlobals are names Jinja (and Flask) templates use to reach the engine. Playbook
// templates have no such globals: a name here that the context does not define (a step
// may be called config) fails the render.
var jinjaGlobals = map[string]bool{
	"config": true, "lipsum": true, "self": true, "cycler": true, "joiner": true,
	"request": true, "session": true, "url_for": true, "get_flashed_messages": true,
}

// forbiddenAttr returns an ErrForbidden error when name is an interpreter internal.
func forbiddenAttr(name string) error {
	if strings.HasPrefix(name, "__") || interpreterAttrs[name] {
		return fmt.Errorf("%w %q: templates read data, not the internals of an interpreter", ErrForbidden, name)
	}
	return nil
}

// forbiddenGlobal returns an ErrForbidden error for a Jinja global name.
func forbiddenGlobal(name string) error {
	return fmt.Errorf("%w: %q is a Jinja global, which playbook templates do not have (and the context defines no %q)", ErrForbidden, name, name)
}
