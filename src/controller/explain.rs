//! `muster explain NAMESPACE/NAME`: what muster knows about one job, read from the hub (the
//! QueuedJob the controller keeps, and the job's Events). Read-only.

use std::fmt::Write;

use kube::Client;
use kube::api::{Api, ListParams};

use super::crd::{MemberCluster, QueuedJob, QueuedJobState};
use crate::fleet::PlacementMode;
use crate::scheduler::explain::fmt_placement;

/// The text for one job; `kind` narrows the search when several kinds share the name.
pub async fn explain(
    hub: &Client,
    namespace: &str,
    name: &str,
    kind: Option<&str>,
) -> anyhow::Result<String> {
    let api: Api<QueuedJob> = Api::namespaced(hub.clone(), namespace);
    let mut found: Vec<QueuedJob> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|q| q.spec.job_ref.name == name)
        .filter(|q| kind.is_none_or(|k| q.spec.job_ref.kind.eq_ignore_ascii_case(k)))
        .collect();
    found.sort_by(|a, b| a.spec.job_ref.kind.cmp(&b.spec.job_ref.kind));
    if found.is_empty() {
        anyhow::bail!(
            "{namespace}/{name}: muster does not manage a job of that name (no QueuedJob): its namespace is \
             not in a leaf of the quota tree in force, its kind is not supported, or it does not exist"
        );
    }
    let members: Api<MemberCluster> = Api::all(hub.clone());
    let mut out = String::new();
    for q in &found {
        let _ = writeln!(out, "{}", render(q));
        let cluster = q.status.as_ref().and_then(|s| s.cluster.clone());
        if let Some(c) = cluster
            && let Ok(Some(mc)) = members.get_opt(&c).await
            && let Some(st) = mc.status
            && let Some(mode) = st.placement
        {
            let how = fmt_placement(if mode == PlacementMode::Gates.as_str() {
                PlacementMode::Gates
            } else {
                PlacementMode::Pinned
            });
            let why = st.placement_reason.unwrap_or_default();
            let _ = writeln!(out, "  placement on {c}: {mode}: {how} ({why})");
        }
    }
    Ok(out.trim_end().to_string())
}

/// A waiting job's forecast as text: when and where it should start, the jobs whose end it
/// waits for, and its own expected run time.
pub fn render_estimate(e: &super::crd::StartEstimate) -> String {
    let mut out = String::new();
    match (&e.start, &e.never, &e.not_before) {
        (Some(start), _, _) => {
            let _ = writeln!(
                out,
                "  expected to start {start} on {}",
                e.cluster.as_deref().unwrap_or("-")
            );
        }
        (None, Some(why), _) => {
            let _ = writeln!(
                out,
                "  not expected to start while the known jobs run: {why}"
            );
        }
        (None, None, Some(t)) => {
            let _ = writeln!(
                out,
                "  not expected to start before {t} (the forecast stopped at its time budget before it started)"
            );
        }
        (None, None, None) => {}
    }
    if !e.after.is_empty() {
        let _ = writeln!(out, "  once these end: {}", e.after.join(", "));
    }
    if let Some(r) = &e.runtime {
        let _ = writeln!(
            out,
            "  its own expected run time: {r} ({})",
            e.runtime_source.as_deref().unwrap_or("-")
        );
    }
    out
}

/// One QueuedJob as text.
pub fn render(q: &QueuedJob) -> String {
    let r = &q.spec.job_ref;
    let ns = q.metadata.namespace.clone().unwrap_or_default();
    let st = q.status.clone().unwrap_or_default();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} {ns}/{}: {} (queue {}, priority {})",
        r.kind,
        r.name,
        st.state.as_str(),
        st.queue.as_deref().unwrap_or("-"),
        st.priority.map_or("-".to_string(), |p| p.to_string()),
    );
    match st.state {
        QueuedJobState::Queued | QueuedJobState::Rejected => {
            if let Some(e) = &st.estimate {
                out.push_str(&render_estimate(e));
            }
            if let Some(e) = &st.explanation {
                let _ = writeln!(out, "{e}");
            } else if let Some(r) = &st.reason {
                let _ = writeln!(out, "  {r}");
            }
        }
        _ => {
            let cluster = st.cluster.as_deref().unwrap_or("-");
            let _ = writeln!(
                out,
                "  cluster {cluster}, admitted {}, dispatched {}",
                st.admitted_at.as_deref().unwrap_or("-"),
                st.dispatched_at.as_deref().unwrap_or("not yet")
            );
            if let Some(p) = &st.pods {
                let _ = writeln!(
                    out,
                    "  pods: {} running, {} scheduled, of {} expected",
                    p.running, p.scheduled, p.expected
                );
            }
            for (component, nodes) in &st.placement {
                let list: Vec<String> = nodes.iter().map(|(n, k)| format!("{n}×{k}")).collect();
                let _ = writeln!(out, "  {component}: {}", list.join(", "));
            }
            if !st.pod_placement.is_empty() {
                let w = st
                    .pod_placement
                    .iter()
                    .map(|p| p.pod.len())
                    .max()
                    .unwrap_or(0);
                let _ = writeln!(out, "  per pod (planned node -> node):");
                for p in &st.pod_placement {
                    let planned = p.planned_node.as_deref().unwrap_or("-");
                    let on = match (&p.node, p.gated) {
                        (_, true) => "gated".to_string(),
                        (Some(n), _) if Some(n.as_str()) != p.planned_node.as_deref() => {
                            format!("{n}  OFF PLAN")
                        }
                        (Some(n), _) => n.clone(),
                        (None, _) => "not bound yet".to_string(),
                    };
                    let _ = writeln!(
                        out,
                        "    {:w$}  {:10} {planned} -> {on}",
                        p.pod, p.component
                    );
                }
            }
            if let Some(r) = &st.reason {
                let _ = writeln!(out, "  {r}");
            }
        }
    }
    if st.requeues > 0 {
        let _ = writeln!(out, "  taken back and requeued {} time(s)", st.requeues);
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::crd::{JobRef, PodCounts, PodPlacement, QueuedJobSpec, QueuedJobStatus};
    use std::collections::BTreeMap;

    #[test]
    fn renders_running_and_waiting_jobs() {
        let mut q = QueuedJob::new(
            "pytorchjob-t",
            QueuedJobSpec {
                job_ref: JobRef {
                    api_version: "kubeflow.org/v1".into(),
                    kind: "PyTorchJob".into(),
                    name: "t".into(),
                    uid: "u".into(),
                },
            },
        );
        q.metadata.namespace = Some("research".into());
        q.status = Some(QueuedJobStatus {
            state: QueuedJobState::Running,
            queue: Some("root/research".into()),
            priority: Some(5),
            cluster: Some("member-c".into()),
            placement: BTreeMap::from([("worker".into(), BTreeMap::from([("c-0".into(), 2)]))]),
            pods: Some(PodCounts {
                expected: 3,
                scheduled: 3,
                running: 3,
            }),
            pod_placement: vec![
                PodPlacement {
                    pod: "t-worker-0".into(),
                    component: "worker".into(),
                    planned_node: Some("c-0".into()),
                    node: Some("c-0".into()),
                    gated: false,
                },
                PodPlacement {
                    pod: "t-worker-1".into(),
                    component: "worker".into(),
                    planned_node: Some("c-0".into()),
                    node: Some("c-1".into()),
                    gated: false,
                },
            ],
            ..Default::default()
        });
        let text = render(&q);
        assert!(
            text.starts_with("PyTorchJob research/t: Running (queue root/research, priority 5)"),
            "{text}"
        );
        assert!(text.contains("cluster member-c"), "{text}");
        assert!(
            text.contains("pods: 3 running, 3 scheduled, of 3 expected"),
            "{text}"
        );
        assert!(text.contains("worker: c-0×2"), "{text}");
        assert!(
            text.contains("t-worker-0  worker     c-0 -> c-0\n"),
            "{text}"
        );
        assert!(
            text.contains("t-worker-1  worker     c-0 -> c-1  OFF PLAN"),
            "{text}"
        );
        q.status = Some(QueuedJobStatus {
            state: QueuedJobState::Queued,
            explanation: Some(
                "quota root/a: kube-queue/max-jobs 1 in use + 1 requested = 2, above max 1".into(),
            ),
            ..Default::default()
        });
        assert!(render(&q).contains("above max 1"));
        if let Some(st) = q.status.as_mut() {
            st.estimate = Some(crate::controller::crd::StartEstimate {
                start: Some("2026-12-01T10:00:30Z".into()),
                cluster: Some("member-b".into()),
                after: vec!["research/first".into()],
                runtime: Some("30s".into()),
                runtime_source: Some("declared".into()),
                never: None,
                not_before: None,
            });
        }
        let text = render(&q);
        assert!(
            text.contains("expected to start 2026-12-01T10:00:30Z on member-b\n  once these end: research/first\n  its own expected run time: 30s (declared)"),
            "{text}"
        );
        // A forecast that stopped at its time budget first: a lower bound, said as one.
        let bound = crate::controller::crd::StartEstimate {
            not_before: Some("2026-12-01T14:00:00Z".into()),
            runtime: Some("30s".into()),
            runtime_source: Some("declared".into()),
            ..Default::default()
        };
        assert_eq!(
            render_estimate(&bound),
            "  not expected to start before 2026-12-01T14:00:00Z (the forecast stopped at its time budget before it started)\n  its own expected run time: 30s (declared)\n"
        );
    }
}
