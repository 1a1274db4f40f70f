package domain

import (
	"fmt"
	"regexp"
	"sort"
)

// Limits on an execution's labels.
const (
	// MaxLabels is the most labels one execution carries.
	MaxLabels = 32
	// MaxLabelValueChars is the longest label value, in characters.
	MaxLabelValueChars = 256
)

var labelKey = regexp.MustCompile(`^[a-z0-9][a-z0-9_./-]{0,62}$`)

// ValidateLabels checks an execution's labels: at most MaxLabels, each key matching
// [a-z0-9][a-z0-9_./-]{0,62} and each value at most MaxLabelValueChars characters. The
// error names field (the request field holding them) and the label at fault; keys are
// checked in order, so the same labels always give the same error.
func ValidateLabels(field string, labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%s: %d labels exceeds the limit of %d", field, len(labels), MaxLabels)
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !labelKey.MatchString(k) {
			return fmt.Errorf("%s: label key %q must match [a-z0-9][a-z0-9_./-]{0,62}", field, k)
		}
		if n := len([]rune(labels[k])); n > MaxLabelValueChars {
			return fmt.Errorf("%s: label %q: value of %d characters exceeds the limit of %d", field, k, n, MaxLabelValueChars)
		}
	}
	return nil
}
