package playbook

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The longest timeouts: of a step's attempt (its spec.timeout) and of a whole execution
// (the playbook's spec.timeout, or a start's timeout).
const (
	MaxStepTimeout      = 24 * time.Hour
	MaxExecutionTimeout = 30 * 24 * time.Hour
)

// stepTimeout reads a step's spec.timeout: a number of seconds (30, 2.5) or a duration
// with a unit ("90s", "5m", "1h30m"), positive and at most MaxStepTimeout. Each attempt of
// the step's command gets that long; past it the worker stops the tool and the attempt
// fails with deadline_exceeded, which the step's retry policy may retry.
func (b *builder) stepTimeout(stepNode *yaml.Node, s *Step) {
	s.Timeout = b.timeout(value(value(stepNode, "spec"), "timeout"), s.Name, MaxStepTimeout)
}

// playbookTimeout reads the root's spec.timeout, the bound of a whole execution (at most
// MaxExecutionTimeout): past it the execution fails with deadline_exceeded.
func (b *builder) playbookTimeout(root *yaml.Node, pb *Playbook) {
	pb.Timeout = b.timeout(value(value(root, "spec"), "timeout"), "", MaxExecutionTimeout)
}

// timeout reads a spec.timeout node (zero when absent or refused, with the error noted).
func (b *builder) timeout(n *yaml.Node, step string, most time.Duration) time.Duration {
	if isNull(n) {
		return 0
	}
	const field = "spec.timeout"
	if n.Kind != yaml.ScalarNode {
		b.errorf(n, step, field, "must be a number of seconds or a duration such as 90s, not %s", kindName(n))
		return 0
	}
	d, err := ParseTimeout(n.Value, most)
	if err != nil {
		b.errorf(n, step, field, "%v", err)
		return 0
	}
	return d
}

// ParseTimeout reads a timeout as playbooks write it: a number of seconds (30, 2.5) or a
// duration with a unit ("90s", "1h30m"), positive and at most most.
func ParseTimeout(text string, most time.Duration) (time.Duration, error) {
	t := strings.TrimSpace(text)
	d, err := time.ParseDuration(t)
	if err != nil {
		secs, ferr := strconv.ParseFloat(t, 64)
		if ferr != nil {
			return 0, fmt.Errorf("must be a number of seconds or a duration such as 90s, not %q", text)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 || d > most {
		return 0, fmt.Errorf("must be positive and at most %s, not %q", most, text)
	}
	return d, nil
}
