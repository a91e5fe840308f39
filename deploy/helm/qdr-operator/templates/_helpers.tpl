{{/* Labels of every object: those of deploy/ for component $name, plus Helm's. */}}
{{- define "qdr-operator.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: qdr-operator
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end }}

{{/* Whether the webhook manages its own certificate (and so needs API access). */}}
{{- define "qdr-operator.selfManaged" -}}
{{- if eq .Values.webhook.tls.mode "self-managed" }}true{{ else if eq .Values.webhook.tls.mode "cert-manager" }}{{ else }}{{ fail (printf "webhook.tls.mode must be self-managed or cert-manager, not %q" .Values.webhook.tls.mode) }}{{ end }}
{{- end }}

{{/* Whether the webhook talks to the API server: its own certificate, or SubjectAccessReviews. */}}
{{- define "qdr-operator.webhookApiAccess" -}}
{{- if or (include "qdr-operator.selfManaged" .) .Values.webhook.authorizeSecretReferences }}true{{ end }}
{{- end }}

{{/* The webhook's arguments after --tls-mode: checks that differ from the defaults, and the log format. */}}
{{- define "qdr-operator.webhookArgs" -}}
{{- if not .Values.webhook.authorizeSecretReferences }}, --authorize-secret-references=false{{ end }}
{{- with .Values.webhook.allowedRouterImages }}, {{ printf "--allowed-router-images=%s" (join "," .) | quote }}{{ end }}
{{- printf ", --log-format=%s" .Values.logFormat }}
{{- end }}

{{/* image: repository@digest when a digest is set, else repository:tag */}}
{{- define "qdr-operator.image" -}}
image: {{ if .digest }}{{ printf "%s@%s" .repository .digest }}{{ else }}{{ printf "%s:%s" .repository (toString .tag) }}{{ end }}
{{- with .pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{/*
The controller's permissions where it reconciles: a ClusterRole when it watches every
namespace, a Role in each watched namespace otherwise. Exactly what it uses (see
deploy/base/rbac.yaml for the reason of each rule; controller/tests/rbac.rs proves it).
*/}}
{{- define "qdr-operator.controllerRules" -}}
- apiGroups: [interconnectedcloud.github.io]
  resources: [interconnects]
  verbs: [get, list, watch]
- apiGroups: [interconnectedcloud.github.io]
  resources: [interconnects/status]
  verbs: [patch]
- apiGroups: [interconnectedcloud.github.io]
  resources: [accessgrants, links]
  verbs: [list, watch]
- apiGroups: [interconnectedcloud.github.io]
  resources: [accessgrants/status, links/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [services, serviceaccounts]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, patch, delete]
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
- apiGroups: [apps]
  resources: [deployments, daemonsets]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [apps]
  resources: [replicasets]
  verbs: [list, watch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [networking.k8s.io]
  resources: [ingresses, networkpolicies]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [route.openshift.io]
  resources: [routes]
  verbs: [get, list, create, patch, delete]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end }}

{{/* cert-manager mode: the CA injector annotation of the webhook configurations. */}}
{{- define "qdr-operator.webhookAnnotations" -}}
{{- if not (include "qdr-operator.selfManaged" .) }}
annotations:
  # cert-manager's CA injector keeps the caBundle right.
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/qdr-webhook
{{- end }}
{{- end }}
