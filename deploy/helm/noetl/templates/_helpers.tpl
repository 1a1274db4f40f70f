{{/* Chart name. */}}
{{- define "noetl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release full name; every object is named <fullname>-<component>. */}}
{{- define "noetl.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Object name of a component: dict root, name ("gateway", "worker-shared"). */}}
{{- define "noetl.objname" -}}
{{- printf "%s-%s" (include "noetl.fullname" .root) .name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: dict root, component, pool (workers only). */}}
{{- define "noetl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "noetl.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- with get . "pool" }}
noetl.io/pool: {{ . }}
{{- end }}
{{- end -}}

{{/* All labels: dict root, component, pool. */}}
{{- define "noetl.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "noetl.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: noetl
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels of the whole release, for objects that belong to no single component. */}}
{{- define "noetl.releaseLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "noetl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: noetl
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Pod selector of one component (any pool for workers): dict root, component. */}}
{{- define "noetl.componentPeer" -}}
podSelector:
  matchLabels:
    app.kubernetes.io/name: {{ include "noetl.name" .root }}
    app.kubernetes.io/instance: {{ .root.Release.Name }}
    app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "noetl.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "noetl.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* gRPC address of a component's Service: dict root, component, port. */}}
{{- define "noetl.addr" -}}
{{- printf "%s:%d" (include "noetl.objname" (dict "root" .root "name" .component)) (int .port) -}}
{{- end -}}

{{/*
The resultstore's Arrow Flight location, handed to clients with their tickets by the gateway
and by the resultstore itself (NOETL_RESULTSTORE_FLIGHT_LOCATION): resultstore.flightLocation
(rendered with tpl), else its Service's name in the namespace, which every pod of the cluster
resolves.
*/}}
{{- define "noetl.flightLocation" -}}
{{- $v := .Values.resultstore -}}
{{- if $v.flightLocation -}}
{{- tpl $v.flightLocation . -}}
{{- else -}}
{{- printf "grpc://%s.%s.svc:%d" (include "noetl.objname" (dict "root" . "name" "resultstore")) .Release.Namespace (int $v.flightPort) -}}
{{- end -}}
{{- end -}}

{{- define "noetl.secretName" -}}
{{- default (include "noetl.fullname" .) .Values.secrets.existingSecret -}}
{{- end -}}

{{/* Whether the chart renders its own Secret ("true" or ""). */}}
{{- define "noetl.createSecret" -}}
{{- if not .Values.secrets.existingSecret -}}
true
{{- end -}}
{{- end -}}

{{/*
NOETL_INTERNAL_SECRET for the chart's Secret: the value given, else the one the release's
Secret already holds (so an upgrade keeps it), else a new random one. Generated once per
render, however often it is included.
*/}}
{{- define "noetl.internalSecretValue" -}}
{{- $s := .Values.secrets -}}
{{- if $s.internalSecret -}}
{{- if lt (len $s.internalSecret) 32 -}}
{{- fail "secrets.internalSecret must be at least 32 bytes (head -c 32 /dev/urandom | base64)" -}}
{{- end -}}
{{- $s.internalSecret -}}
{{- else -}}
{{- if not (hasKey .Release "noetlInternalSecret") -}}
{{- $value := "" -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "noetl.fullname" .) -}}
{{- with $existing -}}
{{- with get (get . "data" | default dict) $s.keys.internalSecret -}}
{{- $value = b64dec . -}}
{{- end -}}
{{- end -}}
{{- $_ := set .Release "noetlInternalSecret" ($value | default (randAlphaNum 48)) -}}
{{- end -}}
{{- get .Release "noetlInternalSecret" -}}
{{- end -}}
{{- end -}}

{{/* The services that connect to Postgres, each as a login role of its own. */}}
{{- define "noetl.pgServices" -}}
orchestrator materializer statebuilder resultstore
{{- end -}}

{{/* The Secret holding a service's NOETL_PG_URL (key NOETL_PG_URL): dict root, service. */}}
{{- define "noetl.pgLoginSecretName" -}}
{{- $l := get .root.Values.postgres.logins .service -}}
{{- $l.existingSecret | default (include "noetl.objname" (dict "root" .root "name" (printf "pg-%s" .service))) -}}
{{- end -}}

{{/*
The password of a service's login role, for the Secret the chart renders (dict root,
service): the one that Secret already holds (so an upgrade keeps it), else a new random one.
Generated once per render, however often it is included.
*/}}
{{- define "noetl.pgLoginPassword" -}}
{{- $key := printf "noetlPgPassword%s" .service -}}
{{- if not (hasKey .root.Release $key) -}}
{{- $value := "" -}}
{{- with lookup "v1" "Secret" .root.Release.Namespace (include "noetl.pgLoginSecretName" .) -}}
{{- with get (get . "data" | default dict) "password" -}}
{{- $value = b64dec . -}}
{{- end -}}
{{- end -}}
{{- $_ := set .root.Release $key ($value | default (randAlphaNum 32)) -}}
{{- end -}}
{{- get .root.Release $key -}}
{{- end -}}

{{/* The URL a service connects with, as its login role: dict root, service. */}}
{{- define "noetl.pgLoginURL" -}}
{{- $p := .root.Values.postgres -}}
{{- $l := get $p.logins .service -}}
{{- printf "postgres://%s:%s@%s:%d/%s?sslmode=%s" $l.user (include "noetl.pgLoginPassword" .) (tpl $p.host .root) (int $p.port) $p.database $p.sslmode -}}
{{- end -}}

{{/* NOETL_PG_URL of one service, from its own login Secret: dict root, service. */}}
{{- define "noetl.env.pgUrl" -}}
- name: NOETL_PG_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "noetl.pgLoginSecretName" . }}
      key: NOETL_PG_URL
{{- end -}}

{{/*
NOETL_PG_URL of the migrate job: a role that owns the noetl schema (or may create it) and
may create roles. No service holds it.
*/}}
{{- define "noetl.env.pgAdminUrl" -}}
{{- $s := .Values.secrets -}}
- name: NOETL_PG_URL
  valueFrom:
    secretKeyRef:
{{- if .Values.postgres.adminUrlSecret.name }}
      name: {{ .Values.postgres.adminUrlSecret.name }}
      key: {{ required "postgres.adminUrlSecret.key is required with postgres.adminUrlSecret.name" .Values.postgres.adminUrlSecret.key }}
{{- else if $s.pgAdminUrl }}
      name: {{ include "noetl.objname" (dict "root" . "name" "migrate") }}
      key: NOETL_PG_URL
{{- else if $s.existingSecret }}
      name: {{ include "noetl.secretName" . }}
      key: {{ $s.keys.pgAdminUrl }}
{{- else }}
{{- fail "the migrate job's NOETL_PG_URL: set postgres.adminUrlSecret.name (e.g. the CloudNativePG <cluster>-superuser Secret), secrets.pgAdminUrl or secrets.existingSecret" }}
{{- end }}
{{- end -}}

{{/* An optional secret variable: dict root, env, key (name under secrets.keys), value. */}}
{{- define "noetl.env.optionalSecret" -}}
{{- $s := .root.Values.secrets -}}
{{- if or $s.existingSecret .value }}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
      name: {{ include "noetl.secretName" .root }}
      key: {{ get $s.keys .key }}
      optional: true
{{- end }}
{{- end -}}

{{/* NOETL_INTERNAL_SECRET: required by every service that serves or calls internal gRPC. */}}
{{- define "noetl.env.internalSecret" -}}
- name: NOETL_INTERNAL_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ include "noetl.secretName" . }}
      key: {{ .Values.secrets.keys.internalSecret }}
{{- end -}}

{{/*
A Deployment: dict
  root       the chart root context
  name       object name suffix ("gateway", "worker-shared")
  component  component label and binary name
  pool       worker pool ("" for the other components)
  v          the component's values
  env        its NOETL_* variables (YAML list, already rendered)
  ports      extra container ports (list of dicts name, port)
  managed    true when an HPA or a ScaledObject owns the replica count
*/}}
{{- define "noetl.deployment" -}}
{{- $root := .root -}}
{{- $v := .v -}}
{{- $sel := dict "root" $root "component" .component "pool" .pool -}}
{{- $probes := mergeOverwrite (deepCopy $root.Values.probes) (deepCopy ($v.probes | default dict)) -}}
{{- $image := mergeOverwrite (deepCopy $root.Values.image) (deepCopy ($v.image | default dict)) -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "noetl.objname" . }}
  labels:
    {{- include "noetl.labels" $sel | nindent 4 }}
spec:
  {{- if not .managed }}
  replicas: {{ $v.replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  strategy:
    type: RollingUpdate
    rollingUpdate:
      {{- if .ports }}
      # Serves RPCs: a new pod must be ready before an old one goes.
      maxSurge: 25%
      maxUnavailable: 0
      {{- else }}
      # A consumer: its readiness reports lag, so a rollout must not wait for a new pod to
      # be ready before replacing an old one (the new one is what drains the lag).
      maxSurge: 1
      maxUnavailable: 1
      {{- end }}
  selector:
    matchLabels:
      {{- include "noetl.selectorLabels" $sel | nindent 6 }}
  template:
    metadata:
      {{- /* Selector labels only: a label that changes with the chart version would
      restart every pod on an upgrade that changes nothing else. */}}
      labels:
        {{- include "noetl.selectorLabels" $sel | nindent 8 }}
        app.kubernetes.io/part-of: noetl
      {{- $annotations := merge (dict) ($v.podAnnotations | default dict) ($root.Values.podAnnotations | default dict) }}
      {{- if include "noetl.createSecret" $root }}
      {{- $_ := set $annotations "checksum/secret" (include (print $root.Template.BasePath "/secret.yaml") $root | sha256sum) }}
      {{- end }}
      {{- /* A change of the service's own Postgres URL (host, database, user) restarts it. */}}
      {{- if has .component (splitList " " (include "noetl.pgServices" $root)) }}
      {{- if not (get $root.Values.postgres.logins .component).existingSecret }}
      {{- $_ := set $annotations "checksum/postgres" (include "noetl.pgLoginURL" (dict "root" $root "service" .component) | sha256sum) }}
      {{- end }}
      {{- end }}
      {{- with $annotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "noetl.serviceAccountName" $root }}
      automountServiceAccountToken: {{ $root.Values.automountServiceAccountToken }}
      enableServiceLinks: false
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      {{- if $root.Values.topologySpread.enabled }}
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: {{ $root.Values.topologySpread.topologyKey }}
          whenUnsatisfiable: {{ $root.Values.topologySpread.whenUnsatisfiable }}
          labelSelector:
            matchLabels:
              {{- include "noetl.selectorLabels" $sel | nindent 14 }}
      {{- end }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ .component }}
          image: {{ printf "%s:%s" $image.repository (default $root.Chart.AppVersion $image.tag | toString) | quote }}
          imagePullPolicy: {{ $image.pullPolicy }}
          command: [{{ .component | quote }}]
          env:
            {{- .env | nindent 12 }}
            {{- /* The Go scheduler's processors from the container's CPU limit, rounded up:
            the runtime's own reading of a cgroup limit never goes below 2, so a 1-CPU service
            would run 2 processors and wake a parked thread on another core at every hand-off
            (docs/operations.md, Sizing). extraEnv may set GOMAXPROCS instead. */}}
            {{- $ownProcs := false }}
            {{- range $v.extraEnv }}{{ if eq .name "GOMAXPROCS" }}{{ $ownProcs = true }}{{ end }}{{ end }}
            {{- if and (not $ownProcs) (dig "limits" "cpu" "" ($v.resources | default dict)) }}
            - name: GOMAXPROCS
              valueFrom:
                resourceFieldRef:
                  resource: limits.cpu
                  divisor: "1"
            {{- end }}
            {{- with $v.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: admin
              containerPort: {{ $root.Values.adminPort }}
              protocol: TCP
            {{- range .ports }}
            - name: {{ .name }}
              containerPort: {{ .port }}
              protocol: TCP
            {{- end }}
          startupProbe:
            httpGet:
              path: /livez
              port: admin
            periodSeconds: {{ $probes.startup.periodSeconds }}
            timeoutSeconds: {{ $probes.startup.timeoutSeconds }}
            failureThreshold: {{ $probes.startup.failureThreshold }}
          livenessProbe:
            httpGet:
              path: /livez
              port: admin
            periodSeconds: {{ $probes.liveness.periodSeconds }}
            timeoutSeconds: {{ $probes.liveness.timeoutSeconds }}
            failureThreshold: {{ $probes.liveness.failureThreshold }}
          readinessProbe:
            httpGet:
              path: /readyz
              port: admin
            periodSeconds: {{ $probes.readiness.periodSeconds }}
            timeoutSeconds: {{ $probes.readiness.timeoutSeconds }}
            failureThreshold: {{ $probes.readiness.failureThreshold }}
          {{- if $v.preStopSleepSeconds }}
          lifecycle:
            preStop:
              sleep:
                seconds: {{ $v.preStopSleepSeconds }}
          {{- end }}
          resources:
            requests:
              {{- required (printf "%s: resources.requests is required" .name) $v.resources.requests | toYaml | nindent 14 }}
            limits:
              {{- required (printf "%s: resources.limits is required" .name) $v.resources.limits | toYaml | nindent 14 }}
          securityContext:
            {{- toYaml $root.Values.containerSecurityContext | nindent 12 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
      volumes:
        - name: tmp
          emptyDir:
            sizeLimit: {{ $v.tmpSizeLimit | default "64Mi" }}
{{- end -}}

{{/* The ClusterIP Service of a component: dict root, name, component, pool, ports. */}}
{{- define "noetl.service" -}}
{{- $sel := dict "root" .root "component" .component "pool" .pool -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "noetl.objname" . }}
  labels:
    {{- include "noetl.labels" $sel | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "noetl.selectorLabels" $sel | nindent 4 }}
  ports:
    {{- range .ports }}
    - name: {{ .name }}
      port: {{ .port }}
      targetPort: {{ .name }}
      protocol: TCP
      appProtocol: {{ .appProtocol }}
    {{- end }}
    - name: admin
      port: {{ .root.Values.adminPort }}
      targetPort: admin
      protocol: TCP
      appProtocol: http
{{- end -}}

{{/* A CPU HorizontalPodAutoscaler: dict root, name, component, v. */}}
{{- define "noetl.hpa" -}}
{{- $a := .v.autoscaling -}}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ include "noetl.objname" . }}
  labels:
    {{- include "noetl.labels" (dict "root" .root "component" .component) | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ include "noetl.objname" . }}
  minReplicas: {{ $a.minReplicas }}
  maxReplicas: {{ $a.maxReplicas }}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {{ $a.targetCPUUtilizationPercentage }}
  behavior:
    scaleDown:
      stabilizationWindowSeconds: 300
      policies:
        - type: Pods
          value: 1
          periodSeconds: 60
{{- end -}}

{{/* A PodDisruptionBudget: dict root, name, component, pool, pdb. */}}
{{- define "noetl.pdb" -}}
{{- $sel := dict "root" .root "component" .component "pool" .pool -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "noetl.objname" . }}
  labels:
    {{- include "noetl.labels" $sel | nindent 4 }}
spec:
  {{- if hasKey .pdb "minAvailable" }}
  minAvailable: {{ .pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ .pdb.maxUnavailable | default 1 }}
  {{- end }}
  unhealthyPodEvictionPolicy: AlwaysAllow
  selector:
    matchLabels:
      {{- include "noetl.selectorLabels" $sel | nindent 6 }}
{{- end -}}

{{/*
A KEDA ScaledObject on one JetStream consumer's lag: dict root, name, component, pool,
stream, consumer, keda (minReplicaCount, maxReplicaCount, lagThreshold,
activationLagThreshold, pollingInterval, cooldownPeriod, fallbackReplicas).
*/}}
{{- define "noetl.scaledObject" -}}
{{- $k := .keda -}}
{{- $root := .root -}}
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: {{ include "noetl.objname" . }}
  labels:
    {{- include "noetl.labels" (dict "root" .root "component" .component "pool" .pool) | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ include "noetl.objname" . }}
  pollingInterval: {{ $k.pollingInterval }}
  cooldownPeriod: {{ $k.cooldownPeriod }}
  minReplicaCount: {{ $k.minReplicaCount }}
  maxReplicaCount: {{ $k.maxReplicaCount }}
  fallback:
    failureThreshold: 3
    replicas: {{ $k.fallbackReplicas }}
  advanced:
    horizontalPodAutoscalerConfig:
      behavior:
        scaleDown:
          stabilizationWindowSeconds: 300
          policies:
            - type: Pods
              value: 1
              periodSeconds: 60
  triggers:
    - type: nats-jetstream
      metadata:
        natsServerMonitoringEndpoint: {{ tpl $root.Values.nats.monitoringEndpoint $root | quote }}
        account: {{ $root.Values.nats.account | quote }}
        stream: {{ .stream }}
        consumer: {{ .consumer | quote }}
        lagThreshold: {{ $k.lagThreshold | quote }}
        activationLagThreshold: {{ $k.activationLagThreshold | quote }}
        useHttps: "false"
{{- end -}}

{{/*
The settings of one worker pool, as YAML: workers.defaults overridden by the pool's own
values (dict root, pool, pv). keda, pdb and resources merge key by key; everything else is
replaced. An unknown key fails the render rather than being silently ignored.
*/}}
{{- define "noetl.pool" -}}
{{- $d := .root.Values.workers.defaults -}}
{{- $v := deepCopy $d -}}
{{- $pool := .pool -}}
{{- range $k, $x := (.pv | default dict) -}}
{{- if not (hasKey $d $k) -}}
{{- fail (printf "workers.pools.%s.%s: unknown setting (known: %s)" $pool $k (keys $d | sortAlpha | join ", ")) -}}
{{- end -}}
{{- if and (has $k (list "keda" "pdb" "resources")) (kindIs "map" $x) -}}
{{- $sub := deepCopy (get $d $k | default dict) -}}
{{- range $k2, $x2 := $x -}}
{{- $_ := set $sub $k2 $x2 -}}
{{- end -}}
{{- $_ := set $v $k $sub -}}
{{- else -}}
{{- $_ := set $v $k $x -}}
{{- end -}}
{{- end -}}
{{- toYaml $v -}}
{{- end -}}

{{/* Fails unless the pool name can be a subject token, a consumer name and a DNS label. */}}
{{- define "noetl.checkPool" -}}
{{- if not (regexMatch "^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$" .) -}}
{{- fail (printf "workers.pools.%s: a pool name is 1-15 lower-case letters, digits and '-', starting and ending with a letter or digit" .) -}}
{{- end -}}
{{- end -}}
