//! Topology inside a member (issue 30, part 2) in `muster sim` and `muster what-if`, the built
//! binary as users run it: a job that requires one rack avoids a member with enough GPUs in
//! total but not in one rack, waits with a reason naming the level and the largest free rack,
//! and its start-time estimate knows it; a preferred level never makes a job wait; asks per
//! component (Kueue's pod-set annotation); bad levels and asks are named; scenarios keep levels.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn write(name: &str, text: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("topology");
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let file = dir.join(name);
    std::fs::write(&file, text).expect("file written");
    file
}

fn muster(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(args)
        .output()
        .expect("run muster");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn report(file: &Path) -> Value {
    let (ok, out, err) = muster(&["sim", file.to_str().expect("UTF-8"), "-o", "json"]);
    assert!(ok, "{err}");
    serde_json::from_str(&out).expect("a JSON report")
}

/// `fragmented`: 16 GPUs in four racks of 4 (two blocks), and one more node without labels
/// (it is in no rack: a job that requires one never uses it); `racked`: one rack of two 4-GPU
/// nodes. No pod limit is given (five nodes without one once overflowed a sum). Two 8-GPU
/// PyTorchJobs of 8 workers, the second 10 s after the first, each with `ann` on the job.
fn scenario(ann: &str, template_ann: &str) -> String {
    let mut s = String::from(
        "clusters:\n\
- name: fragmented\n  topology: [example.com/block, example.com/rack]\n  nodes:\n",
    );
    for (i, (b, r)) in [("b1", "r1"), ("b1", "r2"), ("b2", "r3"), ("b2", "r4")]
        .iter()
        .enumerate()
    {
        s.push_str(&format!(
            "  - {{name: f{i}, allocatable: {{cpu: \"64\", nvidia.com/gpu: \"4\"}}, labels: {{example.com/block: {b}, example.com/rack: {r}}}}}\n"
        ));
    }
    s.push_str("  - {name: loose, allocatable: {cpu: \"64\", nvidia.com/gpu: \"4\"}}\n");
    s.push_str("- name: racked\n  topology: [example.com/block, example.com/rack]\n  nodes:\n");
    s.push_str("  - {name: r, count: 2, allocatable: {cpu: \"64\", nvidia.com/gpu: \"4\"}, labels: {example.com/block: b1, example.com/rack: r1}}\njobs:\n");
    for (name, at) in [("first", 0), ("second", 10)] {
        s.push_str(&format!(
            "- at: {at}s\n  runFor: 600s\n  manifest:\n    apiVersion: kubeflow.org/v1\n    kind: PyTorchJob\n    metadata: {{name: {name}, namespace: team{ann}}}\n    spec:\n      pytorchReplicaSpecs:\n        Worker:\n          replicas: 8\n          template:\n            metadata: {{annotations: {{{template_ann}}}}}\n            spec: {{containers: [{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}]}}\n"
        ));
    }
    s
}

/// The scenario's node labels: node name → (block, rack).
fn racks(text: &str) -> BTreeMap<String, (String, String)> {
    let sc: Value = serde_yaml::from_str(text).expect("scenario");
    let mut out = BTreeMap::new();
    for c in sc["clusters"].as_array().expect("clusters") {
        for n in c["nodes"].as_array().expect("nodes") {
            let count = n["count"].as_u64().unwrap_or(1);
            let base = n["name"].as_str().expect("name");
            for i in 0..count {
                let name = if count == 1 {
                    base.to_string()
                } else {
                    format!("{base}-{i}")
                };
                let l = &n["labels"];
                out.insert(
                    name,
                    (
                        l["example.com/block"].as_str().unwrap_or("").to_string(),
                        l["example.com/rack"].as_str().unwrap_or("").to_string(),
                    ),
                );
            }
        }
    }
    out
}

fn job<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["name"] == name)
        .expect("the job is in the report")
}

/// The (block, rack) pairs a job's planned nodes are in.
fn domains_of(j: &Value, racks: &BTreeMap<String, (String, String)>) -> Vec<(String, String)> {
    let mut d: Vec<(String, String)> = j["placement"]
        .as_object()
        .expect("a placement")
        .keys()
        .map(|n| racks[n].clone())
        .collect();
    d.sort();
    d.dedup();
    d
}

const REQUIRED: &str = ", annotations: {muster.dev/topology-required: example.com/rack}";

#[test]
fn a_required_rack_avoids_a_fragmented_member_and_waits_saying_why() {
    // Without the ask, the second job goes to the fragmented member at once: what follows is
    // the ask's doing.
    let text = scenario("", "");
    let r = report(&write("free.yaml", &text));
    let second = job(&r, "second");
    assert_eq!(second["cluster"], "fragmented", "{second}");
    assert_eq!(second["dispatched"], 10);

    let text = scenario(REQUIRED, "");
    let r = report(&write("required.yaml", &text));
    let racks = racks(&text);
    let first = job(&r, "first");
    assert_eq!(first["cluster"], "racked", "{first}");
    let second = job(&r, "second");
    assert_eq!(second["cluster"], "racked", "{second}");
    assert_eq!(
        second["dispatched"], 600,
        "it waits for the one rack: {second}"
    );
    for j in [first, second] {
        assert_eq!(
            domains_of(j, &racks),
            vec![("b1".to_string(), "r1".to_string())],
            "{j}"
        );
    }
    let why = second["reason"].as_str().expect("why it waited");
    assert!(
        why.contains(
            "fragmented: needs worker in one example.com/rack (nvidia.com/gpu 8 in all): the \
             largest free example.com/rack is "
        ) && why.contains("with nvidia.com/gpu 4 free"),
        "{why}"
    );
    // The estimate made at submission knows the fragmented member cannot take it.
    assert_eq!(second["estimate"]["cluster"], "racked", "{second}");
    assert!(
        second["estimate"]["start"].as_u64() >= Some(600),
        "{second}"
    );

    // Explained, the waiting job names its ask and each member's verdict; dispatched, its rack.
    let file = write("explain.yaml", &text);
    let (ok, out, err) = muster(&[
        "sim",
        file.to_str().expect("UTF-8"),
        "--explain",
        "team/second",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("topology asked: required example.com/rack for the whole job"),
        "{out}"
    );
    assert!(
        out.contains("topology domain: example.com/rack b1/r1"),
        "{out}"
    );
}

#[test]
fn a_preferred_level_never_makes_a_job_wait() {
    let text = scenario(
        ", annotations: {muster.dev/topology-preferred: example.com/rack}",
        "",
    );
    let r = report(&write("preferred.yaml", &text));
    let racks = racks(&text);
    let second = job(&r, "second");
    assert_eq!(second["cluster"], "fragmented", "{second}");
    assert_eq!(second["dispatched"], 10, "{second}");
    // No rack holds 8 there: the tightest block does, both racks of one block.
    let d = domains_of(second, &racks);
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!(d[0].0, d[1].0, "one block: {d:?}");
}

#[test]
fn a_component_asks_with_kueues_pod_set_annotation() {
    let text = scenario(
        "",
        "kueue.x-k8s.io/podset-required-topology: example.com/rack",
    );
    let r = report(&write("component.yaml", &text));
    let racks = racks(&text);
    let second = job(&r, "second");
    assert_eq!(second["cluster"], "racked", "{second}");
    assert_eq!(domains_of(second, &racks).len(), 1, "{second}");
}

/// `muster what-if` on `file` adding the nodes of `nodes_yaml` to member `fragmented`: the
/// line of `team/second` in the table after the change, and the whole output.
fn second_after_adding(file: &std::path::Path, name: &str, nodes_yaml: &str) -> (String, String) {
    let nodes = write(name, nodes_yaml);
    let change = format!("add-nodes=fragmented:{}", nodes.display());
    let (ok, out, err) = muster(&[
        "what-if",
        "--scenario",
        file.to_str().expect("UTF-8"),
        "--change",
        &change,
    ]);
    assert!(ok, "{err}");
    let line = out
        .lines()
        .rev()
        .find(|l| l.contains("team/second"))
        .unwrap_or_default()
        .to_string();
    (line, out)
}

#[test]
fn what_if_counts_the_topology() {
    let text = scenario(REQUIRED, "");
    let file = write("whatif.yaml", &text);
    // A fifth node in the fragmented member's rack b1/r1 makes a rack of 8 GPUs there.
    let (line, out) = second_after_adding(
        &file,
        "nodes.yaml",
        "- {name: f5, allocatable: {cpu: \"64\", nvidia.com/gpu: \"4\"}, labels: {example.com/block: b1, example.com/rack: r1}}\n",
    );
    assert!(
        line.contains("on racked")
            && line.contains("10s on fragmented")
            && line.contains("changed"),
        "{out}"
    );
    // The same node outside any rack changes nothing.
    let (line, out) = second_after_adding(
        &file,
        "loose.yaml",
        "- {name: f5, allocatable: {cpu: \"64\", nvidia.com/gpu: \"4\"}}\n",
    );
    assert!(!line.contains("changed"), "{out}");
}

#[test]
fn bad_levels_and_asks_are_named_and_scenarios_keep_levels() {
    let text = scenario(REQUIRED, "").replacen(
        "topology: [example.com/block, example.com/rack]",
        "topology: [example.com/rack, example.com/rack]",
        1,
    );
    let (ok, _, err) = muster(&["sim", write("twice.yaml", &text).to_str().expect("UTF-8")]);
    assert!(!ok);
    assert!(
        err.contains("clusters[0].topology[1]: level example.com/rack is listed twice"),
        "{err}"
    );
    let text = scenario(
        ", annotations: {muster.dev/topology-required: example.com/rack, muster.dev/topology-preferred: example.com/block}",
        "",
    );
    let r = report(&write("conflict.yaml", &text));
    let first = job(&r, "first");
    assert_eq!(first["state"], "Rejected", "{first}");
    assert!(
        first["reason"]
            .as_str()
            .is_some_and(|w| w.starts_with("metadata.annotations[muster.dev/topology-")),
        "{first}"
    );
    let text = scenario(REQUIRED, "muster.dev/topology-required: example.com/rack");
    let r = report(&write("both.yaml", &text));
    assert_eq!(job(&r, "first")["state"], "Rejected");
    // A scenario read and written again keeps the levels (snapshots are written the same way).
    let sc = muster::sim::parse_scenario("x.yaml", &scenario(REQUIRED, "")).expect("parses");
    let again = serde_yaml::to_string(&sc).expect("writes");
    assert!(
        again.contains("topology:\n  - example.com/block\n  - example.com/rack"),
        "{again}"
    );
}
