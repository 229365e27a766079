//! The hub's admission of each job's pod templates, as intake asks it: every template is
//! sent to the hub as a server-side dry-run Pod create in the job's namespace (off the loop, a
//! few at a time), and the verdicts are kept per namespace, template and pod-security policy
//! (`hubcheck`, which also says when one is asked again). A job is queued only once every one of
//! its templates is allowed; a refusal is the reason it cannot run.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::reflector;
use serde_json::Value;

use super::clock::now_ms;
use super::ctx::{Core, Ctx, Inbox};
use super::hubcheck;
use crate::workload::Workload;

/// The hub's verdicts, and the checks under way.
#[derive(Default)]
pub(super) struct Judge {
    /// The hub's verdicts on pod templates (server-side dry runs).
    pub checks: hubcheck::HubChecks,
    /// Verdicts landed off the loop: (namespace, template digest, policy, outcome).
    verdicts: Inbox<(String, String, String, hubcheck::Outcome)>,
}

impl Judge {
    /// The job as read, once the hub's admission has judged each of its pod templates
    /// (`hubcheck`): unchanged when allowed, the hub's refusal as the reason it cannot run,
    /// `None` while a verdict is missing (the checks it needs are sent).
    pub(super) fn admission(
        &mut self,
        ctx: &Ctx,
        ns: &str,
        job: &Value,
        read: Result<Workload, String>,
    ) -> Option<Result<Workload, String>> {
        let w = match read {
            Ok(w) if ctx.opts.hub_pod_admission => w,
            other => return Some(other),
        };
        let templates = hubcheck::templates(job, &w);
        if templates.is_empty() {
            return Some(Ok(w));
        }
        let policy = namespace_policy(ctx, ns);
        let judged = self.checks.judge(ns, &policy, &templates, Instant::now());
        for t in judged.ask {
            self.ask(ctx, ns, &policy, t);
        }
        match judged.verdict {
            hubcheck::Verdict::Allowed => Some(Ok(w)),
            hubcheck::Verdict::Refused(why) => Some(Err(why)),
            hubcheck::Verdict::Pending => None,
        }
    }

    /// Sends one template to the hub as a dry-run Pod create, off the loop.
    fn ask(&self, ctx: &Ctx, ns: &str, policy: &str, t: hubcheck::Template) {
        let (hub, tx, wake, permits) = (
            ctx.hub.clone(),
            self.verdicts.sender(),
            ctx.wake.clone(),
            self.checks.permits.clone(),
        );
        let (namespace, policy) = (ns.to_string(), policy.to_string());
        tokio::spawn(async move {
            let _permit = permits.acquire_owned().await;
            let outcome = match serde_json::from_value::<Pod>(t.pod) {
                Ok(pod) => {
                    let api: Api<Pod> = Api::namespaced(hub, &namespace);
                    let pp = PostParams {
                        dry_run: true,
                        ..Default::default()
                    };
                    hubcheck::classify(api.create(&pp, &pod).await.map(|_| ()))
                }
                // The hub's own schema would refuse it the same way.
                Err(e) => hubcheck::Outcome::Refused(format!("not a valid pod template: {e}")),
            };
            if let hubcheck::Outcome::Unknown(why) = &outcome {
                tracing::info!(namespace = %namespace, field = %t.field, %why, "the hub did not judge a pod template; asked again");
            }
            let _ = tx.send((namespace, t.digest, policy, outcome));
            wake.notify_one();
        });
    }

    /// The verdicts that landed since the last pass. Returns the namespaces whose waiting jobs
    /// are to be judged again: a verdict changed an earlier one, or said nothing and must be
    /// asked again (a pass comes when it is due).
    pub(super) fn landed(&mut self, core: &mut Core) -> BTreeSet<String> {
        let mut again = BTreeSet::new();
        for (namespace, digest, policy, outcome) in self.verdicts.drain() {
            let unknown = matches!(outcome, hubcheck::Outcome::Unknown(_));
            if self
                .checks
                .landed(&namespace, &digest, &policy, outcome, Instant::now())
            {
                again.insert(namespace);
            }
            if unknown {
                core.wake_at(now_ms() + hubcheck::RETRY.as_millis() as u64);
            }
        }
        again
    }

    /// Namespaces whose pod-security labels changed since the last pass (their waiting jobs
    /// are to be judged again under the new labels).
    pub(super) fn policies_changed(&mut self, ctx: &Ctx) -> Vec<String> {
        let now: HashMap<String, String> = ctx
            .stores
            .namespaces
            .state()
            .iter()
            .map(|n| (n.name_any(), hubcheck::policy_key(n.labels())))
            .collect();
        let changed: Vec<String> = now
            .iter()
            // A namespace seen for the first time had no labels for the jobs judged before.
            .filter(|(ns, p)| {
                self.checks
                    .policies
                    .get(*ns)
                    .map_or(!p.is_empty(), |q| q != *p)
            })
            .map(|(ns, _)| ns.clone())
            .collect();
        self.checks.retain_namespaces(|ns| now.contains_key(ns));
        self.checks.policies = now;
        changed
    }
}

/// What a verdict in namespace `ns` depends on: its pod-security labels.
fn namespace_policy(ctx: &Ctx, ns: &str) -> String {
    ctx.stores
        .namespaces
        .get(&reflector::ObjectRef::new(ns))
        .map(|n| hubcheck::policy_key(n.labels()))
        .unwrap_or_default()
}
