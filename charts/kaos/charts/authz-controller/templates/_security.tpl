{{/* KAOS's security plane (global.security), as the authz controller reads it. */}}

{{/* The ext_authz backend: agentAuth.extAuthzUrl, else the chart's PDP when enabled, else empty
(gateway authorization off), as KAOS's chart sets SECURITY_AGENT_AUTH_EXT_AUTHZ_URL. */}}
{{- define "authz.extAuthzUrl" -}}
{{- $security := .Values.global.security -}}
{{- if $security.agentAuth.extAuthzUrl -}}
{{- $security.agentAuth.extAuthzUrl -}}
{{- else if $security.pdp.enabled -}}
{{- printf "kaos-pdp.%s.svc:9191" .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* "true" when the controller writes the policy ConfigMap: it is named (name and namespace),
and either the data is automated or the controller owns the policy.rego key (policyRegoOverride). */}}
{{- define "authz.writesPolicy" -}}
{{- $security := .Values.global.security -}}
{{- $target := $security.agentAuth.projection.policyConfigMap -}}
{{- $authorization := $security.agentAuth.authorization -}}
{{- if and $target.name $target.namespace (or (ne $authorization.policyDataSource "manual") $authorization.policyRegoOverride) -}}
true
{{- end -}}
{{- end -}}

{{/* The controller's security settings: only what is set, so a default install renders none
(names as KAOS's operator ConfigMap). */}}
{{- define "authz.securityEnv" -}}
{{- $security := .Values.global.security -}}
{{- $agentAuth := $security.agentAuth -}}
{{- $env := list -}}
{{- $url := include "authz.extAuthzUrl" . -}}
{{- if $url -}}
{{- $env = append $env (dict "name" "SECURITY_AGENT_AUTH_EXT_AUTHZ_URL" "value" $url) -}}
{{- $env = append $env (dict "name" "SECURITY_AGENT_AUTH_IDENTITY_PROVIDER" "value" $agentAuth.identity.provider) -}}
{{- end -}}
{{- if $security.pdp.enabled -}}
{{- $env = append $env (dict "name" "SECURITY_PDP_ENABLED" "value" "true") -}}
{{- end -}}
{{- if and $agentAuth.issuer (ne $agentAuth.identity.provider "serviceaccount") -}}
{{- $env = append $env (dict "name" "SECURITY_AGENT_AUTH_ISSUER" "value" $agentAuth.issuer) -}}
{{- end -}}
{{- if and $agentAuth.credentialSecretPrefix (eq $agentAuth.identity.provider "aib") -}}
{{- $env = append $env (dict "name" "SECURITY_AGENT_AUTH_CREDENTIAL_SECRET_PREFIX" "value" $agentAuth.credentialSecretPrefix) -}}
{{- end -}}
{{- with $agentAuth.authorization.policyDataSource -}}
{{- $env = append $env (dict "name" "SECURITY_AUTHORIZATION_POLICY_DATA_SOURCE" "value" .) -}}
{{- end -}}
{{- if $agentAuth.authorization.policyRegoOverride -}}
{{- $env = append $env (dict "name" "SECURITY_AUTHORIZATION_POLICY_REGO_OVERRIDE" "value" "true") -}}
{{- end -}}
{{- with $agentAuth.projection.policyConfigMap -}}
{{- if .name -}}
{{- $env = append $env (dict "name" "AUTHZ_POLICY_CONFIGMAP_NAME" "value" .name) -}}
{{- end -}}
{{- if .namespace -}}
{{- $env = append $env (dict "name" "AUTHZ_POLICY_CONFIGMAP_NAMESPACE" "value" .namespace) -}}
{{- end -}}
{{- end -}}
{{- with $security.userAuth -}}
{{- if .issuer -}}
{{- $env = append $env (dict "name" "SECURITY_USER_AUTH_ISSUER" "value" .issuer) -}}
{{- end -}}
{{- if .audience -}}
{{- $env = append $env (dict "name" "SECURITY_USER_AUTH_AUDIENCE" "value" .audience) -}}
{{- end -}}
{{- if .jwksUri -}}
{{- $env = append $env (dict "name" "SECURITY_USER_AUTH_JWKS_URI" "value" .jwksUri) -}}
{{- end -}}
{{- end -}}
{{- toYaml $env -}}
{{- end -}}

{{/* The PDP's labels and selector. */}}
{{- define "authz.pdpSelector" -}}
app.kubernetes.io/name: kaos-pdp
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "authz.pdpLabels" -}}
{{ include "authz.pdpSelector" . }}
app.kubernetes.io/component: pdp
app.kubernetes.io/part-of: kaos
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}
