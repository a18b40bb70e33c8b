{{/* Labels every object of the release carries. */}}
{{- define "meshctl.labels" -}}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: meshctl
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.global.multiCluster.clusterName }}
topology.istio.io/cluster: {{ . | quote }}
{{- end }}
{{- with .Values.global.network }}
topology.istio.io/network: {{ . | quote }}
{{- end }}
{{- end }}

{{/* The dataplane image, by tag: it is side-loaded, never pulled. */}}
{{- define "meshctl.image" -}}
image: {{ printf "%s:%s" .Values.image.repository .Values.image.tag | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- end }}

{{/* Pod template annotations: the image ID rolls the Pods when the binary
changes under an unchanged tag, and only then. */}}
{{- define "meshctl.podAnnotations" -}}
{{- with .Values.image.id }}
meshctl.dev/image-id: {{ . | quote }}
{{- end }}
{{- end }}

{{/* Arguments every dataplane command takes. */}}
{{- define "meshctl.logArgs" -}}
- --verbosity={{ if eq .Values.global.logging.level "debug" }}2{{ else }}0{{ end }}
{{- end }}

{{/* Namespaces never meshed: the configured ones and the release's own,
whose Pods are the dataplane itself. */}}
{{- define "meshctl.excludeNamespaces" -}}
{{- $ns := .Values.cni.excludeNamespaces | default list -}}
{{- join "," (append $ns .Release.Namespace | uniq) -}}
{{- end }}

{{/* The node proxy's service account: the one user the signer issues
workload certificates to. */}}
{{- define "meshctl.proxyServiceAccount" -}}meshctl-proxy{{- end }}

{{/* The east-west gateway's service account: its identity, which other
networks' proxies require of it. */}}
{{- define "meshctl.gatewayServiceAccount" -}}istio-eastwestgateway{{- end }}

{{/* Whether the chart deploys the east-west gateway (gateway.yaml). */}}
{{- define "meshctl.gatewayEnabled" -}}
{{- if and .Values.gateway.enabled .Values.global.network (gt (len .Values.global.meshNetworks) 1) }}true{{ end }}
{{- end }}

{{/* Downward API: the node and namespace every dataplane Pod needs. */}}
{{- define "meshctl.downwardEnv" -}}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- end }}
