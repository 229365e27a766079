//! The hub's admission for the pods that run on members. A job's pods are created on a member
//! from a copy of its spec, so the hub's Pod Security admission, ValidatingAdmissionPolicies and
//! policy webhooks never see them. So before a job is followed (queued), every distinct pod
//! template of it is sent to the hub as a server-side dry-run Pod create in the job's own
//! namespace (`dryRun=All`: every admission step runs, nothing is stored). A template the hub
//! refuses makes the job Rejected with the hub's words and the template's field path; it is
//! never dispatched.
//!
//! Owns the pod built from a template ([`templates`]), what an answer means ([`classify`]), and
//! the verdicts ([`HubChecks`]): kept per namespace and template digest together with the
//! namespace's pod-security labels, checked again when those labels change or the verdict is
//! older than [`RECHECK`] ([`REFUSED_RECHECK`] for a refusal), one check in flight per key, at
//! most [`IN_FLIGHT`] at once. Also what
//! a member namespace muster creates must carry ([`psa_labels`]).
//!
//! Not replayed: mutating webhooks (a dry run shows what they would change; the copy is not
//! changed by it), anything that depends on the member (its own admission still runs there),
//! and the values of the uid and name labels the hub generates on a batch Job's template: a
//! verdict is kept per template without them ([`key_of`]), judged on the first Job that asked.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::lifecycle::{REFUSED_BY_HUB, digest_text};
use crate::workload::Workload;

/// Labels of a namespace that Pod Security admission reads.
pub const PSA_PREFIX: &str = "pod-security.kubernetes.io/";
/// A verdict older than this is checked again (policies other than the namespace's labels,
/// such as a new ValidatingAdmissionPolicy, cannot be watched for one namespace).
pub const RECHECK: Duration = Duration::from_secs(600);
/// A refusal is asked again this much later, while a job it rejected waits: what the hub
/// refused for (a PriorityClass not created yet, a policy) is often fixed within minutes.
pub const REFUSED_RECHECK: Duration = Duration::from_secs(30);
/// After an answer that says nothing about the template (the API server unreachable, a
/// namespace or service account not made yet), the check is tried again this much later.
pub const RETRY: Duration = Duration::from_secs(5);
/// Dry runs in flight at once.
pub const IN_FLIGHT: usize = 8;

/// One distinct pod template of a job, as the hub is asked about it.
#[derive(Clone, Debug)]
pub struct Template {
    /// Its components (several when they share one template).
    pub components: Vec<String>,
    /// Where it is in the job, as a field path: `spec.pytorchReplicaSpecs.Worker.template`.
    pub field: String,
    /// The Pod sent to the hub in dry-run.
    pub pod: Value,
    pub digest: String,
}

/// The pod-security labels of a namespace's labels.
pub fn psa_labels(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(k, _)| k.starts_with(PSA_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// What a verdict depends on besides the template: the namespace's pod-security labels.
pub fn policy_key(labels: &BTreeMap<String, String>) -> String {
    psa_labels(labels)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The dotted field path of a JSON pointer (`/spec/a~1b/template` → `spec.a/b.template`).
fn field_of(pointer: &str) -> String {
    pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect::<Vec<_>>()
        .join(".")
}

/// The distinct pod templates of a job written in `job` (components whose template muster
/// defaulted, such as a TrainJob's from its runtime, have none here), each as the Pod the hub
/// is asked about: the template's labels, annotations and spec, in the job's namespace.
pub fn templates(job: &Value, w: &Workload) -> Vec<Template> {
    let mut out: Vec<Template> = Vec::new();
    // A batch Job's template carries labels the hub's API server generated for this one job
    // (its uid and name); its member copy drops them and the member generates its own.
    let generated = super::dispatch::carries_generated_labels(w.kind, job);
    for c in &w.components {
        let Some(tp) = &c.template_pointer else {
            continue;
        };
        let Some(t) = job.pointer(tp) else { continue };
        let mut meta = json!({"generateName": "muster-dry-run-", "namespace": w.namespace});
        for k in ["labels", "annotations"] {
            if let Some(v) = t
                .pointer(&format!("/metadata/{k}"))
                .filter(|v| v.is_object())
            {
                meta[k] = v.clone();
            }
        }
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": t.get("spec").cloned().unwrap_or_else(|| json!({})),
        });
        let digest = digest_text(&key_of(&pod, generated).to_string());
        match out.iter_mut().find(|o| o.digest == digest) {
            Some(o) => o.components.push(c.name.clone()),
            None => out.push(Template {
                components: vec![c.name.clone()],
                field: field_of(tp),
                pod,
                digest,
            }),
        }
    }
    out
}

/// What a verdict on `pod` is kept under: the pod, less the labels the hub's API server
/// generated for one batch Job (`generated`). Their values are the hub job's own (its uid and
/// name): with them in the key, every Job of one template would be its own question, asked and
/// waited for one by one. So one verdict serves every Job of a template as the user wrote it;
/// a policy that reads those labels' values is judged on the first Job that asked.
fn key_of(pod: &Value, generated: bool) -> std::borrow::Cow<'_, Value> {
    if !generated {
        return std::borrow::Cow::Borrowed(pod);
    }
    let mut key = pod.clone();
    if let Some(l) = key
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        super::dispatch::drop_generated_labels(l);
    }
    std::borrow::Cow::Owned(key)
}

/// What one answer of the hub says of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Allowed,
    /// The hub's words.
    Refused(String),
    /// Nothing about the template (why, for the log): asked again after [`RETRY`].
    Unknown(String),
}

/// The meaning of the hub's answer to a dry-run create. A refusal is an answer about the
/// request (400, 403, 422) except where it names something that is made shortly after a
/// namespace (its default ServiceAccount) or the namespace itself: those are asked again.
pub fn classify(result: Result<(), kube::Error>) -> Outcome {
    match result {
        Ok(()) => Outcome::Allowed,
        Err(kube::Error::Api(e)) => {
            let m = e.message.to_lowercase();
            let not_yet = (m.contains("serviceaccount") || m.contains("service account"))
                && m.contains("not found");
            if matches!(e.code, 400 | 403 | 422) && !not_yet {
                Outcome::Refused(e.message)
            } else {
                Outcome::Unknown(format!("{} {}", e.code, e.message))
            }
        }
        Err(e) => Outcome::Unknown(e.to_string()),
    }
}

/// The verdict on a job's templates.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// The Rejected reason: the first refused template's field path and the hub's words.
    Refused(String),
    /// Some template has no verdict yet.
    Pending,
}

/// A verdict and the templates to ask the hub about now (each once while in flight).
#[derive(Debug)]
pub struct Judgement {
    pub verdict: Verdict,
    pub ask: Vec<Template>,
}

struct Entry {
    policy: String,
    outcome: Outcome,
    at: Instant,
}

/// The verdicts, and the checks in flight.
pub struct HubChecks {
    entries: HashMap<(String, String), Entry>,
    in_flight: HashSet<(String, String)>,
    pub permits: Arc<Semaphore>,
    /// Each namespace's [`policy_key`] at the last pass.
    pub policies: HashMap<String, String>,
}

impl Default for HubChecks {
    fn default() -> Self {
        HubChecks {
            entries: HashMap::new(),
            in_flight: HashSet::new(),
            permits: Arc::new(Semaphore::new(IN_FLIGHT)),
            policies: HashMap::new(),
        }
    }
}

impl HubChecks {
    /// The verdict on a job's templates in `namespace` under `policy` ([`policy_key`]) at
    /// `now`: refused when one template is, else pending while one has no verdict for this
    /// policy, else allowed. Templates with no verdict (or whose last answer said nothing and
    /// is due again) are returned to be asked; so is a verdict older than [`RECHECK`], which
    /// still stands while it is asked again.
    pub fn judge(
        &mut self,
        namespace: &str,
        policy: &str,
        templates: &[Template],
        now: Instant,
    ) -> Judgement {
        let mut ask = Vec::new();
        let mut refused = None;
        let mut pending = false;
        for t in templates {
            let key = (namespace.to_string(), t.digest.clone());
            let due = match self.entries.get(&key).filter(|e| e.policy == policy) {
                None => {
                    pending = true;
                    true
                }
                Some(e) => {
                    let age = now.saturating_duration_since(e.at);
                    match &e.outcome {
                        Outcome::Unknown(_) => {
                            pending = true;
                            age >= RETRY
                        }
                        Outcome::Allowed => age >= RECHECK,
                        Outcome::Refused(msg) => {
                            refused.get_or_insert_with(|| refusal(t, msg));
                            age >= REFUSED_RECHECK
                        }
                    }
                }
            };
            if due && self.in_flight.insert(key) {
                ask.push(t.clone());
            }
        }
        let verdict = match (refused, pending) {
            (Some(r), _) => Verdict::Refused(r),
            (None, true) => Verdict::Pending,
            (None, false) => Verdict::Allowed,
        };
        Judgement { verdict, ask }
    }

    /// An answer landed. True when it changes an earlier verdict on that key (jobs of the
    /// namespace are then read again).
    pub fn landed(
        &mut self,
        namespace: &str,
        digest: &str,
        policy: &str,
        outcome: Outcome,
        now: Instant,
    ) -> bool {
        let key = (namespace.to_string(), digest.to_string());
        self.in_flight.remove(&key);
        let known = self
            .entries
            .get_mut(&key)
            .filter(|e| e.policy == policy && !matches!(e.outcome, Outcome::Unknown(_)));
        match (known, outcome) {
            // An answer that says nothing keeps the verdict known for this policy; it is due
            // again after RETRY.
            (Some(e), Outcome::Unknown(_)) => {
                let every = match e.outcome {
                    Outcome::Refused(_) => REFUSED_RECHECK,
                    _ => RECHECK,
                };
                e.at = now.checked_sub(every - RETRY).unwrap_or(now);
                false
            }
            (Some(e), outcome) => {
                let changed = e.outcome != outcome;
                e.outcome = outcome;
                e.at = now;
                changed
            }
            (None, outcome) => {
                let policy = policy.to_string();
                self.entries.insert(
                    key,
                    Entry {
                        policy,
                        outcome,
                        at: now,
                    },
                );
                false
            }
        }
    }

    /// Forgets the verdicts of namespaces that are gone.
    pub fn retain_namespaces(&mut self, keep: impl Fn(&str) -> bool) {
        self.entries.retain(|(ns, _), _| keep(ns));
    }
}

/// The Rejected reason for a refused template.
fn refusal(t: &Template, hub: &str) -> String {
    format!(
        "{REFUSED_BY_HUB}: the pod template at {} ({}) is refused by the hub in a server-side dry run: {hub}",
        t.field,
        t.components.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::interpret;

    fn pytorchjob(privileged: bool) -> Value {
        let sc = if privileged {
            json!({"privileged": true})
        } else {
            json!({})
        };
        let tmpl = |gpu: &str| {
            json!({"metadata": {"labels": {"app": "train"}},
                   "spec": {"containers": [{"name": "pytorch", "image": "x",
                            "securityContext": sc,
                            "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": gpu},
                                          "limits": {"nvidia.com/gpu": gpu}}}]}})
        };
        json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
               "metadata": {"name": "p", "namespace": "team-a"},
               "spec": {"pytorchReplicaSpecs": {
                   "Master": {"replicas": 1, "template": tmpl("1")},
                   "Worker": {"replicas": 2, "template": tmpl("1")}}}})
    }

    fn status(code: u16, message: &str) -> kube::Error {
        let s: kube::core::Status =
            serde_json::from_value(json!({"code": code, "message": message})).expect("status");
        kube::Error::Api(Box::new(s))
    }

    #[test]
    fn one_pod_per_distinct_template_in_the_jobs_namespace_with_its_field_path() {
        let job = pytorchjob(false);
        let w = interpret(&job).expect("interprets");
        let ts = templates(&job, &w);
        // Master and Worker templates are the same text: asked once, both named.
        assert_eq!(ts.len(), 1, "{ts:?}");
        assert_eq!(ts[0].components, ["master", "worker"]);
        assert_eq!(ts[0].field, "spec.pytorchReplicaSpecs.Master.template");
        assert_eq!(ts[0].pod["kind"], "Pod");
        assert_eq!(ts[0].pod["metadata"]["namespace"], "team-a");
        assert_eq!(ts[0].pod["metadata"]["labels"]["app"], "train");
        assert_eq!(ts[0].pod["spec"]["containers"][0]["name"], "pytorch");
        // A different template is a different question.
        let mut other = job.clone();
        other["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] =
            json!("y");
        let w = interpret(&other).expect("interprets");
        let ts = templates(&other, &w);
        assert_eq!(ts.len(), 2);
        assert_eq!(ts[1].field, "spec.pytorchReplicaSpecs.Worker.template");
    }

    /// A batch Job as the hub's API server stores it: the labels it generated for this one Job
    /// on its template.
    fn batch_job(name: &str, uid: &str, manual: bool) -> Value {
        let mut labels = json!({"app": "train"});
        for (k, v) in [
            ("batch.kubernetes.io/controller-uid", uid),
            ("controller-uid", uid),
            ("batch.kubernetes.io/job-name", name),
            ("job-name", name),
        ] {
            labels[k] = json!(v);
        }
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": name, "namespace": "team-a", "uid": uid},
               "spec": {"manualSelector": manual, "parallelism": 1, "completions": 1,
                        "template": {"metadata": {"labels": labels},
                                     "spec": {"restartPolicy": "Never",
                                              "containers": [{"name": "c", "image": "x",
                                                              "resources": {"requests": {"cpu": "1"}}}]}}}})
    }

    #[test]
    fn batch_jobs_of_one_template_share_a_verdict_whatever_their_generated_labels() {
        // Issue 31: the hub generates a uid and name label on every batch Job's template, so
        // every Job was its own dry run (1,500 for 1,500 Jobs of a few shapes on make
        // bench-kueue), each job waiting for its own answer.
        let a = one(&batch_job("a", "uid-a", false));
        let b = one(&batch_job("b", "uid-b", false));
        assert_eq!((a.len(), b.len()), (1, 1));
        assert_eq!(a[0].digest, b[0].digest, "one template, one question");
        // What is sent is still the pod as the template says, labels included.
        assert_eq!(a[0].pod["metadata"]["labels"]["job-name"], "a");
        assert_eq!(b[0].pod["metadata"]["labels"]["controller-uid"], "uid-b");
        // Any label of the user's makes another question.
        let mut c = batch_job("c", "uid-c", false);
        c["spec"]["template"]["metadata"]["labels"]["app"] = json!("serve");
        assert_ne!(one(&c)[0].digest, a[0].digest);
        // With a manual selector those labels are the user's own, kept on the member copy.
        let (m1, m2) = (
            one(&batch_job("a", "uid-a", true)),
            one(&batch_job("b", "uid-b", true)),
        );
        assert_ne!(m1[0].digest, m2[0].digest);
        // Another kind's labels of those names are its own too.
        let mut p = pytorchjob(false);
        p["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]["job-name"] =
            json!("x");
        let ts = one(&p);
        assert_eq!(
            ts.len(),
            2,
            "the Worker's label makes it another template: {ts:?}"
        );
    }

    #[test]
    fn the_hubs_refusals_are_verdicts_and_everything_else_is_asked_again() {
        assert_eq!(classify(Ok(())), Outcome::Allowed);
        let psa = "pods \"x\" is forbidden: violates PodSecurity \"restricted:latest\": privileged";
        assert_eq!(
            classify(Err(status(403, psa))),
            Outcome::Refused(psa.into())
        );
        assert!(matches!(
            classify(Err(status(422, "spec.containers[0].image: Required value"))),
            Outcome::Refused(_)
        ));
        for (code, msg) in [
            (
                403,
                "error looking up service account team-a/default: serviceaccount \"default\" not found",
            ),
            (404, "namespaces \"team-a\" not found"),
            (500, "etcd timeout"),
            (429, "too many requests"),
        ] {
            assert!(
                matches!(classify(Err(status(code, msg))), Outcome::Unknown(_)),
                "{code} {msg}"
            );
        }
    }

    fn one(job: &Value) -> Vec<Template> {
        templates(job, &interpret(job).expect("interprets"))
    }

    #[test]
    fn a_job_waits_for_its_verdict_is_asked_once_and_is_rejected_with_the_hubs_words() {
        let mut c = HubChecks::default();
        let t0 = Instant::now();
        let ts = one(&pytorchjob(true));
        let j = c.judge("team-a", "enforce=restricted", &ts, t0);
        assert_eq!(j.verdict, Verdict::Pending);
        assert_eq!(j.ask.len(), 1);
        // In flight: not asked twice.
        let j = c.judge("team-a", "enforce=restricted", &ts, t0);
        assert_eq!((j.verdict, j.ask.len()), (Verdict::Pending, 0));
        let changed = c.landed(
            "team-a",
            &ts[0].digest,
            "enforce=restricted",
            Outcome::Refused("violates PodSecurity \"restricted:latest\": privileged".into()),
            t0,
        );
        assert!(!changed, "a first verdict changes nothing earlier");
        let j = c.judge("team-a", "enforce=restricted", &ts, t0);
        let Verdict::Refused(why) = j.verdict else {
            panic!("{j:?}")
        };
        assert!(why.starts_with(REFUSED_BY_HUB), "{why}");
        assert!(
            why.contains("spec.pytorchReplicaSpecs.Master.template"),
            "{why}"
        );
        assert!(why.contains("master, worker"), "{why}");
        assert!(why.contains("violates PodSecurity"), "{why}");
        assert!(j.ask.is_empty());
        // The same template in another namespace, or under other labels, is another question.
        assert_eq!(
            c.judge("team-b", "enforce=restricted", &ts, t0).verdict,
            Verdict::Pending
        );
        assert_eq!(c.judge("team-a", "", &ts, t0).verdict, Verdict::Pending);
    }

    #[test]
    fn verdicts_are_asked_again_when_old_and_a_change_is_reported() {
        let mut c = HubChecks::default();
        let t0 = Instant::now();
        let ts = one(&pytorchjob(false));
        let _ = c.judge("team-a", "", &ts, t0);
        assert!(!c.landed("team-a", &ts[0].digest, "", Outcome::Allowed, t0));
        let j = c.judge("team-a", "", &ts, t0 + Duration::from_secs(1));
        assert_eq!((j.verdict, j.ask.len()), (Verdict::Allowed, 0));
        // Old: still allowed while asked again.
        let later = t0 + RECHECK;
        let j = c.judge("team-a", "", &ts, later);
        assert_eq!((j.verdict, j.ask.len()), (Verdict::Allowed, 1));
        // The hub says nothing this time: the verdict stands, asked again after RETRY.
        assert!(!c.landed(
            "team-a",
            &ts[0].digest,
            "",
            Outcome::Unknown("500".into()),
            later
        ));
        let j = c.judge("team-a", "", &ts, later + RETRY);
        assert_eq!((j.verdict, j.ask.len()), (Verdict::Allowed, 1));
        // A new ValidatingAdmissionPolicy now refuses it: a changed verdict.
        assert!(c.landed(
            "team-a",
            &ts[0].digest,
            "",
            Outcome::Refused("denied by policy no-latest".into()),
            later + RETRY
        ));
        assert!(matches!(
            c.judge("team-a", "", &ts, later + RETRY).verdict,
            Verdict::Refused(_)
        ));
    }

    #[test]
    fn an_unknown_answer_is_asked_again_after_the_retry_delay_only() {
        let mut c = HubChecks::default();
        let t0 = Instant::now();
        let ts = one(&pytorchjob(false));
        let _ = c.judge("team-a", "", &ts, t0);
        c.landed(
            "team-a",
            &ts[0].digest,
            "",
            Outcome::Unknown("sa".into()),
            t0,
        );
        let j = c.judge("team-a", "", &ts, t0 + Duration::from_secs(1));
        assert_eq!((j.verdict, j.ask.len()), (Verdict::Pending, 0));
        let j = c.judge("team-a", "", &ts, t0 + RETRY);
        assert_eq!((j.verdict, j.ask.len()), (Verdict::Pending, 1));
    }

    #[test]
    fn only_pod_security_labels_make_the_policy() {
        let labels: BTreeMap<String, String> = [
            ("pod-security.kubernetes.io/enforce", "restricted"),
            ("pod-security.kubernetes.io/warn", "baseline"),
            ("team", "a"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
        assert_eq!(psa_labels(&labels).len(), 2);
        assert_eq!(
            policy_key(&labels),
            "pod-security.kubernetes.io/enforce=restricted,pod-security.kubernetes.io/warn=baseline"
        );
    }
}
