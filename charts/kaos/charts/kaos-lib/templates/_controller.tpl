{{/*
Everything one controller needs, from its chart's values:
  .Values.controller: name (e.g. agent-controller), lease (Lease name), image.repository
  .Values.rbac.rules: the rules this controller uses (cluster-wide or per watched namespace)
  .Values.rbac.systemRules: rules in the release namespace only (e.g. the MCP runtime registry)
and .Values.global for the settings every controller shares. Called with
(dict "root" $ "env" <list of {name, value}>): the environment only this controller reads.
*/}}

{{- define "kaos-lib.fullname" -}}
{{- printf "kaos-%s" .Values.controller.name | trunc 63 | trimSuffix "-" -}}
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

{{- define "kaos-lib.image" -}}
{{- $registry := .Values.global.imageRegistry | default "" -}}
{{- $tag := .Values.controller.image.tag | default .Values.global.imageTag | default .Chart.AppVersion -}}
{{- if $registry -}}
{{ printf "%s/%s:%s" $registry .Values.controller.image.repository $tag }}
{{- else -}}
{{ printf "%s:%s" .Values.controller.image.repository $tag }}
{{- end -}}
{{- end -}}

{{- define "kaos-lib.controller" -}}
{{- $root := .root -}}
{{- $fullname := include "kaos-lib.fullname" $root -}}
{{- $watch := $root.Values.global.watchNamespaces | default list -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ $fullname }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "kaos-lib.labels" $root | nindent 4 }}
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
{{- else }}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $fullname }}
  labels:
    {{- include "kaos-lib.labels" $root | nindent 4 }}
rules:
  {{- toYaml $root.Values.rbac.rules | nindent 2 }}
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
    resourceNames: [{{ $root.Values.controller.lease | quote }}]
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
  name: {{ $fullname }}
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
        {{- include "kaos-lib.labels" $root | nindent 8 }}
    spec:
      serviceAccountName: {{ $fullname }}
      {{- with $root.Values.global.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: controller
          image: {{ include "kaos-lib.image" $root }}
          imagePullPolicy: {{ $root.Values.controller.image.pullPolicy | default "IfNotPresent" }}
          args:
            - --metrics-bind-address=:8080
            - --health-probe-bind-address=:8081
            - --leader-elect={{ $root.Values.leaderElection.enabled }}
          env:
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            - name: LEASE_DURATION
              value: {{ $root.Values.global.leaderElection.leaseDuration | quote }}
            - name: RENEW_DEADLINE
              value: {{ $root.Values.global.leaderElection.renewDeadline | quote }}
            - name: RETRY_PERIOD
              value: {{ $root.Values.global.leaderElection.retryPeriod | quote }}
            - name: RECONCILE_DEBOUNCE
              value: {{ $root.Values.global.reconcileDebounce | default "200ms" | quote }}
            - name: LOG_FORMAT
              value: {{ $root.Values.global.controllerLogFormat | quote }}
            {{- with $watch }}
            - name: WATCH_NAMESPACES
              value: {{ join "," . | quote }}
            {{- end }}
            - name: GATEWAY_API_ENABLED
              value: {{ $root.Values.global.gateway.enabled | quote }}
            {{- if $root.Values.global.gateway.enabled }}
            - name: GATEWAY_NAME
              value: {{ $root.Values.global.gateway.name | quote }}
            {{- with $root.Values.global.gateway.namespace }}
            - name: GATEWAY_NAMESPACE
              value: {{ . | quote }}
            {{- end }}
            {{- end }}
            - name: DEFAULT_LOG_LEVEL
              value: {{ $root.Values.global.logLevel | quote }}
            {{- if $root.Values.global.telemetry.enabled }}
            - name: DEFAULT_TELEMETRY_ENABLED
              value: "true"
            - name: DEFAULT_TELEMETRY_ENDPOINT
              value: {{ $root.Values.global.telemetry.endpoint | quote }}
            {{- end }}
            {{- with .env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: metrics
              containerPort: 8080
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
      port: 8080
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
{{- if $root.Values.global.serviceMonitor.enabled }}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ $fullname }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "kaos-lib.labels" $root | nindent 4 }}
spec:
  selector:
    matchLabels:
      {{- include "kaos-lib.selector" $root | nindent 6 }}
  endpoints:
    - port: metrics
      interval: {{ $root.Values.global.serviceMonitor.interval }}
{{- end }}
{{- end -}}
