{{/* The controller charts, in install order: NOTES.txt and the PrometheusRule range over them
(`splitList " " (include "kaos.controllers" .)`). */}}
{{- define "kaos.controllers" -}}
agent-controller modelapi-controller mcpserver-controller memorystore-controller authz-controller workflow-controller
{{- end -}}
