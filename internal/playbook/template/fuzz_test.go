package template

import (
	"errors"
	"testing"
)

func FuzzRender(f *testing.F) {
	for _, s := range []string{
		"{{ a.b.c | default(1) }}", "{% for x in items %}{{ loop.index }}{% endfor %}",
		"{{ 'x' * 3 }}", "{% set ns = namespace(c=0) %}{{ ns.c }}", "{{ m | tojson }}",
		"{% if a %}x{% elif b %}y{% else %}z{% endif %}", "{{ items[::-1] }}", "{% raw %}{{{% endraw %}",
		"{{ s.split(',') | join('-') }}", "{{ 1 if a else 2 }}", "{{ (1, 2) }}", "{{ range(5) | sum }}",
	} {
		f.Add(s)
	}
	r := NewRenderer()
	f.Fuzz(func(t *testing.T, src string) {
		v, err := r.Render(src, testCtx())
		if err != nil {
			var te *TemplateError
			if !errors.As(err, &te) {
				t.Fatalf("error %T is not a *TemplateError: %v", err, err)
			}
			return
		}
		_ = export(v)
		_ = Names(src)
	})
}
