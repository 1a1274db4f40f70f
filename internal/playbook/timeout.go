package playbook

import (
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// MaxStepTimeout is the longest spec.timeout a step may set.
const MaxStepTimeout = 24 * time.Hour

// stepTimeout reads a step's spec.timeout: a number of seconds (30, 2.5) or a duration
// with a unit ("90s", "5m", "1h30m"), positive and at most MaxStepTimeout. Each attempt of
// the step's command gets that long; past it the worker stops the tool and the attempt
// fails with deadline_exceeded, which the step's retry policy may retry.
func (b *builder) stepTimeout(stepNode *yaml.Node, s *Step) {
	n := value(value(stepNode, "spec"), "timeout")
	if isNull(n) {
		return
	}
	const field = "spec.timeout"
	if n.Kind != yaml.ScalarNode {
		b.errorf(n, s.Name, field, "must be a number of seconds or a duration such as 90s, not %s", kindName(n))
		return
	}
	text := strings.TrimSpace(n.Value)
	d, err := time.ParseDuration(text)
	if err != nil {
		secs, ferr := strconv.ParseFloat(text, 64)
		if ferr != nil {
			b.errorf(n, s.Name, field, "must be a number of seconds or a duration such as 90s, not %q", n.Value)
			return
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 || d > MaxStepTimeout {
		b.errorf(n, s.Name, field, "must be positive and at most %s, not %q", MaxStepTimeout, n.Value)
		return
	}
	s.Timeout = d
}
