{{/*
Names. The MutatingWebhookConfiguration is always "muster" and the leader-election Lease always
"muster-controller" (the controller uses these names), so one release per hub cluster.
*/}}
{{- define "muster.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "muster.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "muster.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "muster.selectorLabels" -}}
app.kubernetes.io/name: {{ include "muster.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "muster.labels" -}}
helm.sh/chart: {{ include "muster.chart" . }}
{{ include "muster.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: muster
{{- end }}

{{- define "muster.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "muster.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "muster.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "muster.webhookServiceName" -}}
{{- printf "%s-webhook" (include "muster.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "muster.metricsServiceName" -}}
{{- printf "%s-metrics" (include "muster.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Secret with the webhook's tls.crt, tls.key and ca.crt (made by the chart or cert-manager). */}}
{{- define "muster.webhookCertSecretName" -}}
{{- printf "%s-webhook-cert" (include "muster.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "muster.webhookCertificateName" -}}
{{- printf "%s-webhook" (include "muster.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The DNS names the API server uses to reach the webhook Service. */}}
{{- define "muster.webhookDNSNames" -}}
{{- $svc := include "muster.webhookServiceName" . }}
{{- $ns := .Release.Namespace }}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) | toJson }}
{{- end }}

{{/*
The job kinds muster manages, one entry per kind in the controller's order (JobKind::ALL):
the webhook's rules and the RBAC rules are made from this list. tests/chart.rs checks it
against the controller's own list.
*/}}
{{- define "muster.jobResources" -}}
- {group: kubeflow.org, version: v1, resource: pytorchjobs}
- {group: kubeflow.org, version: v1, resource: tfjobs}
- {group: kubeflow.org, version: v1, resource: xgboostjobs}
- {group: kubeflow.org, version: v1, resource: paddlejobs}
- {group: kubeflow.org, version: v1, resource: jaxjobs}
- {group: kubeflow.org, version: v2beta1, resource: mpijobs}
- {group: batch, version: v1, resource: jobs}
- {group: jobset.x-k8s.io, version: v1alpha2, resource: jobsets}
- {group: ray.io, version: v1, resource: rayjobs}
- {group: ray.io, version: v1, resource: rayclusters}
- {group: trainer.kubeflow.org, version: v1alpha1, resource: trainjobs}
{{- end }}

{{/*
The self-managed webhook certificate, made once per render and shared by every template that
needs it (the Secret, the webhook's caBundle, the pods' checksum), as a dict of base64 values
{ca.crt, tls.crt, tls.key}. An existing Secret of the release is reused (helm upgrade keeps the
CA); `helm template` cannot look it up and makes a new one each time.
*/}}
{{- define "muster.selfSignedCert" -}}
{{- if not (hasKey .Values "__musterWebhookCert") }}
{{- $secretName := include "muster.webhookCertSecretName" . }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace $secretName }}
{{- $data := dict }}
{{- if and $existing $existing.data (hasKey $existing.data "ca.crt") (hasKey $existing.data "tls.crt") (hasKey $existing.data "tls.key") (not .Values.webhook.selfSigned.regenerate) }}
{{- $data = dict "ca.crt" (index $existing.data "ca.crt") "tls.crt" (index $existing.data "tls.crt") "tls.key" (index $existing.data "tls.key") }}
{{- else }}
{{- $days := int .Values.webhook.selfSigned.validityDays }}
{{- $ca := genCA "muster webhook CA" $days }}
{{- $dns := include "muster.webhookDNSNames" . | fromJsonArray }}
{{- $cert := genSignedCert (index $dns 2) nil $dns $days $ca }}
{{- $data = dict "ca.crt" ($ca.Cert | b64enc) "tls.crt" ($cert.Cert | b64enc) "tls.key" ($cert.Key | b64enc) }}
{{- end }}
{{- $_ := set .Values "__musterWebhookCert" $data }}
{{- end }}
{{- toJson (get .Values "__musterWebhookCert") }}
{{- end }}
