package domain

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidateLabels(t *testing.T) {
	t.Parallel()
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		err    string
	}{
		{"none", nil, ""},
		{"good", map[string]string{"team": "data", "env.tier/x_y-z": "", "0": strings.Repeat("é", MaxLabelValueChars)}, ""},
		{"longest key", map[string]string{"a" + strings.Repeat("b", 62): "v"}, ""},
		{"key too long", map[string]string{"a" + strings.Repeat("b", 63): "v"}, `labels: label key "abbb`},
		{"upper case", map[string]string{"Team": "x"}, `labels: label key "Team" must match`},
		{"leading dash", map[string]string{"-x": "x"}, `labels: label key "-x"`},
		{"empty key", map[string]string{"": "x"}, `labels: label key ""`},
		{"value too long", map[string]string{"k": strings.Repeat("v", MaxLabelValueChars+1)}, `labels: label "k": value of 257 characters exceeds the limit of 256`},
		{"too many", many, "labels: 33 labels exceeds the limit of 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateLabels("labels", tc.labels)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
}
