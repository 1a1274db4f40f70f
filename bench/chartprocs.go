package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// procsChartCPU: with --procs, each service process runs as many Go scheduler processors
// as the Helm chart's CPU limit gives its pod (the chart sets GOMAXPROCS to the limit,
// rounded up), at most the machine's cores, so the production-shaped figures are those of
// the chart's pods. GOMAXPROCS in the bench's environment overrides it for every service.
var procsChartCPU = flag.Bool("procs-chart-cpu", true, "with --procs: give each service process GOMAXPROCS from its CPU limit in deploy/helm/noetl/values.yaml, rounded up, as the chart does (false: the Go runtime's own choice, the machine's cores)")

// chartValues is the chart's default values file, relative to the repository root.
const chartValues = "deploy/helm/noetl/values.yaml"

// chartProcs is, for each service of procServices, the GOMAXPROCS the chart gives its
// pods: the CPU limit in the chart's values rounded up, at most ncpu.
func chartProcs(root string, ncpu int) (map[string]int, error) {
	b, err := os.ReadFile(filepath.Join(root, chartValues))
	if err != nil {
		return nil, err
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", chartValues, err)
	}
	out := map[string]int{}
	for _, s := range procServices {
		path := []string{s, "resources", "limits", "cpu"}
		if s == "worker" {
			path = []string{"workers", "defaults", "resources", "limits", "cpu"}
		}
		var x any = v
		for _, k := range path {
			m, _ := x.(map[string]any)
			x = m[k]
		}
		cores, err := cpuCores(fmt.Sprint(x))
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", chartValues, strings.Join(path, "."), err)
		}
		out[s] = min(int(math.Ceil(cores)), ncpu)
	}
	return out, nil
}

// cpuCores reads a Kubernetes CPU quantity ("2", "1.5", "500m") in cores.
func cpuCores(q string) (float64, error) {
	var (
		f   float64
		err error
	)
	if m, ok := strings.CutSuffix(q, "m"); ok {
		f, err = strconv.ParseFloat(m, 64)
		f /= 1000
	} else {
		f, err = strconv.ParseFloat(q, 64)
	}
	if err != nil || f <= 0 {
		return 0, fmt.Errorf("not a CPU limit: %q", q)
	}
	return f, nil
}
