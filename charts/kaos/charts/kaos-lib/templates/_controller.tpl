{{/*
Everything one controller needs, from its chart's values (documented in its values.yaml):
  .Values.controller: name (e.g. agent-controller), lease (Lease name), image
  .Values.rbac.rules: the rules this controller uses (cluster-wide or per watched namespace)
  .Values.rbac.systemRules: rules in the release namespace only (e.g. the MCP runtime registry)
  .Values.<pod setting> (nodeSelector, tolerations, ...): this controller's, over .Values.global's
and .Values.global for the settings every controller shares. Called with
(dict "root" $ "env" <list of {name, value}> "resource" <plural, e.g. agents> "workloads" true):
the environment only this controller reads, and the kind whose finalizer it adds (released on
uninstall); no "resource" for kinds without a finalizer (MemoryStores, AccessGrants,
ThirdPartyServices), which need no uninstall hook. "workloads": the controller generates pods
(agents, ModelAPIs, MCP servers, MemoryStores), so it takes the settings of their
NetworkPolicies (global.networkPolicy); the authz and workflow controllers generate none.
*/}}

{{/*
The prefix of every object name of a release: global.fullnameOverride, else the release name
when it contains the chart name (`kaos`, or global.nameOverride), else `<release>-<name>`.
Release `kaos` gives `kaos` (so kaos-agent-controller), release `prod` gives `prod-kaos`.
Also used by the umbrella chart (PrometheusRule, dashboards), with the same globals.
*/}}
{{- define "kaos-lib.prefix" -}}
{{- $global := .Values.global | default dict -}}
{{- if $global.fullnameOverride -}}
{{- $global.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := $global.nameOverride | default "kaos" -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The controller's objects: its fullnameOverride, else `<prefix>-<controller.name>` (at most
55 characters, so `-metrics` still fits a Service name). */}}
{{- define "kaos-lib.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 55 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" (include "kaos-lib.prefix" .) .Values.controller.name | trunc 55 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
The controller's Deployment, from its full name (the argument, e.g. kaos-agent-controller): that
name with `-controller-manager` appended, sharing a trailing `-controller`, so
kaos-agent-controller-manager (a fullnameOverride `agents` gives agents-controller-manager), at
most 63 characters. Only the Deployment (hence its pods) is named so; every other object keeps the
full name. kaos-cli's `kaos system status` (0.8.4) takes the first Deployment whose name contains
`kaos-operator` or `controller-manager` for the installed operator (docs/install.md, "Names and
several releases"). Also used by the umbrella chart (NOTES.txt).
*/}}
{{- define "kaos-lib.deploymentName" -}}
{{- printf "%s-controller-manager" (trimSuffix "-controller" . | trunc 44 | trimSuffix "-") -}}
{{- end -}}

{{/* The Lease of the leader election: controller.lease, else the full name. */}}
{{- define "kaos-lib.lease" -}}
{{- .Values.controller.lease | default (include "kaos-lib.fullname" .) -}}
{{- end -}}

{{- define "kaos-lib.labels" -}}
app.kubernetes.io/name: {{ .Values.controller.name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: kaos
app.kubernetes.io/component: controller
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "kaos-lib.selector" -}}
app.kubernetes.io/name: {{ .Values.controller.name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* `[registry/]repository@digest` when controller.image.digest is set, else
`[registry/]repository:tag` (controller.image.tag, else global.imageTag, else appVersion). */}}
{{- define "kaos-lib.image" -}}
{{- $image := .Values.controller.image -}}
{{- $repository := $image.repository -}}
{{- with .Values.global.imageRegistry -}}
{{- $repository = printf "%s/%s" . $repository -}}
{{- end -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository ($image.tag | default .Values.global.imageTag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* A map setting: the controller's keys over global's (dict "root" $ "key" "podLabels"). */}}
{{- define "kaos-lib.mergedMap" -}}
{{- $own := index .root.Values .key | default dict -}}
{{- $global := index .root.Values.global .key | default dict -}}
{{- merge (dict) $own $global | toYaml -}}
{{- end -}}

{{/* The labels and annotations of a monitoring object (ServiceMonitor, PrometheusRule), with the
extra ones of the values: (dict "labels" <the chart's labels, which win> "extraLabels" <map>
"annotations" <map>). */}}
{{- define "kaos-lib.monitoringMetadata" -}}
labels:
  {{- merge .labels (.extraLabels | default dict) | toYaml | nindent 2 }}
{{- with .annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* What secure metrics need of the API server: reviewing who scrapes (global.metrics.secure). */}}
{{- define "kaos-lib.metricsAuthRules" -}}
# Secure metrics: the scraper's token is checked with a TokenReview, its access to /metrics with a
# SubjectAccessReview.
- apiGroups: ["authentication.k8s.io"]
  resources: ["tokenreviews"]
  verbs: ["create"]
- apiGroups: ["authorization.k8s.io"]
  resources: ["subjectaccessreviews"]
  verbs: ["create"]
{{- end -}}

{{/* A label map as the controllers read it: `k=v,k2=v2`, keys sorted; none: empty. A key whose
value is empty is left out: Helm merges a map of global values with the subcharts' defaults (a key
set to null comes back), so `""` is how a default label is dropped. */}}
{{- define "kaos-lib.labelText" -}}
{{- $pairs := list -}}
{{- range $key, $value := . -}}
{{- if $value -}}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) -}}
{{- end -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/*
The NETWORK_POLICY_* environment of a controller that generates workloads, from
global.networkPolicy (docs/network-policy.md, "Chart values"), when it is enabled: lists as
comma-separated text, label maps as `k=v,k2=v2`, the MCP egress map and the extra egress rules as
JSON. Disabled, nothing: the controllers' default is off (and they delete the policies they made).
Called with (dict "policy" global.networkPolicy "root" $). The workflow controller's pods, which
send A2A tasks to agents, are this release's (the release namespace, its instance label and the
workflow-controller name label): agents admit them on their port (docs/workflows.md, "Network
policies"); only the agent controller reads these two.
*/}}
{{- define "kaos-lib.networkPolicyEnv" -}}
{{- $policy := .policy -}}
{{- $root := .root -}}
{{- $external := $policy.external | default dict -}}
{{- $dns := $policy.dns | default dict -}}
{{- $gateway := $policy.gateway | default dict -}}
{{- $scraper := $policy.scraper | default dict -}}
{{- $apiServer := $policy.apiServer | default dict -}}
{{- $database := $policy.database | default dict -}}
- name: NETWORK_POLICY_ENABLED
  value: "true"
- name: NETWORK_POLICY_NAMESPACES
  value: {{ join "," ($policy.namespaces | default list) | quote }}
- name: NETWORK_POLICY_CLUSTER_CIDRS
  value: {{ join "," ($policy.clusterCIDRs | default list) | quote }}
- name: NETWORK_POLICY_EXTERNAL_CIDRS
  value: {{ join "," ($external.cidrs | default list) | quote }}
- name: NETWORK_POLICY_EXTERNAL_PORTS
  value: {{ join "," ($external.ports | default list) | quote }}
- name: NETWORK_POLICY_DNS_NAMESPACE_LABELS
  value: {{ include "kaos-lib.labelText" $dns.namespaceLabels | quote }}
- name: NETWORK_POLICY_DNS_POD_LABELS
  value: {{ include "kaos-lib.labelText" $dns.podLabels | quote }}
- name: NETWORK_POLICY_DNS_PORTS
  value: {{ join "," ($dns.ports | default list) | quote }}
- name: NETWORK_POLICY_GATEWAY_NAMESPACE_LABELS
  value: {{ include "kaos-lib.labelText" $gateway.namespaceLabels | quote }}
- name: NETWORK_POLICY_GATEWAY_POD_LABELS
  value: {{ include "kaos-lib.labelText" $gateway.podLabels | quote }}
- name: NETWORK_POLICY_SCRAPER_NAMESPACE_LABELS
  value: {{ include "kaos-lib.labelText" $scraper.namespaceLabels | quote }}
- name: NETWORK_POLICY_SCRAPER_POD_LABELS
  value: {{ include "kaos-lib.labelText" $scraper.podLabels | quote }}
- name: NETWORK_POLICY_WORKFLOW_NAMESPACE_LABELS
  value: {{ include "kaos-lib.labelText" (dict "kubernetes.io/metadata.name" $root.Release.Namespace) | quote }}
- name: NETWORK_POLICY_WORKFLOW_POD_LABELS
  value: {{ include "kaos-lib.labelText" (dict "app.kubernetes.io/name" "workflow-controller" "app.kubernetes.io/instance" $root.Release.Name) | quote }}
- name: NETWORK_POLICY_CONTROLLER_NAMESPACE_LABELS
  value: {{ include "kaos-lib.labelText" (dict "kubernetes.io/metadata.name" $root.Release.Namespace) | quote }}
- name: NETWORK_POLICY_CONTROLLER_POD_LABELS
  value: {{ include "kaos-lib.labelText" (dict "app.kubernetes.io/instance" $root.Release.Name "app.kubernetes.io/part-of" "kaos") | quote }}
- name: NETWORK_POLICY_APISERVER_CIDRS
  value: {{ join "," ($apiServer.cidrs | default list) | quote }}
- name: NETWORK_POLICY_APISERVER_PORTS
  value: {{ join "," ($apiServer.ports | default list) | quote }}
- name: NETWORK_POLICY_DATABASE_CIDRS
  value: {{ join "," ($database.cidrs | default list) | quote }}
- name: NETWORK_POLICY_DATABASE_PORTS
  value: {{ join "," ($database.ports | default list) | quote }}
- name: NETWORK_POLICY_MCP_EGRESS
  value: {{ $policy.mcpEgress | default dict | toJson | quote }}
- name: NETWORK_POLICY_EXTRA_EGRESS
  value: {{ $policy.extraEgress | default list | toJson | quote }}
- name: NETWORK_POLICY_DENIED_CIDRS
  value: {{ join "," ($policy.deniedCIDRs | default list) | quote }}
{{- end -}}

{{/* Where a global.metrics.certSecret is mounted (controller-runtime's usual path). */}}
{{- define "kaos-lib.metricsCertDir" -}}
/tmp/k8s-metrics-server/metrics-certs
{{- end -}}

{{- define "kaos-lib.controller" -}}
{{- $root := .root -}}
{{- $global := $root.Values.global -}}
{{- $fullname := include "kaos-lib.fullname" $root -}}
{{- $watch := $global.watchNamespaces | default list -}}
{{- $secure := $global.metrics.secure -}}
{{- $metricsPort := ternary 8443 8080 $secure -}}
{{- $serviceAccountAnnotations := merge (dict) ($root.Values.serviceAccount.annotations | default dict) ($global.serviceAccount.annotations | default dict) -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ $fullname }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "kaos-lib.labels" $root | nindent 4 }}
  {{- with $serviceAccountAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
automountServiceAccountToken: true
---
{{- if $watch }}
{{- range $ns := $watch }}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $fullname }}
  namespace: {{ $ns }}
  labels:
    {{- include "kaos-lib.labels" $root | nindent 4 }}
rules:
  {{- toYaml $root.Values.rbac.rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $fullname }}
  namespace: {{ $ns }}
  labels:
    {{- include "kaos-lib.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $fullname }}
subjects:
  - kind: ServiceAccount
    name: {{ $fullname }}
    namespace: {{ $root.Release.Namespace }}
---
{{- end }}
{{- if $secure }}
# The reviews are cluster-scoped: a ClusterRole even in namespaced mode, granting nothing else.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $fullname }}-metrics-auth
  labels:
    {{- include "kaos-lib.labels" $root | nindent 4 }}
rules:
  {{- include "kaos-lib.metricsAuthRules" $root | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $fullname }}-metrics-auth
  labels:
    {{- include "kaos-lib.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $fullname }}-metrics-auth
subjects:
  - kind: ServiceAccount
    name: {{ $fullname }}
    namespace: {{ $root.Release.Namespace }}
---
{{- end }}
{{- else }}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $fullname }}
  labels:
    {{- include "kaos-lib.labels" $root | nindent 4 }}
rules:
  {{- toYaml $root.Values.rbac.rules | nindent 2 }}
  {{- if $secure }}
  {{- include "kaos-lib.metricsAuthRules" $root | nindent 2 }}
  {{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $fullname }}
  labels:
    {{- include "kaos-lib.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $fullname }}
subjects:
  - kind: ServiceAccount
    name: {{ $fullname }}
    namespace: {{ $root.Release.Namespace }}
---
{{- end }}
# The controller's own Lease (leader election) and release-namespace rules.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $fullname }}-leader-election
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "kaos-lib.labels" $root | nindent 4 }}
rules:
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    resourceNames: [{{ include "kaos-lib.lease" $root | quote }}]
    verbs: ["get", "update"]
  # Creating the Lease cannot be limited by name (the name is not known to RBAC before it exists).
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["create"]
  {{- with $root.Values.rbac.systemRules }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $fullname }}-leader-election
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "kaos-lib.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $fullname }}-leader-election
subjects:
  - kind: ServiceAccount
    name: {{ $fullname }}
    namespace: {{ $root.Release.Namespace }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "kaos-lib.deploymentName" $fullname }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "kaos-lib.labels" $root | nindent 4 }}
spec:
  replicas: {{ $root.Values.replicas }}
  selector:
    matchLabels:
      {{- include "kaos-lib.selector" $root | nindent 6 }}
  template:
    metadata:
      labels:
        {{- /* The chart's own labels win: the selector must keep matching. */}}
        {{- merge (include "kaos-lib.labels" $root | fromYaml) (include "kaos-lib.mergedMap" (dict "root" $root "key" "podLabels") | fromYaml) | toYaml | nindent 8 }}
      {{- with include "kaos-lib.mergedMap" (dict "root" $root "key" "podAnnotations") | fromYaml }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ $fullname }}
      {{- with concat ($global.imagePullSecrets | default list) ($root.Values.imagePullSecrets | default list) }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.priorityClassName | default $global.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- with include "kaos-lib.mergedMap" (dict "root" $root "key" "nodeSelector") | fromYaml }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- /* Lists and affinity: the controller's when set, else global's. */}}
      {{- range $key := list "affinity" "tolerations" "topologySpreadConstraints" }}
      {{- with index $root.Values $key | default (index $global $key) }}
      {{ $key }}:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- end }}
      securityContext:
        runAsNonRoot: true
        {{- /* Unset (null) lets the platform assign them, as OpenShift's restricted SCC does. */}}
        {{- with $global.runAsUser }}
        runAsUser: {{ int . }}
        {{- end }}
        {{- with $global.runAsGroup }}
        runAsGroup: {{ int . }}
        {{- end }}
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: controller
          image: {{ include "kaos-lib.image" $root }}
          imagePullPolicy: {{ $root.Values.controller.image.pullPolicy | default "IfNotPresent" }}
          args:
            - --metrics-bind-address=:{{ $metricsPort }}
            {{- if $secure }}
            - --metrics-secure=true
            {{- if $global.metrics.certSecret }}
            - --metrics-cert-dir={{ include "kaos-lib.metricsCertDir" $root }}
            {{- end }}
            {{- end }}
            - --health-probe-bind-address=:8081
            - --leader-elect={{ $root.Values.leaderElection.enabled }}
            {{- with concat ($global.extraArgs | default list) ($root.Values.extraArgs | default list) }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          env:
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            - name: LEADER_ELECTION_ID
              value: {{ include "kaos-lib.lease" $root | quote }}
            - name: LEASE_DURATION
              value: {{ $global.leaderElection.leaseDuration | quote }}
            - name: RENEW_DEADLINE
              value: {{ $global.leaderElection.renewDeadline | quote }}
            - name: RETRY_PERIOD
              value: {{ $global.leaderElection.retryPeriod | quote }}
            - name: RECONCILE_DEBOUNCE
              value: {{ $global.reconcileDebounce | default "200ms" | quote }}
            - name: MAX_CONCURRENT_RECONCILES
              value: {{ $root.Values.maxConcurrentReconciles | default $global.maxConcurrentReconciles | default 4 | int | quote }}
            - name: LOG_FORMAT
              value: {{ $global.controllerLogFormat | quote }}
            {{- with $root.Values.controllerLogLevel | default $global.controllerLogLevel }}
            - name: CONTROLLER_LOG_LEVEL
              value: {{ . | quote }}
            {{- end }}
            {{- with $watch }}
            - name: WATCH_NAMESPACES
              value: {{ join "," . | quote }}
            {{- end }}
            - name: GATEWAY_API_ENABLED
              value: {{ $global.gateway.enabled | quote }}
            {{- if $global.gateway.enabled }}
            - name: GATEWAY_NAME
              value: {{ $global.gateway.name | quote }}
            {{- with $global.gateway.namespace }}
            - name: GATEWAY_NAMESPACE
              value: {{ . | quote }}
            {{- end }}
            {{- end }}
            - name: DEFAULT_LOG_LEVEL
              value: {{ $global.logLevel | quote }}
            - name: POD_SECURITY
              value: {{ $root.Values.podSecurity | default $global.podSecurity | default "restricted" | quote }}
            {{- if $global.telemetry.enabled }}
            - name: DEFAULT_TELEMETRY_ENABLED
              value: "true"
            - name: DEFAULT_TELEMETRY_ENDPOINT
              value: {{ $global.telemetry.endpoint | quote }}
            {{- end }}
            {{- $networkPolicy := $global.networkPolicy | default dict }}
            {{- if and (get . "workloads") $networkPolicy.enabled }}
            {{- include "kaos-lib.networkPolicyEnv" (dict "policy" $networkPolicy "root" $root) | nindent 12 }}
            {{- end }}
            {{- with .env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
            {{- /* Last, so an entry here overrides one above of the same name. */}}
            {{- with concat ($global.extraEnv | default list) ($root.Values.extraEnv | default list) }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: metrics
              containerPort: {{ $metricsPort }}
              protocol: TCP
            - name: health
              containerPort: 8081
              protocol: TCP
          livenessProbe:
            httpGet:
              path: /healthz
              port: health
            initialDelaySeconds: 5
            periodSeconds: 10
          readinessProbe:
            httpGet:
              path: /readyz
              port: health
            initialDelaySeconds: 2
            periodSeconds: 5
          resources:
            {{- toYaml $root.Values.resources | nindent 12 }}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            runAsNonRoot: true
            capabilities:
              drop: ["ALL"]
          {{- if and $secure $global.metrics.certSecret }}
          volumeMounts:
            - name: metrics-certs
              mountPath: {{ include "kaos-lib.metricsCertDir" $root }}
              readOnly: true
          {{- end }}
      {{- if and $secure $global.metrics.certSecret }}
      volumes:
        - name: metrics-certs
          secret:
            secretName: {{ $global.metrics.certSecret }}
      {{- end }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ $fullname }}-metrics
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "kaos-lib.labels" $root | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "kaos-lib.selector" $root | nindent 4 }}
  ports:
    - name: metrics
      port: {{ $metricsPort }}
      targetPort: metrics
      protocol: TCP
{{- if gt (int $root.Values.replicas) 1 }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ $fullname }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "kaos-lib.labels" $root | nindent 4 }}
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      {{- include "kaos-lib.selector" $root | nindent 6 }}
{{- end }}
{{- if $global.serviceMonitor.enabled }}
{{- $own := $root.Values.serviceMonitor | default dict }}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ $fullname }}
  namespace: {{ $root.Release.Namespace }}
  {{- include "kaos-lib.monitoringMetadata" (dict
        "labels" (include "kaos-lib.labels" $root | fromYaml)
        "extraLabels" (merge (dict) ($own.labels | default dict) ($global.serviceMonitor.labels | default dict))
        "annotations" (merge (dict) ($own.annotations | default dict) ($global.serviceMonitor.annotations | default dict))) | nindent 2 }}
spec:
  selector:
    matchLabels:
      {{- include "kaos-lib.selector" $root | nindent 6 }}
  endpoints:
    - port: metrics
      interval: {{ $global.serviceMonitor.interval }}
      # The agent controller's per-agent series carry the agent's `namespace`: kept, not renamed
      # `exported_namespace` (no controller series carries another target label).
      honorLabels: true
      {{- if $secure }}
      # Prometheus presents its ServiceAccount's token; bind it to <prefix>-metrics-reader.
      scheme: https
      bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
      tlsConfig:
        {{- with $global.serviceMonitor.ca }}
        serverName: {{ $fullname }}-metrics.{{ $root.Release.Namespace }}.svc
        ca:
          {{- toYaml . | nindent 10 }}
        {{- else }}
        insecureSkipVerify: true
        {{- end }}
      {{- end }}
{{- end }}
{{- if and (get . "resource") ($global.uninstall | default dict).releaseFinalizers }}
{{- include "kaos-lib.releaseFinalizers" . }}
{{- end }}
{{- end -}}

{{/*
The uninstall hook (global.uninstall.releaseFinalizers): before `helm uninstall` deletes anything,
a Job runs this controller's image as `<controller> release-finalizers` under its own
ServiceAccount: it scales the Deployment to 0, waits for the Lease, and removes the controller's
finalizer from every object of its kind, so no Agent, ModelAPI, MCPServer or AgentWorkflowRun is
left holding a finalizer that nothing will remove (deleting the kept CRDs or a namespace would hang). Its RBAC
exists only while the hook runs: the objects it stops (this Deployment and Lease, by name) and
list/patch of its kind. Called with the same dict as kaos-lib.controller.
*/}}
{{- define "kaos-lib.releaseFinalizers" -}}
{{- $root := .root -}}
{{- $global := $root.Values.global -}}
{{- $fullname := include "kaos-lib.fullname" $root -}}
{{- $name := printf "%s-uninstall" $fullname -}}
{{- $watch := $global.watchNamespaces | default list -}}
{{- $hook := dict "helm.sh/hook" "pre-delete" "helm.sh/hook-delete-policy" "before-hook-creation,hook-succeeded" -}}
{{- $rbac := merge (dict "helm.sh/hook-weight" "-10") $hook -}}
{{- /* Not the controller's name and component: its Deployment and Service must not select the
hook's pod. */}}
{{- $labels := merge (dict "app.kubernetes.io/name" (printf "%s-uninstall" $root.Values.controller.name) "app.kubernetes.io/component" "uninstall") (include "kaos-lib.labels" $root | fromYaml) }}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- toYaml $labels | nindent 4 }}
  annotations:
    {{- toYaml $rbac | nindent 4 }}
automountServiceAccountToken: true
{{- range $ns := ($watch | default (list "")) }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: {{ ternary "ClusterRole" "Role" (eq $ns "") }}
metadata:
  name: {{ $name }}
  {{- with $ns }}
  namespace: {{ . }}
  {{- end }}
  labels:
    {{- toYaml $labels | nindent 4 }}
  annotations:
    {{- toYaml $rbac | nindent 4 }}
rules:
  # Find every object of this controller's kind and remove its finalizer (a JSON patch).
  - apiGroups: ["kaos.tools"]
    resources: [{{ $.resource | quote }}]
    verbs: ["list", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: {{ ternary "ClusterRoleBinding" "RoleBinding" (eq $ns "") }}
metadata:
  name: {{ $name }}
  {{- with $ns }}
  namespace: {{ . }}
  {{- end }}
  labels:
    {{- toYaml $labels | nindent 4 }}
  annotations:
    {{- toYaml $rbac | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: {{ ternary "ClusterRole" "Role" (eq $ns "") }}
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ $name }}
    namespace: {{ $root.Release.Namespace }}
{{- end }}
---
# Stop the controller first: scale its Deployment to 0, then watch its Lease until it is free.
{{- $deployment := include "kaos-lib.deploymentName" $fullname }}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}-stop
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- toYaml $labels | nindent 4 }}
  annotations:
    {{- toYaml $rbac | nindent 4 }}
rules:
  - apiGroups: ["apps"]
    resources: ["deployments"]
    resourceNames: [{{ $deployment | quote }}]
    verbs: ["get", "patch"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    resourceNames: [{{ include "kaos-lib.lease" $root | quote }}]
    verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}-stop
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- toYaml $labels | nindent 4 }}
  annotations:
    {{- toYaml $rbac | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}-stop
subjects:
  - kind: ServiceAccount
    name: {{ $name }}
    namespace: {{ $root.Release.Namespace }}
---
apiVersion: batch/v1
kind: Job
metadata:
  {{- /* A Job's name becomes a label value of its pods: at most 63 characters. */}}
  name: {{ printf "%s-uninstall" ($fullname | trunc 53 | trimSuffix "-") }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- toYaml $labels | nindent 4 }}
  annotations:
    {{- toYaml (merge (dict "helm.sh/hook-weight" "0") $hook) | nindent 4 }}
spec:
  # The run is idempotent: one retry after a failure; bounded below helm's default 5m timeout.
  backoffLimit: 1
  activeDeadlineSeconds: 280
  template:
    metadata:
      labels:
        {{- toYaml $labels | nindent 8 }}
    spec:
      serviceAccountName: {{ $name }}
      restartPolicy: Never
      {{- with concat ($global.imagePullSecrets | default list) ($root.Values.imagePullSecrets | default list) }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.priorityClassName | default $global.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- with include "kaos-lib.mergedMap" (dict "root" $root "key" "nodeSelector") | fromYaml }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- range $key := list "affinity" "tolerations" }}
      {{- with index $root.Values $key | default (index $global $key) }}
      {{ $key }}:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- end }}
      securityContext:
        runAsNonRoot: true
        {{- with $global.runAsUser }}
        runAsUser: {{ int . }}
        {{- end }}
        {{- with $global.runAsGroup }}
        runAsGroup: {{ int . }}
        {{- end }}
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: release-finalizers
          image: {{ include "kaos-lib.image" $root }}
          imagePullPolicy: {{ $root.Values.controller.image.pullPolicy | default "IfNotPresent" }}
          args: ["release-finalizers", "--timeout=120s"]
          env:
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            # Not the default (the Lease name): the Deployment's own name.
            - name: CONTROLLER_DEPLOYMENT
              value: {{ $deployment | quote }}
            - name: LEADER_ELECTION_ID
              value: {{ include "kaos-lib.lease" $root | quote }}
            - name: LOG_FORMAT
              value: {{ $global.controllerLogFormat | quote }}
            {{- with $watch }}
            - name: WATCH_NAMESPACES
              value: {{ join "," . | quote }}
            {{- end }}
          resources:
            {{- toYaml $root.Values.resources | nindent 12 }}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            runAsNonRoot: true
            capabilities:
              drop: ["ALL"]
{{- end -}}
