package deploy

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

// renderNotes renders the chart's NOTES.txt with the values files and overrides.
func renderNotes(t *testing.T, files []string, overrides map[string]any) string {
	t.Helper()
	ch, err := loader.Load(chartDir)
	require.NoError(t, err)
	user := map[string]any{}
	for _, f := range files {
		v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, f))
		require.NoError(t, err)
		user = chartutil.MergeTables(v.AsMap(), user)
	}
	if overrides != nil {
		user = chartutil.MergeTables(deepCopy(overrides), user)
	}
	vals, err := chartutil.ToRenderValuesWithSchemaValidation(ch, user, chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}, chartutil.DefaultCapabilities, false)
	require.NoError(t, err)
	out, err := engine.Engine{Strict: true}.Render(ch, vals)
	require.NoError(t, err)
	notes, ok := out["noetl/templates/NOTES.txt"]
	require.True(t, ok, "NOTES.txt rendered")
	return notes
}

// TestChartNATSSyncInterval: nats.syncInterval states the NATS servers' fsync policy, the
// release notes say what it costs and how to check it, and a value NATS would not accept
// is refused.
func TestChartNATSSyncInterval(t *testing.T) {
	t.Parallel()
	prod := renderNotes(t, []string{"values-production.yaml"}, nil)
	require.Contains(t, prod, "the streams have 3 replica(s)")
	require.Contains(t, prod, "fsync every JetStream write before acknowledging\nit: a power loss loses no acknowledged message.")
	require.Contains(t, prod, "jq '.jetstream.config | {sync_interval, sync_always}'")

	dev := renderNotes(t, nil, nil)
	require.Contains(t, dev, "fsync JetStream every 2m: an OS crash or\npower loss")
	require.Contains(t, dev, "Set sync_interval: always in the NATS chart")

	require.Contains(t, renderNotes(t, nil, nested("1s", "nats", "syncInterval")), "fsync JetStream every 1s")
	for _, bad := range []string{"sometimes", "0s", "2", "Always", ""} {
		_, err := renderFiles(t, nil, nested(bad, "nats", "syncInterval"), false)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "syncInterval", bad)
	}
}
