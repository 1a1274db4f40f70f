// Package deploy checks the Helm chart without a cluster: it renders deploy/helm/noetl with
// the Helm SDK for each values file, decodes every document strictly into its Kubernetes
// API type (unknown fields rejected), and asserts the properties production depends on.
package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "helm/noetl"
	release   = "noetl"
	namespace = "noetl"
)

// The components and the binaries they run.
var components = []string{"gateway", "orchestrator", "materializer", "statebuilder", "worker", "resultstore"}

// Only these hold the Postgres URL or may reach Postgres (docs/architecture.md, "Services").
var postgresOwners = []string{"materializer", "orchestrator", "resultstore", "statebuilder"}

// Components whose replica count an HPA owns.
var hpaComponents = []string{"gateway", "orchestrator", "resultstore", "statebuilder"}

// pendingEnv lists variables the chart sets that a service's Config.Flags already reads
// but the README's configuration table does not list yet. Every other variable must be in
// the table; a pending one must at least be read by a service (checked).
var pendingEnv = map[string]string{
	"NOETL_INTERNAL_SECRET":   "issue 6: the secret that signs principals in internal calls",
	"NOETL_BOOTSTRAP_API_KEY": "issue 6: the first API key of a deployment",
}

// Secret variables: never a literal value, always a secretKeyRef.
var secretEnv = []string{"NOETL_PG_URL", "NOETL_ENCRYPTION_KEY", "NOETL_INTERNAL_SECRET", "NOETL_BOOTSTRAP_API_KEY"}

// Services that sign or check internal calls, hence need NOETL_INTERNAL_SECRET.
var internalSecretUsers = []string{"gateway", "materializer", "orchestrator", "resultstore", "statebuilder", "worker"}

type testCase struct {
	name      string
	files     []string       // values files, relative to the chart
	overrides map[string]any // applied after the files
	pools     []string       // worker pools expected, sorted
}

var cases = []testCase{
	{name: "default", pools: []string{"shared", "system"}},
	{name: "production", files: []string{"values-production.yaml"}, pools: []string{"shared", "system"}},
	{
		name:      "extra pool",
		files:     []string{"values-production.yaml"},
		overrides: nested(map[string]any{"concurrency": 8, "keda": map[string]any{"maxReplicaCount": 4}}, "workers", "pools", "gpu"),
		pools:     []string{"gpu", "shared", "system"},
	},
	{
		// The paths the other cases leave out: no KEDA, the chart's own Secret with every
		// key, an Ingress, a ServiceMonitor, the policy on the Postgres pods.
		name: "options",
		overrides: merged(
			nested(false, "keda", "enabled"),
			nested("", "postgres", "adminUrlSecret", "name"),
			nested(true, "postgres", "ingressPolicy", "enabled"),
			nested("postgres://postgres@pg:5432/noetl", "secrets", "pgAdminUrl"),
			nested("my-resultstore-login", "postgres", "logins", "resultstore", "existingSecret"),
			nested("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", "secrets", "encryptionKey"),
			nested("0123456789abcdef0123456789abcdef", "secrets", "internalSecret"),
			nested("noetl_id_secret", "secrets", "bootstrapApiKey"),
			nested(true, "gateway", "ingress", "enabled"),
			nested([]any{map[string]any{"host": "noetl.example.com"}}, "gateway", "ingress", "hosts"),
			nested(true, "serviceMonitor", "enabled"),
			nested(false, "statebuilder", "autoscaling", "enabled"),
			nested([]any{map[string]any{"name": "GOMAXPROCS", "value": "3"}}, "orchestrator", "extraEnv"),
		),
		pools: []string{"shared", "system"},
	},
	{
		// Results over Arrow Flight for clients outside the cluster: the Flight port on a
		// load balancer behind TLS, admitted from one address block, the gateway from
		// another.
		name:  "flight published",
		files: []string{"values-production.yaml"},
		overrides: merged(
			nested(true, "resultstore", "publicService", "enabled"),
			nested([]any{"203.0.113.0/24"}, "resultstore", "publicService", "loadBalancerSourceRanges"),
			nested("grpc+tls://flight.example.com:443", "resultstore", "flightLocation"),
			nested([]any{map[string]any{"ipBlock": map[string]any{"cidr": "203.0.113.0/24"}}}, "networkPolicy", "flightFrom"),
			nested([]any{map[string]any{"ipBlock": map[string]any{"cidr": "198.51.100.0/24"}}}, "networkPolicy", "gatewayFrom"),
			nested("0s", "resultstore", "resultTTL"),
			nested("90s", "resultstore", "ticketTTL"),
		),
		pools: []string{"shared", "system"},
	},
}

func TestChart(t *testing.T) {
	t.Parallel()
	env := readmeEnv(t)
	flags := serviceFlagEnv(t)
	for v := range pendingEnv {
		require.True(t, flags[v], "pending variable %s is read by no service", v)
		if env[v] {
			t.Logf("%s is in the README now: remove it from pendingEnv", v)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := renderChart(t, tc.files, tc.overrides)
			checkWorkloads(t, r, tc, env)
			checkServices(t, r)
			checkScaling(t, r, tc)
			checkPDBs(t, r)
			checkNetworkPolicies(t, r)
			checkSecrets(t, r)
			checkMigrationJob(t, r)
			checkFlight(t, r)
		})
	}
}

// checkMigrationJob: one Job runs `noetl migrate` before install and before every upgrade
// (after the login Secrets it reads exist, before any pod of the release), with the
// migrating role's URL from a Secret no Deployment reads and each service's URL from that
// service's own login Secret, limits, and a NetworkPolicy that lets it reach Postgres.
func checkMigrationJob(t *testing.T, r *rendered) {
	t.Helper()
	require.Len(t, r.jobs, 1, "one migration Job")
	j := r.jobs[0]
	require.Equal(t, "pre-install,pre-upgrade", j.Annotations["helm.sh/hook"])
	jobWeight, err := strconv.Atoi(j.Annotations["helm.sh/hook-weight"])
	require.NoError(t, err)
	for _, sec := range r.secrets {
		if sec.Annotations["helm.sh/hook"] != "" {
			require.Equal(t, "pre-install,pre-upgrade", sec.Annotations["helm.sh/hook"], sec.Name)
			w, err := strconv.Atoi(sec.Annotations["helm.sh/hook-weight"])
			require.NoError(t, err, sec.Name)
			require.Less(t, w, jobWeight, "%s: created after the migrate job that reads it", sec.Name)
		}
	}
	c := j.Spec.Template.Spec.Containers
	require.Len(t, c, 1)
	require.Equal(t, []string{"noetl", "migrate"}, c[0].Command)
	require.NotNil(t, c[0].Resources.Limits.Cpu())
	require.False(t, c[0].Resources.Limits.Memory().IsZero(), "memory limit")
	require.Empty(t, j.Spec.Template.Spec.ServiceAccountName, "the release's ServiceAccount does not exist yet before install")
	env := map[string]*corev1.SecretKeySelector{}
	for _, e := range c[0].Env {
		require.True(t, e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil, "%s not from a Secret", e.Name)
		env[e.Name] = e.ValueFrom.SecretKeyRef
	}
	require.Len(t, env, 1+len(postgresOwners))
	admin := env["NOETL_PG_URL"]
	require.NotNil(t, admin, "the migrating role's URL")
	for _, comp := range postgresOwners {
		login := env["NOETL_MIGRATE_"+strings.ToUpper(comp)+"_URL"]
		require.NotNil(t, login, "%s's login", comp)
		d := r.deployment(release + "-" + comp)
		require.Equal(t, pgSecretRef(t, d), *login, "%s: the migrate job creates its role from another URL than it connects with", comp)
		require.NotEqual(t, admin.Name, login.Name, "%s: the migrating role's URL and the service's in one Secret", comp)
	}
	for _, d := range r.deployments {
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				require.False(t, *e.ValueFrom.SecretKeyRef == *admin, "%s: %s is the migrating role's URL", d.Name, e.Name)
			}
		}
	}
	jobLabels := labels.Set(j.Spec.Template.Labels)
	var pgEgress bool
	for _, p := range r.netpols {
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		require.NoError(t, err)
		if !sel.Matches(jobLabels) || len(p.Spec.Egress) == 0 {
			continue
		}
		for _, rule := range p.Spec.Egress {
			if portsInclude(rule.Ports, int32(r.values["postgres"].(map[string]any)["port"].(float64))) {
				pgEgress = true
			}
		}
	}
	require.True(t, pgEgress, "the migration Job may reach Postgres")
	for _, d := range r.deployments {
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		require.NoError(t, err)
		require.False(t, sel.Matches(jobLabels), "the Job's pods must not join Deployment %s", d.Name)
	}
}

// checkFlight: the resultstore serves Arrow Flight on a port of its Service; the gateway
// hands clients the location the resultstore advertises and signs tickets of the same
// lifetime; durations are ones the services parse (an unparsable one is silently ignored).
func checkFlight(t *testing.T, r *rendered) {
	t.Helper()
	v := r.values["resultstore"].(map[string]any)
	flightPort := int32(toInt(t, v["flightPort"]))
	rs := r.deployment(release + "-resultstore")
	gw := r.deployment(release + "-gateway")
	require.NotNil(t, rs)
	require.NotNil(t, gw)
	rsEnv, gwEnv := containerEnv(rs), containerEnv(gw)

	loc := rsEnv["NOETL_RESULTSTORE_FLIGHT_LOCATION"]
	require.NotEmpty(t, loc, "the resultstore advertises a Flight location")
	require.Equal(t, loc, gwEnv["NOETL_RESULTSTORE_FLIGHT_LOCATION"], "the gateway hands out another location than the resultstore's")
	u, err := url.Parse(loc)
	require.NoError(t, err, loc)
	require.Contains(t, []string{"grpc", "grpc+tcp", "grpc+tls"}, u.Scheme, loc)
	if v["flightLocation"].(string) == "" {
		// The default: the resultstore's Service, by a name every namespace resolves.
		require.Equal(t, "grpc", u.Scheme, loc)
		require.Equal(t, release+"-resultstore."+namespace+".svc", u.Hostname(), loc)
		require.Equal(t, strconv.Itoa(int(flightPort)), u.Port(), loc)
		svc := r.service(release + "-resultstore")
		require.True(t, slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
			return p.Port == flightPort && p.TargetPort == intstr.FromString("flight")
		}), "the resultstore's Service does not carry the Flight port")
	} else {
		require.Equal(t, v["flightLocation"], loc)
	}

	require.Equal(t, v["ticketTTL"], rsEnv["NOETL_FLIGHT_TICKET_TTL"])
	require.Equal(t, rsEnv["NOETL_FLIGHT_TICKET_TTL"], gwEnv["NOETL_FLIGHT_TICKET_TTL"], "ticket lifetimes differ")
	for env, key := range map[string]string{"NOETL_RESULT_TTL": "resultTTL", "NOETL_RESULT_SWEEP_EVERY": "sweepEvery", "NOETL_FLIGHT_TICKET_TTL": "ticketTTL"} {
		require.Equal(t, v[key], rsEnv[env], env)
		d, err := time.ParseDuration(rsEnv[env])
		require.NoError(t, err, "%s=%q", env, rsEnv[env])
		require.GreaterOrEqual(t, d, time.Duration(0), env)
	}
	for _, d := range r.deployments {
		if d.Spec.Template.Labels["app.kubernetes.io/component"] == "worker" {
			require.Equal(t, fmt.Sprintf("%s-resultstore:%d", release, flightPort), containerEnv(d)["NOETL_RESULTSTORE_FLIGHT_ADDR"], d.Name)
		}
	}

	// The published Flight Service, when enabled: the Flight port of the resultstore alone.
	var published []*corev1.Service
	for _, svc := range r.services {
		if svc.Spec.Type != corev1.ServiceTypeClusterIP && svc.Spec.Selector["app.kubernetes.io/component"] == "resultstore" {
			published = append(published, svc)
		}
	}
	ps := v["publicService"].(map[string]any)
	if !ps["enabled"].(bool) {
		require.Empty(t, published, "the Flight port is published although resultstore.publicService is off")
		return
	}
	require.Len(t, published, 1)
	svc := published[0]
	require.Equal(t, release+"-resultstore-flight", svc.Name)
	require.Len(t, svc.Spec.Ports, 1, svc.Name)
	require.Equal(t, flightPort, svc.Spec.Ports[0].Port, svc.Name)
	require.True(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(rs.Spec.Template.Labels)), svc.Name)
	var ranges []string
	remarshal(t, ps["loadBalancerSourceRanges"], &ranges)
	require.Equal(t, len(ranges), len(svc.Spec.LoadBalancerSourceRanges), svc.Name)
}

// TestChartRefusesBadValues: settings that would silently misbehave fail the render, by the
// values schema or by the templates.
func TestChartRefusesBadValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		overrides  map[string]any
		want       string
		skipSchema bool // as `helm install --skip-schema-validation`: the templates check too
	}{
		{"pool name not a subject token", nested(map[string]any{}, "workers", "pools", "gpu.large"), "'gpu.large' does not match pattern", false},
		{"unknown pool setting", nested(8, "workers", "pools", "shared", "concurency"), "'concurency' not allowed", false},
		{"misspelt component", nested(2, "gatway", "replicas"), "'gatway' not allowed", false},
		{"misspelt setting", nested(4, "materializer", "replica"), "'replica' not allowed", false},
		{"container without limits", nested(nil, "resultstore", "resources", "limits"), "limits", false},
		{"pool name, schema skipped", nested(map[string]any{}, "workers", "pools", "gpu.large"), "a pool name is", true},
		{"pool setting, schema skipped", nested(8, "workers", "pools", "shared", "concurency"), "unknown setting", true},
		{"limits, schema skipped", nested(nil, "resultstore", "resources", "limits"), "limits", true},
		{"encryption key of the wrong size", nested("c2hvcnQ=", "secrets", "encryptionKey"), "exactly 32 bytes", false},
		{"internal secret too short", nested("short", "secrets", "internalSecret"), "at least 32 bytes", false},
		{"no migrating role", nested("", "postgres", "adminUrlSecret", "name"), "the migrate job's NOETL_PG_URL", false},
		{"login as a group role", nested("noetl_materializer", "postgres", "logins", "orchestrator", "user"), "/postgres/logins/orchestrator/user", false},
		{"login as the superuser", nested("postgres", "postgres", "logins", "statebuilder", "user"), "/postgres/logins/statebuilder/user", false},
		{"one login for two services", merged(nested("noetl_shared", "postgres", "logins", "orchestrator", "user"), nested("noetl_shared", "postgres", "logins", "statebuilder", "user")), "each service needs a role of its own", false},
		{"result TTL in days", nested("7d", "resultstore", "resultTTL"), "resultTTL", false},
		{"ticket TTL without a unit", nested("300", "resultstore", "ticketTTL"), "ticketTTL", false},
		{"Flight location not gRPC", nested("https://flight.example.com", "resultstore", "flightLocation"), "flightLocation", false},
		{"Flight port out of range", nested(70000, "resultstore", "flightPort"), "flightPort", false},
		{"worker grace period within its drain", nested(45, "workers", "pools", "shared", "drainTimeoutSeconds"), "terminationGracePeriodSeconds (45) must exceed drainTimeoutSeconds (45)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := renderFiles(t, nil, tc.overrides, tc.skipSchema)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// ---------------------------------------------------------------------------------------
// Rendering and strict decoding.

// Local types for the custom resources that have no k8s.io/api package. They hold exactly
// the fields the chart may render, so an unexpected field fails the strict decode.
type scaledObject struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		PollingInterval *int32 `json:"pollingInterval"`
		CooldownPeriod  *int32 `json:"cooldownPeriod"`
		MinReplicaCount *int32 `json:"minReplicaCount"`
		MaxReplicaCount *int32 `json:"maxReplicaCount"`
		Fallback        *struct {
			FailureThreshold int32 `json:"failureThreshold"`
			Replicas         int32 `json:"replicas"`
		} `json:"fallback"`
		Advanced *struct {
			HorizontalPodAutoscalerConfig *struct {
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior"`
			} `json:"horizontalPodAutoscalerConfig"`
		} `json:"advanced"`
		Triggers []struct {
			Type     string            `json:"type"`
			Metadata map[string]string `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

type serviceMonitor struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		PodTargetLabels []string `json:"podTargetLabels"`
		Endpoints       []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type rendered struct {
	values          map[string]any
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	secrets         []*corev1.Secret
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	pdbs            []*policyv1.PodDisruptionBudget
	netpols         []*networkingv1.NetworkPolicy
	ingresses       []*networkingv1.Ingress
	scaledObjects   []*scaledObject
	serviceMonitors []*serviceMonitor
	jobs            []*batchv1.Job
}

func renderChart(t *testing.T, files []string, overrides map[string]any) *rendered {
	t.Helper()
	r, err := renderFiles(t, files, overrides, false)
	require.NoError(t, err)
	return r
}

func renderFiles(t *testing.T, files []string, overrides map[string]any, skipSchema bool) (*rendered, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	require.NoError(t, err)
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: "v1.31.0", Major: "1", Minor: "31"}
	require.True(t, chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, caps.KubeVersion.Version),
		"Chart.yaml kubeVersion %q excludes the version the test renders for", ch.Metadata.KubeVersion)

	user := map[string]any{}
	for _, f := range files {
		v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, f))
		require.NoError(t, err)
		user = chartutil.MergeTables(v.AsMap(), user) // later files win
	}
	if overrides != nil {
		user = chartutil.MergeTables(deepCopy(overrides), user)
	}
	// Validates the values against values.schema.json, as helm install does.
	vals, err := chartutil.ToRenderValuesWithSchemaValidation(ch, user, chartutil.ReleaseOptions{
		Name: release, Namespace: namespace, Revision: 1, IsInstall: true,
	}, caps, skipSchema)
	if err != nil {
		return nil, err
	}
	out, err := engine.Engine{Strict: true}.Render(ch, vals)
	if err != nil {
		return nil, err
	}
	r := &rendered{values: vals["Values"].(chartutil.Values).AsMap()}
	for _, name := range slices.Sorted(maps.Keys(out)) {
		if !strings.HasSuffix(name, ".yaml") {
			continue // NOTES.txt, helpers
		}
		for i, doc := range splitDocuments(out[name]) {
			where := fmt.Sprintf("%s#%d", name, i)
			require.NoError(t, r.add(ch, where, doc), where)
		}
	}
	return r, nil
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitDocuments splits a rendered template into its YAML documents, dropping those that
// hold only comments or whitespace.
func splitDocuments(s string) []string {
	var docs []string
	for _, d := range docSeparator.Split(s, -1) {
		empty := true
		for _, line := range strings.Split(d, "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				empty = false
				break
			}
		}
		if !empty {
			docs = append(docs, d)
		}
	}
	return docs
}

// decodeStrict converts YAML to JSON (duplicate keys rejected) and decodes it with unknown
// fields rejected.
func decodeStrict(doc string, into any) error {
	j, err := yaml.YAMLToJSONStrict([]byte(doc))
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the object")
	}
	return nil
}

func (r *rendered) add(ch *chart.Chart, where, doc string) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
		return err
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 Deployment":
		o := &appsv1.Deployment{}
		r.deployments, obj = append(r.deployments, o), o
	case "v1 Service":
		o := &corev1.Service{}
		r.services, obj = append(r.services, o), o
	case "v1 Secret":
		o := &corev1.Secret{}
		r.secrets, obj = append(r.secrets, o), o
	case "v1 ServiceAccount":
		obj = &corev1.ServiceAccount{}
	case "autoscaling/v2 HorizontalPodAutoscaler":
		o := &autoscalingv2.HorizontalPodAutoscaler{}
		r.hpas, obj = append(r.hpas, o), o
	case "policy/v1 PodDisruptionBudget":
		o := &policyv1.PodDisruptionBudget{}
		r.pdbs, obj = append(r.pdbs, o), o
	case "networking.k8s.io/v1 NetworkPolicy":
		o := &networkingv1.NetworkPolicy{}
		r.netpols, obj = append(r.netpols, o), o
	case "networking.k8s.io/v1 Ingress":
		o := &networkingv1.Ingress{}
		r.ingresses, obj = append(r.ingresses, o), o
	case "batch/v1 Job":
		o := &batchv1.Job{}
		r.jobs, obj = append(r.jobs, o), o
	case "keda.sh/v1alpha1 ScaledObject":
		o := &scaledObject{}
		r.scaledObjects, obj = append(r.scaledObjects, o), o
	case "monitoring.coreos.com/v1 ServiceMonitor":
		o := &serviceMonitor{}
		r.serviceMonitors, obj = append(r.serviceMonitors, o), o
	default:
		return fmt.Errorf("%s: unexpected kind %q %q", where, tm.APIVersion, tm.Kind)
	}
	if err := decodeStrict(doc, obj); err != nil {
		return fmt.Errorf("%s (%s): %w", where, tm.Kind, err)
	}
	return nil
}

// ---------------------------------------------------------------------------------------
// Workloads.

func checkWorkloads(t *testing.T, r *rendered, tc testCase, readme map[string]bool) {
	t.Helper()
	adminPort := int32(toInt(t, r.values["adminPort"]))
	seen := map[string]int{}
	var pools []string
	partitions := map[string]string{}
	replicas := map[string]string{}
	pgSecrets := map[string]string{} // Deployment -> the Secret of its NOETL_PG_URL
	for _, d := range r.deployments {
		name := d.Name
		pod := d.Spec.Template
		comp := pod.Labels["app.kubernetes.io/component"]
		require.Contains(t, components, comp, "%s: component label", name)
		seen[comp]++
		require.LessOrEqual(t, len(name), 63, "%s: name too long", name)

		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		require.NoError(t, err)
		require.True(t, sel.Matches(labels.Set(pod.Labels)), "%s: selector does not match its pods", name)
		require.Len(t, pod.Spec.Containers, 1, name)
		require.Empty(t, pod.Spec.InitContainers, name)
		c := pod.Spec.Containers[0]
		require.Equal(t, []string{comp}, c.Command, "%s: runs the %s binary", name, comp)

		// Probes: HTTP on the admin port, never TCP, exec or gRPC.
		var admin *corev1.ContainerPort
		for i := range c.Ports {
			if c.Ports[i].Name == "admin" {
				admin = &c.Ports[i]
			}
		}
		require.NotNil(t, admin, "%s: no admin port", name)
		require.Equal(t, adminPort, admin.ContainerPort, name)
		for _, p := range []struct {
			kind  string
			probe *corev1.Probe
			path  string
		}{
			{"startup", c.StartupProbe, "/livez"},
			{"liveness", c.LivenessProbe, "/livez"},
			{"readiness", c.ReadinessProbe, "/readyz"},
		} {
			require.NotNil(t, p.probe, "%s: no %s probe", name, p.kind)
			require.NotNil(t, p.probe.HTTPGet, "%s: %s probe is not HTTP", name, p.kind)
			require.Nil(t, p.probe.TCPSocket, "%s: %s probe", name, p.kind)
			require.Nil(t, p.probe.Exec, "%s: %s probe", name, p.kind)
			require.Nil(t, p.probe.GRPC, "%s: %s probe", name, p.kind)
			require.Equal(t, p.path, p.probe.HTTPGet.Path, "%s: %s probe path", name, p.kind)
			require.True(t, p.probe.HTTPGet.Port == intstr.FromString("admin") || p.probe.HTTPGet.Port == intstr.FromInt32(adminPort),
				"%s: %s probe targets %v, not the admin port", name, p.kind, p.probe.HTTPGet.Port)
		}

		// Resources: requests and limits for CPU and memory, requests within limits.
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, ok := c.Resources.Requests[res]
			require.True(t, ok && !req.IsZero(), "%s: no %s request", name, res)
			lim, ok := c.Resources.Limits[res]
			require.True(t, ok && !lim.IsZero(), "%s: no %s limit", name, res)
			require.LessOrEqual(t, req.Cmp(lim), 0, "%s: %s request above its limit", name, res)
		}

		// The Go scheduler's processors: the container's CPU limit rounded up (the
		// downward API), unless extraEnv sets GOMAXPROCS, once either way.
		var procs []corev1.EnvVar
		for _, e := range c.Env {
			if e.Name == "GOMAXPROCS" {
				procs = append(procs, e)
			}
		}
		require.Len(t, procs, 1, "%s: GOMAXPROCS", name)
		if tc.name == "options" && comp == "orchestrator" {
			require.Equal(t, "3", procs[0].Value, "%s: extraEnv's GOMAXPROCS", name)
		} else {
			ref := procs[0].ValueFrom.ResourceFieldRef
			require.NotNil(t, ref, "%s: GOMAXPROCS is not the CPU limit", name)
			require.Equal(t, "limits.cpu", ref.Resource, name)
			require.Equal(t, "1", ref.Divisor.String(), "%s: whole CPUs, rounded up", name)
		}

		// Environment: every name documented; secrets only by reference and only where
		// docs/architecture.md allows them.
		env := map[string]corev1.EnvVar{}
		for _, e := range c.Env {
			_, dup := env[e.Name]
			require.False(t, dup, "%s: %s set twice", name, e.Name)
			env[e.Name] = e
			if _, pending := pendingEnv[e.Name]; !pending {
				require.True(t, readme[e.Name], "%s: %s is not in the README configuration table", name, e.Name)
			}
			if slices.Contains(secretEnv, e.Name) {
				require.Empty(t, e.Value, "%s: %s as a literal", name, e.Name)
				require.True(t, e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil, "%s: %s not from a Secret", name, e.Name)
			}
		}
		require.Empty(t, c.EnvFrom, "%s: envFrom hides which variables are set", name)
		if comp == "materializer" {
			id := env["NOETL_MATERIALIZER_REPLICA_ID"]
			require.True(t, id.ValueFrom != nil && id.ValueFrom.FieldRef != nil && id.ValueFrom.FieldRef.FieldPath == "metadata.name",
				"%s: the replica id is the pod name, stable across container restarts", name)
		}
		_, hasPG := env["NOETL_PG_URL"]
		require.Equal(t, slices.Contains(postgresOwners, comp), hasPG, "%s: NOETL_PG_URL", name)
		if hasPG {
			// Each service connects as its own login role, from a Secret of its own.
			ref := pgSecretRef(t, d)
			for other, n := range pgSecrets {
				require.NotEqual(t, n, ref.Name, "%s and %s read one Postgres login Secret", name, other)
			}
			pgSecrets[name] = ref.Name
			login := r.values["postgres"].(map[string]any)["logins"].(map[string]any)[comp].(map[string]any)
			want := release + "-pg-" + comp
			if e := login["existingSecret"].(string); e != "" {
				want = e
			}
			require.Equal(t, corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: want}, Key: "NOETL_PG_URL"}, ref, name)
		}
		for _, v := range []string{"NOETL_ENCRYPTION_KEY", "NOETL_BOOTSTRAP_API_KEY"} {
			if _, ok := env[v]; ok {
				require.Equal(t, "orchestrator", comp, "%s: only the orchestrator holds %s", name, v)
			}
		}
		is, ok := env["NOETL_INTERNAL_SECRET"]
		require.Equal(t, slices.Contains(internalSecretUsers, comp), ok, "%s: NOETL_INTERNAL_SECRET", name)
		if ok {
			ref := is.ValueFrom.SecretKeyRef
			require.True(t, ref.Optional == nil || !*ref.Optional, "%s: NOETL_INTERNAL_SECRET is required, not optional", name)
		}

		// The admin server listens on all interfaces, on the port the probes use.
		adminEnv := "NOETL_" + strings.ToUpper(comp) + "_ADMIN"
		require.Contains(t, env, adminEnv, name)
		requireListen(t, name, adminEnv, env[adminEnv].Value, adminPort)
		for _, p := range c.Ports {
			if p.Name == "grpc" {
				v := "NOETL_" + strings.ToUpper(comp) + "_GRPC"
				require.Contains(t, env, v, name)
				requireListen(t, name, v, env[v].Value, p.ContainerPort)
			}
			if p.Name == "http" {
				requireListen(t, name, "NOETL_GATEWAY_HTTP", env["NOETL_GATEWAY_HTTP"].Value, p.ContainerPort)
			}
			if p.Name == "flight" {
				require.Equal(t, "resultstore", comp, "%s: a Flight port", name)
				requireListen(t, name, "NOETL_RESULTSTORE_FLIGHT", env["NOETL_RESULTSTORE_FLIGHT"].Value, p.ContainerPort)
			}
		}
		// Addresses of other services resolve to a rendered Service that reaches that
		// component's gRPC (or Flight) port.
		for v, target := range map[string][2]string{
			"NOETL_ORCHESTRATOR_ADDR":       {"orchestrator", "grpc"},
			"NOETL_STATEBUILDER_ADDR":       {"statebuilder", "grpc"},
			"NOETL_RESULTSTORE_ADDR":        {"resultstore", "grpc"},
			"NOETL_RESULTSTORE_FLIGHT_ADDR": {"resultstore", "flight"},
		} {
			if e, ok := env[v]; ok {
				requireAddrReaches(t, r, name+" "+v, e.Value, target[0], target[1])
			}
		}
		if comp == "worker" {
			require.Contains(t, env, "NOETL_RESULTSTORE_FLIGHT_ADDR", "%s: tables go up over Flight", name)
			// The grace period outlasts the drain, or the kubelet kills a draining worker.
			drain, err := time.ParseDuration(env["NOETL_WORKER_DRAIN_TIMEOUT"].Value)
			require.NoError(t, err, "%s: NOETL_WORKER_DRAIN_TIMEOUT", name)
			grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
			require.Greater(t, grace, drain, "%s: terminationGracePeriodSeconds within the drain timeout", name)
		}
		if e, ok := env["NOETL_PARTITIONS"]; ok {
			partitions[name] = e.Value
		}
		if e, ok := env["NOETL_STREAM_REPLICAS"]; ok {
			replicas[name] = e.Value
		}
		if comp == "worker" {
			pool := env["NOETL_WORKER_POOL"].Value
			require.NotEmpty(t, pool, name)
			require.Equal(t, pool, pod.Labels["noetl.io/pool"], "%s: pool label", name)
			require.Equal(t, release+"-worker-"+pool, name)
			pools = append(pools, pool)
		}

		sc := c.SecurityContext
		require.True(t, sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, "%s: privilege escalation", name)
		psc := pod.Spec.SecurityContext
		require.True(t, psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot, "%s: runs as root", name)
	}
	for _, comp := range components {
		if comp != "worker" {
			require.Equal(t, 1, seen[comp], "Deployments of %s", comp)
		}
	}
	slices.Sort(pools)
	require.Equal(t, tc.pools, pools, "one worker Deployment per pool")
	// One partition count for every component that routes by partition.
	require.Len(t, slices.Compact(slices.Sorted(maps.Values(partitions))), 1, "NOETL_PARTITIONS differs: %v", partitions)
	require.Equal(t, 2+len(tc.pools), len(partitions), "NOETL_PARTITIONS on the orchestrator, materializer and every pool")
	// Every service that declares the streams declares them alike (or they would fight).
	require.Len(t, slices.Compact(slices.Sorted(maps.Values(replicas))), 1, "NOETL_STREAM_REPLICAS differs: %v", replicas)
	require.Equal(t, 2+len(tc.pools), len(replicas), "NOETL_STREAM_REPLICAS on the orchestrator, materializer and every pool")
}

// requireListen: a listen address binds all interfaces (kubelet and peers reach it) on port.
func requireListen(t *testing.T, deployment, variable, value string, port int32) {
	t.Helper()
	host, p, err := net.SplitHostPort(value)
	require.NoError(t, err, "%s: %s=%q", deployment, variable, value)
	require.Contains(t, []string{"", "0.0.0.0", "::"}, host, "%s: %s=%q does not listen on every interface", deployment, variable, value)
	require.Equal(t, strconv.Itoa(int(port)), p, "%s: %s=%q, container port %d", deployment, variable, value, port)
}

func requireAddrReaches(t *testing.T, r *rendered, what, addr, component, portName string) {
	t.Helper()
	host, portStr, err := net.SplitHostPort(addr)
	require.NoError(t, err, "%s: %q", what, addr)
	port, err := strconv.Atoi(portStr)
	require.NoError(t, err, what)
	svc := r.service(host)
	require.NotNil(t, svc, "%s: no Service %q", what, host)
	d := r.deployment(release + "-" + component)
	require.NotNil(t, d, what)
	require.True(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)),
		"%s: Service %s does not select the %s pods", what, host, component)
	for _, p := range svc.Spec.Ports {
		if p.Port == int32(port) {
			require.Equal(t, intstr.FromString(portName), p.TargetPort, "%s: Service port %d", what, port)
			return
		}
	}
	t.Fatalf("%s: Service %s has no port %d", what, host, port)
}

// ---------------------------------------------------------------------------------------
// Services.

func checkServices(t *testing.T, r *rendered) {
	t.Helper()
	for _, d := range r.deployments {
		svc := r.service(d.Name)
		require.NotNil(t, svc, "%s: no Service of the same name", d.Name)
		require.Equal(t, corev1.ServiceTypeClusterIP, svc.Spec.Type, svc.Name)
		require.True(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)), svc.Name)
		ports := map[string]bool{}
		for _, p := range svc.Spec.Ports {
			ports[p.Name] = true
		}
		require.True(t, ports["admin"], "%s: the Service carries the admin port (metrics)", svc.Name)
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, p := range c.Ports {
				require.True(t, ports[p.Name], "%s: container port %s has no Service port", svc.Name, p.Name)
			}
		}
	}
	for _, svc := range r.services {
		if svc.Spec.Type != corev1.ServiceTypeClusterIP {
			// Published outside the cluster: the gateway's public ports and the
			// resultstore's Flight port only.
			public := map[string][]string{"gateway": {"grpc", "http"}, "resultstore": {"flight"}}
			comp := svc.Spec.Selector["app.kubernetes.io/component"]
			require.Contains(t, public, comp, "%s publishes %s", svc.Name, comp)
			for _, p := range svc.Spec.Ports {
				require.Contains(t, public[comp], p.Name, "%s publishes %s", svc.Name, p.Name)
				require.Equal(t, intstr.FromString(p.Name), p.TargetPort, svc.Name)
			}
		}
	}
	for _, ing := range r.ingresses {
		for _, rule := range ing.Spec.Rules {
			for _, path := range rule.HTTP.Paths {
				b := path.Backend.Service
				require.Equal(t, release+"-gateway", b.Name, "%s routes to %s", ing.Name, b.Name)
				require.Equal(t, "http", b.Port.Name, "%s routes to port %v", ing.Name, b.Port)
			}
		}
	}
	for _, sm := range r.serviceMonitors {
		require.NotEmpty(t, sm.Spec.Endpoints)
		for _, ep := range sm.Spec.Endpoints {
			require.Equal(t, "admin", ep.Port)
			require.Equal(t, "/metrics", ep.Path)
		}
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		require.NoError(t, err)
		for _, d := range r.deployments {
			require.True(t, sel.Matches(labels.Set(r.service(d.Name).Labels)), "ServiceMonitor misses %s", d.Name)
		}
	}
}

// ---------------------------------------------------------------------------------------
// Scaling: HPAs for the stateless RPC services, KEDA for the consumers, each on its own lag.

func checkScaling(t *testing.T, r *rendered, tc testCase) {
	t.Helper()
	kedaOn := r.values["keda"].(map[string]any)["enabled"].(bool)
	scaled := map[string]string{} // deployment -> "hpa" | "keda"
	caps := map[string]int32{}    // worker pool -> maxReplicaCount
	for _, h := range r.hpas {
		ref := h.Spec.ScaleTargetRef
		require.Equal(t, "Deployment", ref.Kind, h.Name)
		d := r.deployment(ref.Name)
		require.NotNil(t, d, "%s targets a missing Deployment %s", h.Name, ref.Name)
		require.Contains(t, hpaComponents, d.Spec.Template.Labels["app.kubernetes.io/component"], h.Name)
		require.NotContains(t, scaled, ref.Name, "%s scaled twice", ref.Name)
		scaled[ref.Name] = "hpa"
		require.NotNil(t, h.Spec.MinReplicas)
		require.LessOrEqual(t, *h.Spec.MinReplicas, h.Spec.MaxReplicas, h.Name)
		require.NotEmpty(t, h.Spec.Metrics, h.Name)
	}
	for _, so := range r.scaledObjects {
		ref := so.Spec.ScaleTargetRef
		require.Equal(t, "Deployment", ref.Kind, so.Metadata.Name)
		d := r.deployment(ref.Name)
		require.NotNil(t, d, "%s targets a missing Deployment %s", so.Metadata.Name, ref.Name)
		require.NotContains(t, scaled, ref.Name, "%s scaled twice", ref.Name)
		scaled[ref.Name] = "keda"
		require.Len(t, so.Spec.Triggers, 1, so.Metadata.Name)
		tr := so.Spec.Triggers[0]
		require.Equal(t, "nats-jetstream", tr.Type, so.Metadata.Name)
		for _, k := range []string{"natsServerMonitoringEndpoint", "account", "stream", "consumer", "lagThreshold"} {
			require.NotEmpty(t, tr.Metadata[k], "%s: trigger %s", so.Metadata.Name, k)
		}
		lag, err := strconv.Atoi(tr.Metadata["lagThreshold"])
		require.NoError(t, err, so.Metadata.Name)
		require.Positive(t, lag, so.Metadata.Name)
		require.NotNil(t, so.Spec.MinReplicaCount)
		require.NotNil(t, so.Spec.MaxReplicaCount)
		// A consumer that does not exist makes KEDA read the whole stream's last sequence:
		// keep one pod so that the consumer exists.
		require.GreaterOrEqual(t, *so.Spec.MinReplicaCount, int32(1), so.Metadata.Name)
		require.LessOrEqual(t, *so.Spec.MinReplicaCount, *so.Spec.MaxReplicaCount, so.Metadata.Name)

		env := containerEnv(d)
		switch comp := d.Spec.Template.Labels["app.kubernetes.io/component"]; comp {
		case "worker":
			pool := env["NOETL_WORKER_POOL"]
			require.Equal(t, "NOETL_COMMANDS", tr.Metadata["stream"], so.Metadata.Name)
			require.Equal(t, "worker-"+pool, tr.Metadata["consumer"], "%s scales pool %s on another consumer", so.Metadata.Name, pool)
			caps[pool] = *so.Spec.MaxReplicaCount
			for _, k := range []string{"NOETL_WASM_MEMORY_MB", "NOETL_WASM_TIMEOUT", "NOETL_WASM_CACHE_MODULES"} {
				require.NotEmpty(t, env[k], "%s: %s", d.Name, k)
			}
		default:
			t.Fatalf("%s scales %s with KEDA", so.Metadata.Name, comp)
		}
	}
	for _, d := range r.deployments {
		comp := d.Spec.Template.Labels["app.kubernetes.io/component"]
		switch {
		case slices.Contains(hpaComponents, comp):
			if r.values[comp].(map[string]any)["autoscaling"].(map[string]any)["enabled"].(bool) {
				require.Equal(t, "hpa", scaled[d.Name], "%s: no HPA", d.Name)
			}
		case comp == "materializer":
			// Replicas share partitions through leases; there is no one consumer whose lag
			// KEDA could read.
			require.Empty(t, scaled[d.Name], "%s: the materializer is not autoscaled", d.Name)
		case kedaOn:
			require.Equal(t, "keda", scaled[d.Name], "%s: no ScaledObject of its own", d.Name)
		}
		// An autoscaler owns the replica count: a fixed one would fight it on every upgrade.
		if scaled[d.Name] != "" {
			require.Nil(t, d.Spec.Replicas, "%s: replicas set while autoscaled", d.Name)
		} else {
			require.NotNil(t, d.Spec.Replicas, d.Name)
		}
	}
	if kedaOn {
		require.Len(t, r.scaledObjects, len(tc.pools), "a ScaledObject per pool")
		// The system pool runs the platform's own playbooks and plug-ins: it scales on its
		// own consumer's lag, to a smaller cap than any user pool, so that it cannot take the
		// cluster's capacity from the tenants' work.
		if sys, ok := caps["system"]; ok {
			for pool, c := range caps {
				if pool != "system" {
					require.Less(t, sys, c, "the system pool's maxReplicaCount (%d) must be below pool %s's (%d)", sys, pool, c)
				}
			}
		}
	}
}

// ---------------------------------------------------------------------------------------
// Disruption budgets.

func checkPDBs(t *testing.T, r *rendered) {
	t.Helper()
	for _, d := range r.deployments {
		var own []string
		for _, p := range r.pdbs {
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			require.NoError(t, err)
			if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				own = append(own, p.Name)
			}
		}
		require.Equal(t, []string{d.Name}, own, "%s: PodDisruptionBudgets", d.Name)
	}
	for _, p := range r.pdbs {
		require.True(t, (p.Spec.MaxUnavailable == nil) != (p.Spec.MinAvailable == nil), p.Name)
	}
}

// ---------------------------------------------------------------------------------------
// Network policies.

// Address ranges that can hold pod, Service or node addresses.
var clusterRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("fc00::/7"),
}

func checkNetworkPolicies(t *testing.T, r *rendered) {
	t.Helper()
	np := r.values["networkPolicy"].(map[string]any)
	if !np["enabled"].(bool) {
		return
	}
	pg := r.values["postgres"].(map[string]any)
	pgPort := int32(toInt(t, pg["port"]))
	var pgPeers []networkingv1.NetworkPolicyPeer
	remarshal(t, pg["networkPolicyPeers"], &pgPeers)
	pgLabels := labels.Set{}
	for k, v := range pg["ingressPolicy"].(map[string]any)["podLabels"].(map[string]any) {
		pgLabels[k] = v.(string)
	}
	adminPort := int32(toInt(t, r.values["adminPort"]))

	// Which policies select which Deployment's pods.
	selects := func(p *networkingv1.NetworkPolicy, d *appsv1.Deployment) bool {
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		require.NoError(t, err)
		return sel.Matches(labels.Set(d.Spec.Template.Labels))
	}
	isNoetl := func(peer networkingv1.NetworkPolicyPeer) bool {
		return peer.IPBlock == nil && peer.NamespaceSelector == nil && peer.PodSelector != nil &&
			peer.PodSelector.MatchLabels["app.kubernetes.io/instance"] == release &&
			peer.PodSelector.MatchLabels["app.kubernetes.io/component"] != ""
	}

	// A default deny covers every pod of the release, both directions.
	var deny bool
	for _, p := range r.netpols {
		if len(p.Spec.Ingress) == 0 && len(p.Spec.Egress) == 0 &&
			slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) &&
			slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			all := true
			for _, d := range r.deployments {
				all = all && selects(p, d)
			}
			deny = deny || all
		}
	}
	require.True(t, deny, "no default-deny policy over the whole release")

	reachPG := map[string]bool{}
	for _, d := range r.deployments {
		comp := d.Spec.Template.Labels["app.kubernetes.io/component"]
		public := map[string]bool{}
		for _, p := range r.netpols {
			if !selects(p, d) {
				continue
			}
			for _, rule := range p.Spec.Egress {
				if egressMayReach(t, rule, pgPeers, pgLabels, pgPort) {
					reachPG[comp] = true
				}
			}
			for _, rule := range p.Spec.Ingress {
				// The public doors (the gateway's API ports, the resultstore's Flight port)
				// admit exactly the sources their networkPolicy value lists, anyone when
				// it is empty; nothing else is open beyond the release.
				if door, ok := publicDoor(t, r, comp, rule.Ports); ok {
					var want []networkingv1.NetworkPolicyPeer
					remarshal(t, np[door], &want)
					if len(rule.From) == 0 || !slices.ContainsFunc(rule.From, isNoetl) {
						require.True(t, len(want) == len(rule.From) && (len(want) == 0 || equalJSON(t, want, rule.From)),
							"%s: ingress on its public ports from %+v, networkPolicy.%s is %+v (policy %s)", d.Name, rule.From, door, want, p.Name)
						public[door] = true
						continue
					}
				}
				if len(rule.Ports) == 1 && rule.Ports[0].Port != nil && *rule.Ports[0].Port == intstr.FromInt32(adminPort) {
					// Metrics scraping: from pods of the cluster only, never an address block.
					require.NotEmpty(t, rule.From, "%s: admin port open to everyone (policy %s)", d.Name, p.Name)
					for _, peer := range rule.From {
						require.Nil(t, peer.IPBlock, "%s: admin port open to an address block (policy %s)", d.Name, p.Name)
					}
					continue
				}
				require.NotEmpty(t, rule.From, "%s is reachable from anywhere (policy %s)", d.Name, p.Name)
				for _, peer := range rule.From {
					require.True(t, isNoetl(peer), "%s: ingress from outside the release (policy %s): %+v", d.Name, p.Name, peer)
				}
			}
		}
		switch comp {
		case "gateway":
			require.True(t, public["gatewayFrom"], "the gateway is not reachable by its clients")
		case "resultstore":
			require.True(t, public["flightFrom"], "the resultstore's Flight port is not reachable by its clients")
		}
	}
	require.Equal(t, postgresOwners, slices.Sorted(maps.Keys(reachPG)), "components with egress to Postgres")

	// The calls the services make are allowed at both ends, and the gateway, which only
	// signs Flight tickets, has no route to the Flight port.
	rsv := r.values["resultstore"].(map[string]any)
	grpcPort := func(comp string) int32 { return int32(toInt(t, r.values[comp].(map[string]any)["grpcPort"])) }
	flightPort := int32(toInt(t, rsv["flightPort"]))
	rs := r.deployment(release + "-resultstore")
	for _, d := range r.deployments {
		comp := d.Spec.Template.Labels["app.kubernetes.io/component"]
		var calls []string
		switch comp {
		case "gateway":
			calls = []string{"orchestrator", "statebuilder", "resultstore"}
			require.False(t, egressAllowed(t, r, d, rs, flightPort), "%s may reach the Flight port", d.Name)
		case "orchestrator":
			calls = []string{"statebuilder", "resultstore"}
		case "worker":
			calls = []string{"orchestrator", "resultstore"}
			require.True(t, egressAllowed(t, r, d, rs, flightPort), "%s: no egress to the Flight port", d.Name)
			require.True(t, ingressAllowed(t, r, d, rs, flightPort), "%s: the resultstore does not admit it on the Flight port", d.Name)
		}
		for _, to := range calls {
			dst := r.deployment(release + "-" + to)
			require.True(t, egressAllowed(t, r, d, dst, grpcPort(to)), "%s: no egress to %s", d.Name, to)
			require.True(t, ingressAllowed(t, r, d, dst, grpcPort(to)), "%s: %s does not admit it", d.Name, to)
		}
	}
	// The resultstore's gRPC port never admits the Flight clients' sources.
	for _, p := range r.netpols {
		if !selects(p, rs) {
			continue
		}
		for _, rule := range p.Spec.Ingress {
			if portsInclude(rule.Ports, grpcPort("resultstore")) {
				require.NotEmpty(t, rule.From, "the resultstore's gRPC port is open to everyone (policy %s)", p.Name)
				for _, peer := range rule.From {
					require.True(t, isNoetl(peer), "the resultstore's gRPC port admits %+v (policy %s)", peer, p.Name)
				}
			}
		}
	}

	// The optional policy on the Postgres pods admits exactly the four owners on its port.
	if pg["ingressPolicy"].(map[string]any)["enabled"].(bool) {
		var found bool
		for _, p := range r.netpols {
			sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
			require.NoError(t, err)
			if !sel.Matches(pgLabels) {
				continue
			}
			found = true
			var from []string
			for _, d := range r.deployments {
				for _, rule := range p.Spec.Ingress {
					if !portsInclude(rule.Ports, pgPort) {
						continue
					}
					for _, peer := range rule.From {
						if peer.PodSelector == nil || peer.NamespaceSelector != nil {
							continue
						}
						s, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
						require.NoError(t, err)
						if s.Matches(labels.Set(d.Spec.Template.Labels)) {
							from = append(from, d.Spec.Template.Labels["app.kubernetes.io/component"])
						}
					}
				}
			}
			require.Equal(t, postgresOwners, slices.Compact(slices.Sorted(slices.Values(from))), "Postgres ingress")
		}
		require.True(t, found, "no NetworkPolicy on the Postgres pods")
	}
}

// publicDoor: whether ports are all public ports of comp, and the networkPolicy value that
// lists who may reach them.
func publicDoor(t *testing.T, r *rendered, comp string, ports []networkingv1.NetworkPolicyPort) (string, bool) {
	t.Helper()
	var door string
	var open []int32
	switch comp {
	case "gateway":
		gw := r.values["gateway"].(map[string]any)
		door, open = "gatewayFrom", []int32{int32(toInt(t, gw["grpcPort"])), int32(toInt(t, gw["httpPort"]))}
	case "resultstore":
		door, open = "flightFrom", []int32{int32(toInt(t, r.values["resultstore"].(map[string]any)["flightPort"]))}
	default:
		return "", false
	}
	if len(ports) == 0 {
		return "", false
	}
	for _, p := range ports {
		if p.Port == nil || p.Port.Type != intstr.Int || p.EndPort != nil || !slices.Contains(open, p.Port.IntVal) {
			return "", false
		}
	}
	return door, true
}

// egressAllowed: whether the policies selecting from's pods let them open port on to's pods.
func egressAllowed(t *testing.T, r *rendered, from, to *appsv1.Deployment, port int32) bool {
	t.Helper()
	return allowed(t, r, from, to, port, func(p *networkingv1.NetworkPolicy) (bool, [][]networkingv1.NetworkPolicyPeer, [][]networkingv1.NetworkPolicyPort) {
		var peers [][]networkingv1.NetworkPolicyPeer
		var ports [][]networkingv1.NetworkPolicyPort
		for _, rule := range p.Spec.Egress {
			peers, ports = append(peers, rule.To), append(ports, rule.Ports)
		}
		return slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress), peers, ports
	})
}

// ingressAllowed: whether the policies selecting to's pods admit from's pods on port.
func ingressAllowed(t *testing.T, r *rendered, from, to *appsv1.Deployment, port int32) bool {
	t.Helper()
	return allowed(t, r, to, from, port, func(p *networkingv1.NetworkPolicy) (bool, [][]networkingv1.NetworkPolicyPeer, [][]networkingv1.NetworkPolicyPort) {
		var peers [][]networkingv1.NetworkPolicyPeer
		var ports [][]networkingv1.NetworkPolicyPort
		for _, rule := range p.Spec.Ingress {
			peers, ports = append(peers, rule.From), append(ports, rule.Ports)
		}
		return slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress), peers, ports
	})
}

// allowed: whether a rule of a policy selecting self's pods (in the direction rules picks)
// names port and a peer that matches other's pods, in the release's namespace.
func allowed(t *testing.T, r *rendered, self, other *appsv1.Deployment, port int32, rules func(*networkingv1.NetworkPolicy) (bool, [][]networkingv1.NetworkPolicyPeer, [][]networkingv1.NetworkPolicyPort)) bool {
	t.Helper()
	require.NotNil(t, self)
	require.NotNil(t, other)
	for _, p := range r.netpols {
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		require.NoError(t, err)
		if !sel.Matches(labels.Set(self.Spec.Template.Labels)) {
			continue
		}
		ok, peers, ports := rules(p)
		if !ok {
			continue
		}
		for i := range peers {
			if !portsInclude(ports[i], port) {
				continue
			}
			if len(peers[i]) == 0 {
				return true
			}
			for _, peer := range peers[i] {
				if peer.IPBlock != nil || peer.PodSelector == nil {
					continue // addresses, or whole namespaces: not how the chart names its own pods
				}
				if peer.NamespaceSelector != nil {
					ns, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
					require.NoError(t, err)
					if !ns.Matches(labels.Set{"kubernetes.io/metadata.name": namespace}) {
						continue
					}
				}
				s, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
				require.NoError(t, err)
				if s.Matches(labels.Set(other.Spec.Template.Labels)) {
					return true
				}
			}
		}
	}
	return false
}

// egressMayReach: whether an egress rule may let a pod reach Postgres.
func egressMayReach(t *testing.T, rule networkingv1.NetworkPolicyEgressRule, pgPeers []networkingv1.NetworkPolicyPeer, pgLabels labels.Set, port int32) bool {
	t.Helper()
	if !portsInclude(rule.Ports, port) {
		return false
	}
	if len(rule.To) == 0 {
		return true // any destination
	}
	for _, peer := range rule.To {
		if peer.IPBlock != nil {
			if ipBlockMayHoldPods(t, peer.IPBlock) {
				return true
			}
			continue
		}
		for _, pp := range pgPeers {
			if equalJSON(t, pp, peer) {
				return true
			}
		}
		if peer.PodSelector == nil {
			return true // every pod of the selected namespaces
		}
		s, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
		require.NoError(t, err)
		if s.Matches(pgLabels) {
			return true
		}
	}
	return false
}

func portsInclude(ports []networkingv1.NetworkPolicyPort, port int32) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.String:
			return true // a named port may be anything
		case p.Port.IntVal == port:
			return true
		case p.EndPort != nil && p.Port.IntVal <= port && port <= *p.EndPort:
			return true
		}
	}
	return false
}

// ipBlockMayHoldPods: the block overlaps an address range a cluster uses and does not
// except all of it.
func ipBlockMayHoldPods(t *testing.T, b *networkingv1.IPBlock) bool {
	t.Helper()
	cidr, err := netip.ParsePrefix(b.CIDR)
	require.NoError(t, err)
	for _, rng := range clusterRanges {
		if !cidr.Overlaps(rng) {
			continue
		}
		covered := false
		for _, e := range b.Except {
			ex, err := netip.ParsePrefix(e)
			require.NoError(t, err)
			if ex.Bits() <= rng.Bits() && ex.Contains(rng.Addr()) {
				covered = true
			}
		}
		if !covered {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------------------------
// Secrets.

func checkSecrets(t *testing.T, r *rendered) {
	t.Helper()
	existing := r.values["secrets"].(map[string]any)["existingSecret"].(string)
	pg := r.values["postgres"].(map[string]any)
	var chartSecrets []*corev1.Secret
	hooks := map[string]*corev1.Secret{}
	for _, s := range r.secrets {
		for k, v := range s.StringData {
			require.NotEmpty(t, v, "%s: empty %s", s.Name, k)
		}
		if s.Annotations["helm.sh/hook"] != "" {
			hooks[s.Name] = s
			continue
		}
		chartSecrets = append(chartSecrets, s)
		require.GreaterOrEqual(t, len(s.StringData["NOETL_INTERNAL_SECRET"]), 32, "%s: NOETL_INTERNAL_SECRET", s.Name)
		for k := range s.StringData {
			require.NotContains(t, k, "PG", "%s: a Postgres URL in the Secret every service reads", s.Name)
		}
	}
	if existing != "" {
		require.Empty(t, chartSecrets, "a Secret rendered although secrets.existingSecret is set")
	} else {
		require.Len(t, chartSecrets, 1, "the chart's Secret")
	}
	// A login Secret per service (unless it names its own): its URL connects as the
	// service's login role with the password beside it, to the configured database.
	for _, comp := range postgresOwners {
		login := pg["logins"].(map[string]any)[comp].(map[string]any)
		name := release + "-pg-" + comp
		if login["existingSecret"].(string) != "" {
			require.NotContains(t, hooks, name, "%s rendered although it names its own Secret", comp)
			continue
		}
		s := hooks[name]
		require.NotNil(t, s, "no login Secret for the %s", comp)
		u, err := url.Parse(s.StringData["NOETL_PG_URL"])
		require.NoError(t, err, name)
		require.Equal(t, login["user"], u.User.Username(), name)
		pw, _ := u.User.Password()
		require.GreaterOrEqual(t, len(pw), 32, name)
		require.Equal(t, s.StringData["password"], pw, name)
		require.Equal(t, "/"+pg["database"].(string), u.Path, name)
		require.Equal(t, pg["sslmode"], u.Query().Get("sslmode"), name)
		require.Equal(t, strconv.Itoa(toInt(t, pg["port"])), u.Port(), name)
	}
	// Every secret reference names a Secret the chart renders, the existing one, a login's
	// own, or the migrating role's (CloudNativePG's superuser Secret).
	provided := map[string]bool{existing: existing != "", pg["adminUrlSecret"].(map[string]any)["name"].(string): true}
	for _, l := range pg["logins"].(map[string]any) {
		if e := l.(map[string]any)["existingSecret"].(string); e != "" {
			provided[e] = true
		}
	}
	refs := func(owner string, env []corev1.EnvVar) {
		for _, e := range env {
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				continue
			}
			name := e.ValueFrom.SecretKeyRef.Name
			ok := name != "" && provided[name]
			for _, s := range r.secrets {
				if s.Name == name {
					_, has := s.StringData[e.ValueFrom.SecretKeyRef.Key]
					require.True(t, has, "%s: %s refers to a missing key", owner, e.Name)
					ok = true
				}
			}
			require.True(t, ok, "%s: %s refers to Secret %q, which nothing provides", owner, e.Name, name)
		}
	}
	for _, d := range r.deployments {
		refs(d.Name, d.Spec.Template.Spec.Containers[0].Env)
	}
	for _, j := range r.jobs {
		refs(j.Name, j.Spec.Template.Spec.Containers[0].Env)
	}
}

// pgSecretRef returns the Secret key a Deployment's NOETL_PG_URL comes from.
func pgSecretRef(t *testing.T, d *appsv1.Deployment) corev1.SecretKeySelector {
	t.Helper()
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "NOETL_PG_URL" {
			require.True(t, e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil, "%s: NOETL_PG_URL not from a Secret", d.Name)
			return *e.ValueFrom.SecretKeyRef
		}
	}
	t.Fatalf("%s: no NOETL_PG_URL", d.Name)
	return corev1.SecretKeySelector{}
}

// ---------------------------------------------------------------------------------------
// The README's configuration table.

// readmeEnv returns every variable the README's configuration table documents;
// NOETL_<SERVICE>_ADMIN is expanded for each service.
func readmeEnv(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	text := string(b)
	start := strings.Index(text, "\n## Configuration")
	require.GreaterOrEqual(t, start, 0, "README has no Configuration section")
	section := text[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	name := regexp.MustCompile("`(NOETL_[A-Z0-9_<>]+|GOMAXPROCS)`")
	env := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(strings.TrimSpace(line), "|") {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			if strings.Contains(m[1], "<SERVICE>") {
				for _, c := range components {
					env[strings.ReplaceAll(m[1], "<SERVICE>", strings.ToUpper(c))] = true
				}
				continue
			}
			env[m[1]] = true
		}
	}
	require.Contains(t, env, "NOETL_PG_URL", "README table not parsed")
	return env
}

// serviceFlagEnv returns the NOETL_* names the services' Config.Flags bind.
func serviceFlagEnv(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "services", "*", "*.go"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	bind := regexp.MustCompile(`fs\.[A-Za-z]+\([^,]+, "[^"]+", "(NOETL_[A-Z0-9_]+)"`)
	env := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range bind.FindAllStringSubmatch(string(b), -1) {
			env[m[1]] = true
		}
	}
	require.Contains(t, env, "NOETL_PG_URL", "Config.Flags not parsed")
	return env
}

// ---------------------------------------------------------------------------------------
// Helpers.

func (r *rendered) deployment(name string) *appsv1.Deployment {
	for _, d := range r.deployments {
		if d.Name == name {
			return d
		}
	}
	return nil
}

func (r *rendered) service(name string) *corev1.Service {
	for _, s := range r.services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// containerEnv: the literal variables of a Deployment's container.
func containerEnv(d *appsv1.Deployment) map[string]string {
	env := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	return env
}

func toInt(t *testing.T, v any) int {
	t.Helper()
	switch n := v.(type) {
	case int:
		return n
	case int64:
		return int(n)
	case float64:
		return int(n)
	case json.Number:
		i, err := n.Int64()
		require.NoError(t, err)
		return int(i)
	}
	t.Fatalf("not a number: %v (%T)", v, v)
	return 0
}

func remarshal(t *testing.T, in, out any) {
	t.Helper()
	b, err := json.Marshal(in)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, out))
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	x, err := json.Marshal(a)
	require.NoError(t, err)
	y, err := json.Marshal(b)
	require.NoError(t, err)
	return bytes.Equal(x, y)
}

// merged merges values maps, later ones winning.
func merged(ms ...map[string]any) map[string]any {
	out := map[string]any{}
	for _, m := range ms {
		out = chartutil.MergeTables(deepCopy(m), out)
	}
	return out
}

// nested returns the values {path[0]: {path[1]: ... v}}.
func nested(v any, path ...string) map[string]any {
	for i := len(path) - 1; i > 0; i-- {
		v = map[string]any{path[i]: v}
	}
	return map[string]any{path[0]: v}
}

func deepCopy(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			v = deepCopy(sub)
		}
		out[k] = v
	}
	return out
}

// TestChartHTTPEgress: each pool's NOETL_HTTP_EGRESS comes from httpEgress (public unless
// set), and the deprecated httpAllowPrivate: true still renders private.
func TestChartHTTPEgress(t *testing.T) {
	t.Parallel()
	egress := func(r *rendered) map[string]string {
		out := map[string]string{}
		for _, d := range r.deployments {
			env := containerEnv(d)
			if pool, ok := env["NOETL_WORKER_POOL"]; ok {
				require.NotContains(t, env, "NOETL_HTTP_ALLOW_PRIVATE", d.Name)
				out[pool] = env["NOETL_HTTP_EGRESS"]
			}
		}
		return out
	}
	require.Equal(t, map[string]string{"shared": "public", "system": "public"}, egress(renderChart(t, nil, nil)))
	require.Equal(t, map[string]string{"shared": "loopback", "system": "public"},
		egress(renderChart(t, nil, nested("loopback", "workers", "pools", "shared", "httpEgress"))))
	require.Equal(t, map[string]string{"shared": "private", "system": "private"},
		egress(renderChart(t, nil, nested(true, "workers", "defaults", "httpAllowPrivate"))))
	_, err := renderFiles(t, nil, nested("everything", "workers", "defaults", "httpEgress"), false)
	require.Error(t, err)
	require.Contains(t, err.Error(), "httpEgress")
}
