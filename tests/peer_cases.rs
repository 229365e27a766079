//! Peers' cases as table tests: the quota and preemption situations of Kueue's scheduler and
//! preemption tests, scheduler-plugins' capacity scheduling and koord-queue's elastic quota
//! tests, translated into muster's model and checked against muster's documented outcome
//! (docs/concepts.md). The table lives in tests/support/peer_table.rs, one case per upstream
//! case, each citing it; the cases that do not fit a table (requeue order, tree validation) are
//! the tests below it. Where muster differs from a peer on purpose, the case says so.

#[path = "support/peer_table.rs"]
mod peer_table;

use std::collections::BTreeMap;

use muster::quota::{QuotaTree, Severity};
use muster::scheduler::{Config, Decision, JobId, JobState, Scheduler, Submitted};
use muster::sim;
use muster::workload::interpret;
use peer_table::{CASES, Case, J, PRIORITY_CLASSES};

/// A scenario holding a case's member, tree, priority classes and jobs (running, then incoming).
fn scenario_text(nodes: &[(u32, &str)], tree: &str, jobs: &[&J]) -> String {
    let mut y = String::from("clusters:\n- name: member\n  nodes:\n");
    for (i, (count, alloc)) in nodes.iter().enumerate() {
        y += &format!("  - {{name: n{i}, count: {count}, allocatable: {alloc}}}\n");
    }
    y += &format!(
        "quota:\n  apiVersion: scheduling.sigs.k8s.io/v1beta1\n  kind: ElasticQuotaTree\n  \
         metadata: {{name: tree}}\n  spec:\n    root: {tree}\n"
    );
    y += &format!("priorityClasses: {PRIORITY_CLASSES}\njobs:\n");
    for j in jobs {
        let class = if j.class.is_empty() {
            String::new()
        } else {
            format!("priorityClassName: {}, ", j.class)
        };
        y += &format!(
            "- at: 0s\n  runFor: 1h\n  manifest:\n    apiVersion: batch/v1\n    kind: Job\n    \
             metadata: {{name: {}, namespace: {}}}\n    spec:\n      parallelism: {p}\n      \
             completions: {p}\n      template:\n        spec: {{{class}restartPolicy: Never, \
             containers: [{{name: c, image: pause, resources: {{limits: {}}}}}]}}\n",
            j.name,
            j.ns,
            j.res,
            p = j.pods
        );
    }
    y
}

/// A scheduler holding the case's fleet, tree and classes; jobs by name, submitted as asked.
struct Run {
    s: Scheduler,
    sc: sim::Scenario,
    ids: BTreeMap<String, JobId>,
    names: BTreeMap<JobId, String>,
    at: u64,
}

impl Run {
    fn new(nodes: &[(u32, &str)], tree: &str, jobs: &[&J]) -> Run {
        let text = scenario_text(nodes, tree, jobs);
        let sc = sim::parse_scenario("peer case", &text)
            .unwrap_or_else(|e| panic!("fixture parses: {e}\n{text}"));
        let mut s = Scheduler::new(Config::default());
        let q = sc.quota.as_ref().expect("fixture has a tree");
        s.set_quota_tree(Some(QuotaTree::parse(q).expect("fixture tree is valid")));
        s.set_priority_classes(sc.priority_classes.clone());
        for c in sim::cluster_infos(&sc) {
            s.set_cluster(&c);
        }
        Run {
            s,
            sc,
            ids: BTreeMap::new(),
            names: BTreeMap::new(),
            at: 0,
        }
    }

    /// Submits the `i`th job of the scenario; inadmissible jobs get an id too.
    fn submit(&mut self, i: usize) -> JobId {
        let spec = &self.sc.jobs[i];
        let w = interpret(&spec.manifest.value()).expect("fixture manifest");
        self.at += 1_000;
        let id = match self.s.submit(&w, self.at) {
            Submitted::Queued(id) | Submitted::Inadmissible(id, _) => id,
            Submitted::Ignored(r) => panic!("fixture job {} ignored: {r}", w.name),
        };
        self.ids.insert(w.name.clone(), id);
        self.names.insert(id, w.name);
        id
    }

    fn id(&self, name: &str) -> JobId {
        *self.ids.get(name).expect("a job of the case")
    }

    fn admitted(&self, name: &str) -> bool {
        matches!(self.s.state(self.id(name)), JobState::Admitted { .. })
    }

    /// `(victim, preemptor)` names of a cycle's preemptions, sorted.
    fn preemptions(&self, ds: &[Decision]) -> Vec<(String, String)> {
        let mut p: Vec<(String, String)> = ds
            .iter()
            .filter_map(|d| match d {
                Decision::Preempt { job, by, .. } => {
                    Some((self.names[job].clone(), self.names[by].clone()))
                }
                _ => None,
            })
            .collect();
        p.sort();
        p
    }
}

/// Runs one case; returns what did not hold.
fn check(case: &Case) -> Vec<String> {
    let jobs: Vec<&J> = case.running.iter().chain(case.incoming).collect();
    let mut r = Run::new(case.nodes, case.tree, &jobs);
    let mut errors = Vec::new();
    for (i, j) in case.running.iter().enumerate() {
        r.submit(i);
        let ds = r.s.cycle();
        assert!(
            r.admitted(j.name),
            "{}: fixture job {} not admitted: {ds:?}",
            case.source,
            j.name
        );
    }
    for i in 0..case.incoming.len() {
        r.submit(case.running.len() + i);
    }
    let first = r.s.cycle();
    let e = &case.expect;
    let mut want: Vec<(String, String)> = e
        .preempted
        .iter()
        .map(|(v, by)| (v.to_string(), by.to_string()))
        .collect();
    want.sort();
    let got = r.preemptions(&first);
    if got != want {
        errors.push(format!("preempted {got:?}, expected {want:?}"));
    }
    // A victim of the preemptor's own queue is preempted by priority, any other to reclaim.
    let ns: BTreeMap<&str, &str> = jobs.iter().map(|j| (j.name, j.ns)).collect();
    for d in &first {
        if let Decision::Preempt { job, by, reason } = d {
            let same = ns[r.names[job].as_str()] == ns[r.names[by].as_str()];
            let kind = if same {
                "preempted in queue"
            } else {
                "preempted to reclaim"
            };
            if !reason.starts_with(kind) {
                errors.push(format!("{}: reason `{reason}`", r.names[job]));
            }
        }
    }
    for name in e.admitted {
        if !r.admitted(name) {
            errors.push(format!(
                "{name} not admitted: {:?}, {:?}",
                r.s.state(r.id(name)),
                r.s.reason(r.id(name))
            ));
        }
    }
    for j in case.running {
        let victim = e.preempted.iter().any(|(v, _)| *v == j.name);
        if r.admitted(j.name) == victim {
            errors.push(format!(
                "{}: admitted {}, a victim {victim}",
                j.name,
                r.admitted(j.name)
            ));
        }
    }
    // Later cycles: nobody else is preempted (no ping-pong), the waiting keep waiting.
    for _ in 0..2 {
        let ds = r.s.cycle();
        let more = r.preemptions(&ds);
        if !more.is_empty() {
            errors.push(format!("later preemptions {more:?}"));
        }
    }
    for (name, why) in e.waiting {
        let id = r.id(name);
        let reason = r.s.reason(id).unwrap_or_default();
        if *r.s.state(id) != JobState::Pending || !reason.contains(why) {
            errors.push(format!(
                "{name}: {:?} `{reason}`, expected pending with `{why}`",
                r.s.state(id)
            ));
        }
    }
    for (name, why) in e.inadmissible {
        let id = r.id(name);
        match r.s.state(id) {
            JobState::Inadmissible(reason) if reason.contains(why) => {}
            other => errors.push(format!("{name}: {other:?}, expected inadmissible `{why}`")),
        }
    }
    let listed = |n: &str| {
        e.admitted.contains(&n)
            || e.waiting.iter().any(|(w, _)| *w == n)
            || e.inadmissible.iter().any(|(w, _)| *w == n)
    };
    for j in case.incoming {
        if !listed(j.name) {
            errors.push(format!("{}: no expected outcome in the table", j.name));
        }
    }
    errors
}

#[test]
fn peers_cases_have_musters_documented_outcome() {
    assert!(CASES.len() >= 15, "{} cases", CASES.len());
    let mut failed = Vec::new();
    for case in CASES {
        let errors = check(case);
        if !errors.is_empty() {
            failed.push(format!("{}:\n  {}", case.source, errors.join("\n  ")));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} cases failed:\n{}",
        failed.len(),
        CASES.len(),
        failed.join("\n")
    );
}

/// Kueue pkg/cache/queue/cluster_queue_test.go, TestStrictFIFO "w1.priority equals w2.priority
/// and w1.create time is earlier than w2.create time but w1 was evicted". DIFFERS on purpose:
/// Kueue's default ordering puts a job evicted for its pods' readiness behind w2 (by eviction
/// time; its variant configured with the creation timestamp keeps w1 first). muster always
/// requeues a taken-back job in its original place (docs/concepts.md "Requeue"): w1 runs again
/// before w2.
#[test]
fn kueue_strict_fifo_a_requeued_job_keeps_its_place() {
    let tree = "{name: root, children: [{name: q, namespaces: [q], min: {cpu: '2'},
        max: {cpu: '2'}, attributes: {muster.dev/queueing-strategy: StrictFIFO}}]}";
    let w1 = J {
        name: "w1",
        ns: "q",
        class: "",
        pods: 1,
        res: "{cpu: '2'}",
    };
    let w2 = J { name: "w2", ..w1 };
    let mut r = Run::new(&[(1, "{cpu: '8', memory: 8Gi}")], tree, &[&w1, &w2]);
    r.submit(0);
    r.s.cycle();
    r.submit(1);
    r.s.cycle();
    assert!(r.admitted("w1") && !r.admitted("w2"));
    r.s.requeue(r.id("w1"), "pods not running after dispatch");
    let ds = r.s.cycle();
    assert!(
        r.admitted("w1") && !r.admitted("w2"),
        "w1 {:?}, w2 {:?}: {ds:?}",
        r.s.state(r.id("w1")),
        r.s.state(r.id("w2"))
    );
    let reason = r.s.reason(r.id("w2")).unwrap_or_default();
    assert!(reason.contains("exceeds max 2"), "{reason}");
}

/// koord-queue pkg/framework/plugins/elasticquota/elasticquotatree/elasticquota_test.go,
/// TestNewElasticQuotaTree "quota with same node". DIFFERS on purpose: koord-queue keeps two
/// nodes of the same name under different parents apart (by full path); muster refuses the tree
/// (docs/concepts.md: duplicate node names are an error), since a node's name alone must say
/// which node it is.
#[test]
fn koord_queue_same_name_under_two_parents_is_a_validation_error() {
    let tree: serde_yaml::Value = serde_yaml::from_str(
        "apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: tree}
spec:
  root:
    name: root
    children:
    - {name: test1, namespaces: [ns1]}
    - name: test2
      children:
      - {name: test1, namespaces: [ns2]}",
    )
    .expect("fixture YAML");
    let value = serde_json::to_value(tree).expect("fixture as JSON");
    let problems = QuotaTree::parse(&value).expect_err("two nodes named test1");
    assert!(
        problems.iter().any(|p| p.severity == Severity::Error
            && p.field == "spec.root.children[1].children[0].name"
            && p.message.starts_with("duplicate name \"test1\"")),
        "{problems:?}"
    );
}
