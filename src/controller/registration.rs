//! The MutatingWebhookConfiguration `muster`: a rule per supported job kind, where the API
//! server reaches the webhook, the CA that verifies it, the failure policy, and a namespace
//! selector that lists exactly the namespaces the quota tree in force covers, so that a muster
//! outage with `failurePolicy: Fail` blocks job submissions there and nowhere else. Every
//! replica registers it when it starts; afterwards the leader alone keeps it true, writing only
//! when the covered namespaces or the CA change (and reading it back now and then, in case
//! someone else rewrote the selector). Owns that object's content and its writes.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::intake::Covered;
use super::kinds;
use super::tls::CertReloader;
use crate::workload::JobKind;

/// The configuration's name (the chart creates it under this name).
pub const NAME: &str = "muster";
/// The one webhook in it.
pub const WEBHOOK: &str = "suspend.muster.dev";
/// The label the API server puts on every namespace, its name as value.
const NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// How often the leader reads the configuration back to see whether its selector still holds.
const RECHECK: Duration = Duration::from_secs(30);
/// How long the leader waits after a failed write before trying again.
const RETRY: Duration = Duration::from_secs(30);

/// Where the API server reaches the webhook.
#[derive(Clone, Debug)]
pub enum Endpoint {
    Url(String),
    Service {
        namespace: String,
        name: String,
        port: i32,
    },
}

/// The namespace selector for the namespaces `covered`, less `exclude` (never intercepted) and
/// less any name that cannot be a namespace's (the API server would refuse it in the selector):
/// `kubernetes.io/metadata.name In [...]`, sorted. Nothing left: a selector that matches no
/// namespace (`In` needs a value), `kubernetes.io/metadata.name DoesNotExist`: the API server
/// gives every namespace that label, so no namespace lacks it and nothing is intercepted.
pub fn namespace_selector(covered: &BTreeSet<String>, exclude: &[String]) -> Value {
    let names: Vec<&String> = covered
        .iter()
        .filter(|n| !exclude.contains(n) && crate::labels::is_label_name(n))
        .collect();
    if names.is_empty() {
        json!({"matchExpressions": [{"key": NAME_LABEL, "operator": "DoesNotExist"}]})
    } else {
        json!({"matchExpressions": [{"key": NAME_LABEL, "operator": "In", "values": names}]})
    }
}

/// The whole configuration muster applies: every supported kind on CREATE and UPDATE, sent to
/// `endpoint`, verified with `ca_pem`, with `failure_policy` (`Fail`: no job is created
/// unsuspended while muster is down, submissions fail instead; `Ignore`: jobs are admitted as
/// written and the controller suspends them when it is back) and `selector`.
pub fn configuration(
    endpoint: &Endpoint,
    ca_pem: &str,
    failure_policy: &str,
    selector: &Value,
) -> Value {
    use base64::Engine;
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem.as_bytes());
    let rules: Vec<Value> = JobKind::ALL
        .iter()
        .map(|&k| {
            let ar = kinds::api_resource(k);
            json!({
                "apiGroups": [ar.group], "apiVersions": [ar.version], "resources": [ar.plural],
                "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"
            })
        })
        .collect();
    let client_config = match endpoint {
        Endpoint::Url(u) => json!({"url": u, "caBundle": ca_bundle}),
        Endpoint::Service {
            namespace,
            name,
            port,
        } => json!({
            "service": {"namespace": namespace, "name": name, "path": "/mutate", "port": port},
            "caBundle": ca_bundle
        }),
    };
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/name": "muster"}},
        "webhooks": [{
            "name": WEBHOOK,
            "admissionReviewVersions": ["v1"],
            "clientConfig": client_config,
            "rules": rules,
            "failurePolicy": failure_policy,
            "sideEffects": "None",
            "timeoutSeconds": 5,
            "reinvocationPolicy": "IfNeeded",
            "namespaceSelector": selector,
        }]
    })
}

/// Whether the live configuration's webhook has `selector` as its namespace selector (a
/// missing configuration or webhook does not).
pub fn selector_holds(live: Option<&MutatingWebhookConfiguration>, selector: &Value) -> bool {
    let Ok(want) = serde_json::from_value::<LabelSelector>(selector.clone()) else {
        return false;
    };
    live.and_then(|m| m.webhooks.as_ref())
        .and_then(|w| w.iter().find(|w| w.name == WEBHOOK))
        .is_some_and(|w| w.namespace_selector.as_ref() == Some(&want))
}

/// The namespaces a selector made by `namespace_selector` lists, for the log (`[]`: none).
fn listed(selector: &Value) -> String {
    match &selector["matchExpressions"][0]["values"] {
        Value::Null => "[]".to_string(),
        v => v.to_string(),
    }
}

/// The registration this replica makes and, once it leads, keeps true.
pub struct Registration {
    client: Client,
    endpoint: Endpoint,
    failure_policy: String,
    /// Namespaces never intercepted (kube-system, the controller's own).
    exclude: Vec<String>,
    certs: Arc<CertReloader>,
    /// What was last written: the namespace selector and the CA.
    written: Option<(Value, String)>,
}

impl Registration {
    pub fn new(
        client: Client,
        endpoint: Endpoint,
        failure_policy: &str,
        exclude: Vec<String>,
        certs: Arc<CertReloader>,
    ) -> Registration {
        Registration {
            client,
            endpoint,
            failure_policy: failure_policy.to_string(),
            exclude,
            certs,
            written: None,
        }
    }

    /// The selector and CA to register now (nothing covered yet: nothing intercepted).
    fn wanted(&self, covered: &Covered) -> (Value, String) {
        let now = covered
            .read()
            .map(|c| c.clone().unwrap_or_default())
            .unwrap_or_default();
        (namespace_selector(&now, &self.exclude), self.certs.ca_pem())
    }

    async fn write(&mut self, want: (Value, String)) -> kube::Result<()> {
        let mwc = configuration(&self.endpoint, &want.1, &self.failure_policy, &want.0);
        let api: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        api.patch(
            NAME,
            &PatchParams::apply(super::crd::MANAGER).force(),
            &Patch::Apply(&mwc),
        )
        .await?;
        self.written = Some(want);
        Ok(())
    }

    /// Registers once this replica knows what the tree covers (returns at `shutdown` if it
    /// never does). An error is the API server's (no right to write it, invalid content).
    pub async fn register(
        &mut self,
        covered: &Covered,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<()> {
        while covered.read().map(|c| c.is_none()).unwrap_or(true) {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = shutdown.cancelled() => return Ok(()),
            }
        }
        let want = self.wanted(covered);
        let selector = want.0.clone();
        self.write(want).await?;
        tracing::info!(endpoint = ?self.endpoint, policy = %self.failure_policy,
            namespaces = %listed(&selector), "webhook registered");
        Ok(())
    }

    /// The leader's part, until `shutdown`: when the covered namespaces or the CA changed, and
    /// every `RECHECK` in any case, reads the configuration and writes it again if it is not what
    /// this replica would write (a tree edit, a rotated CA, a `helm upgrade` that reset the
    /// selector, a replica that started with another view of an invalid tree). A configuration
    /// that is gone is not recreated (someone removed it on purpose, and the chart's RBAC does
    /// not allow creating it): a replica registers it again when it starts.
    pub async fn keep(mut self, covered: Covered, shutdown: CancellationToken) {
        let api: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        let mut checked = Instant::now();
        let mut failed: Option<Instant> = None;
        let mut gone = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = shutdown.cancelled() => return,
            }
            if failed.is_some_and(|t| t.elapsed() < RETRY) {
                continue;
            }
            let want = self.wanted(&covered);
            let changed = self.written.as_ref() != Some(&want);
            if !changed && checked.elapsed() < RECHECK {
                continue;
            }
            checked = Instant::now();
            let live = match api.get_opt(NAME).await {
                Ok(Some(live)) => live,
                Ok(None) => {
                    if !gone {
                        tracing::info!("the webhook configuration {NAME} is gone; not recreated");
                    }
                    gone = true;
                    self.written = Some(want);
                    continue;
                }
                Err(e) => {
                    failed = Some(Instant::now());
                    tracing::warn!(error = %e, "cannot read the webhook configuration");
                    continue;
                }
            };
            gone = false;
            let why = if changed {
                "the covered namespaces or the CA changed"
            } else if !selector_holds(Some(&live), &want.0) {
                "its namespace selector is not the tree's"
            } else {
                continue;
            };
            let selector = want.0.clone();
            match self.write(want).await {
                Ok(()) => {
                    failed = None;
                    tracing::info!(why, namespaces = %listed(&selector),
                        "webhook configuration updated");
                }
                Err(e) => {
                    failed = Some(Instant::now());
                    tracing::warn!(error = %e, why, "cannot update the webhook configuration");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    /// Whether the API server would send a request in namespace `ns` to the webhook: the
    /// selector checked as Kubernetes validates and evaluates it, against the label every
    /// namespace carries.
    fn intercepts(selector: &Value, ns: &str) -> bool {
        let k8s: LabelSelector = serde_json::from_value(selector.clone()).expect("a LabelSelector");
        let sel = crate::labels::LabelSelector::from_k8s(&k8s).expect("valid for the API server");
        sel.matches(&BTreeMap::from([(NAME_LABEL.to_string(), ns.to_string())]))
    }

    #[test]
    fn only_the_covered_namespaces_are_intercepted() {
        let exclude = vec!["kube-system".to_string(), "muster-system".to_string()];
        let sel = namespace_selector(&set(&["team-b", "team-a", "kube-system"]), &exclude);
        assert_eq!(
            sel,
            json!({"matchExpressions": [{"key": NAME_LABEL, "operator": "In",
                                         "values": ["team-a", "team-b"]}]})
        );
        assert!(intercepts(&sel, "team-a") && intercepts(&sel, "team-b"));
        for other in ["default", "kube-system", "muster-system", "team-c"] {
            assert!(!intercepts(&sel, other), "{other}");
        }
    }

    #[test]
    fn nothing_covered_intercepts_nothing() {
        let exclude = vec!["kube-system".to_string()];
        for covered in [set(&[]), set(&["kube-system"]), set(&["Not A Namespace"])] {
            let sel = namespace_selector(&covered, &exclude);
            assert_eq!(
                sel,
                json!({"matchExpressions": [{"key": NAME_LABEL, "operator": "DoesNotExist"}]}),
                "{covered:?}"
            );
            for ns in ["default", "kube-system", "team-a"] {
                assert!(!intercepts(&sel, ns), "{covered:?} {ns}");
            }
        }
        // A name that cannot be a namespace's is left out, the rest stays.
        let sel = namespace_selector(&set(&["team-a", "Not A Namespace"]), &exclude);
        assert!(intercepts(&sel, "team-a"));
        assert_eq!(sel["matchExpressions"][0]["values"], json!(["team-a"]));
    }

    #[test]
    fn the_configuration_carries_the_selector_rules_and_endpoint() {
        let sel = namespace_selector(&set(&["team-a"]), &[]);
        let ep = Endpoint::Service {
            namespace: "muster-system".into(),
            name: "muster-webhook".into(),
            port: 443,
        };
        let mwc = configuration(&ep, "CA", "Fail", &sel);
        let w = &mwc["webhooks"][0];
        assert_eq!(w["name"], WEBHOOK);
        assert_eq!(w["namespaceSelector"], sel);
        assert_eq!(w["failurePolicy"], "Fail");
        assert_eq!(w["clientConfig"]["caBundle"], "Q0E=");
        assert_eq!(w["clientConfig"]["service"]["name"], "muster-webhook");
        assert_eq!(
            w["rules"].as_array().map(Vec::len),
            Some(JobKind::ALL.len())
        );
        let url = configuration(
            &Endpoint::Url("https://h/mutate".into()),
            "CA",
            "Ignore",
            &sel,
        );
        assert_eq!(
            url["webhooks"][0]["clientConfig"]["url"],
            "https://h/mutate"
        );
        // It is a MutatingWebhookConfiguration, and the selector read back from one holds.
        let typed: MutatingWebhookConfiguration =
            serde_json::from_value(mwc).expect("a MutatingWebhookConfiguration");
        assert!(selector_holds(Some(&typed), &sel));
        assert!(!selector_holds(
            Some(&typed),
            &namespace_selector(&set(&["team-b"]), &[])
        ));
        assert!(!selector_holds(None, &sel));
    }
}
