//! `muster sim` on scenarios with `changes:` (docs/sim.md, "Scheduled changes"): the quota tree
//! replaced, members added or replaced and members made unreachable mid-run, each change's effect
//! on exact job outcomes, and the errors of invalid changes. The built binary, as users run it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Writes `text` to a scenario file of its own under the test's temporary directory.
fn write(name: &str, text: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sim_changes");
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, text).expect("scenario written");
    file
}

fn muster(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("run muster");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked"),
        "muster {args:?} panicked:\n{stderr}"
    );
    out
}

/// `muster sim FILE -o json`, exit code 0.
fn report(file: &Path) -> Value {
    let path = file.to_str().expect("a UTF-8 path");
    let out = muster(&["sim", path, "-o", "json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "muster sim {path} failed:\n{err}"
    );
    serde_json::from_slice(&out.stdout).expect("a JSON report")
}

/// `muster sim FILE`: exit code 2 and the error.
fn refused(file: &Path) -> String {
    let out = muster(&["sim", file.to_str().expect("a UTF-8 path")]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A job's `(state, dispatched, finished, cluster)`.
fn outcome(r: &Value, name: &str) -> (String, Value, Value, Value) {
    let j = r["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["name"] == name)
        .unwrap_or_else(|| panic!("no job {name} in {r:#}"));
    (
        j["state"].as_str().unwrap_or_default().to_string(),
        j["dispatched"].clone(),
        j["finished"].clone(),
        j["cluster"].clone(),
    )
}

fn done(dispatched: u64, finished: u64, cluster: &str) -> (String, Value, Value, Value) {
    (
        "Finished".into(),
        json!(dispatched),
        json!(finished),
        json!(cluster),
    )
}

/// A batch Job of `pods` pods of `gpus` GPUs each, submitted at `at` for `run_for`.
fn job(name: &str, ns: &str, at: &str, run_for: &str, pods: u32, gpus: u32) -> String {
    format!(
        "- at: {at}
  runFor: {run_for}
  manifest:
    apiVersion: batch/v1
    kind: Job
    metadata: {{name: {name}, namespace: {ns}}}
    spec:
      parallelism: {pods}
      completions: {pods}
      template:
        spec:
          restartPolicy: Never
          containers:
          - name: c
            image: registry.k8s.io/pause:3.10.1
            resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}
"
    )
}

/// A tree with one leaf `team` (namespace `team`) of at most `max` GPUs, indented by `pad`.
fn tree(max: &str, pad: &str) -> String {
    let t = format!(
        "apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {{name: elasticquotatree, namespace: kube-system}}
spec:
  root:
    name: root
    max: {{nvidia.com/gpu: \"16\"}}
    children:
    - name: team
      max: {{nvidia.com/gpu: \"{max}\"}}
      namespaces: [team]"
    );
    t.lines().map(|l| format!("{pad}{l}\n")).collect()
}

/// A member as the body of a change's `cluster:` (the list item's fields, indented by 4).
fn as_change(member: &str) -> String {
    member
        .lines()
        .map(|l| format!("    {}\n", l.get(2..).unwrap_or_default()))
        .collect()
}

fn member(name: &str, gpus: u32) -> String {
    format!(
        "- name: {name}
  nodes:
  - name: {name}-n
    allocatable: {{cpu: \"32\", memory: 128Gi, nvidia.com/gpu: \"{gpus}\"}}
"
    )
}

#[test]
fn raising_a_leafs_max_mid_run_starts_the_job_it_held() {
    let text = format!(
        "clusters:\n{}quota:\n{}changes:\n- at: 10m\n  quota:\n{}jobs:\n{}{}",
        member("m", 8),
        tree("2", "  "),
        tree("6", "    "),
        job("four", "team", "0s", "30m", 4, 1),
        job("two", "team", "0s", "1h", 2, 1),
    );
    let r = report(&write("raise_max", &text));
    // two fits the max of 2 at once; four (4 GPUs) only once the max is 6, at 600 s, beside two.
    assert_eq!(outcome(&r, "two"), done(0, 3600, "m"));
    assert_eq!(outcome(&r, "four"), done(600, 2400, "m"));
    // The estimate at submission knew the tree in force then, not the change to come.
    let four = r["jobs"][0].clone();
    assert_eq!(four["name"], "four");
    assert_eq!(four["estimate"]["madeAt"], json!(0));
    assert_eq!(four["estimate"]["start"], Value::Null, "{four}");
}

#[test]
fn lowering_then_removing_the_tree_mid_run() {
    // At 5m the max drops to 1: nothing running is stopped, but late (2 GPUs) waits; at 15m the
    // tree is removed (`quota: null`) and late starts.
    let text = format!(
        "clusters:\n{}quota:\n{}changes:\n- at: 15m\n  quota: null\n- at: 5m\n  quota:\n{}jobs:\n{}{}",
        member("m", 8),
        tree("4", "  "),
        tree("1", "    "),
        job("early", "team", "0s", "1h", 2, 1),
        job("late", "team", "10m", "10m", 2, 1),
    );
    let r = report(&write("remove_tree", &text));
    assert_eq!(outcome(&r, "early"), done(0, 3600, "m"));
    assert_eq!(outcome(&r, "late"), done(900, 1500, "m"));
}

#[test]
fn a_change_applies_before_the_submissions_of_its_instant() {
    // At 10m the tree gains a leaf for namespace `other`: the job submitted at that instant is
    // queued there; the one submitted at 5m, before the tree knew `other`, stays ignored.
    let with_other = tree("4", "    ").replace(
        "          namespaces: [team]\n",
        "          namespaces: [team]
        - name: other
          max: {nvidia.com/gpu: \"4\"}
          namespaces: [other]
",
    );
    let text = format!(
        "clusters:\n{}quota:\n{}changes:\n- at: 10m\n  quota:\n{with_other}jobs:\n{}{}",
        member("m", 8),
        tree("4", "  "),
        job("too-early", "other", "5m", "10m", 1, 1),
        job("on-time", "other", "10m", "10m", 1, 1),
    );
    let r = report(&write("same_instant", &text));
    assert_eq!(outcome(&r, "on-time"), done(600, 1200, "m"));
    let queue = |name: &str| {
        r["jobs"]
            .as_array()
            .and_then(|js| js.iter().find(|j| j["name"] == name))
            .map(|j| (j["state"].clone(), j["queue"].clone()))
    };
    assert_eq!(
        queue("on-time"),
        Some((json!("Finished"), json!("root/other")))
    );
    assert_eq!(queue("too-early"), Some((json!("Ignored"), Value::Null)));
}

#[test]
fn a_member_added_mid_run_takes_the_job_no_member_fit() {
    let text = format!(
        "clusters:\n{}changes:\n- at: 5m\n  cluster:\n{}jobs:\n{}{}",
        member("small", 2),
        as_change(&member("big", 8)),
        job("wide", "team", "0s", "10m", 1, 4),
        job("narrow", "team", "0s", "10m", 1, 2),
    );
    let r = report(&write("add_member", &text));
    assert_eq!(outcome(&r, "narrow"), done(0, 600, "small"));
    assert_eq!(outcome(&r, "wide"), done(300, 900, "big"));
    // Allocatable over time: 2 GPUs for 300 s, then 10 GPUs for 600 s (6,600 GPU-s); held 2 x 600
    // + 4 x 600 = 3,600 GPU-s: 54.5 %, not 3,600 / (10 x 900) = 40.0 %.
    assert_eq!(r["summary"]["utilization"]["nvidia.com/gpu"], json!(54.5));
}

#[test]
fn a_replaced_member_keeps_the_jobs_on_nodes_that_remain() {
    // At 10m m gets a second node: first (running on m-n) keeps its node and ends on time,
    // second (no room until then) starts on the new node.
    let text = format!(
        "clusters:\n{}changes:\n- at: 10m\n  cluster:\n    name: m\n    nodes:\n    - name: m-n\n      allocatable: {{cpu: \"32\", memory: 128Gi, nvidia.com/gpu: \"4\"}}\n    - name: extra\n      allocatable: {{cpu: \"32\", memory: 128Gi, nvidia.com/gpu: \"4\"}}\njobs:\n{}{}",
        member("m", 4),
        job("first", "team", "0s", "1h", 1, 4),
        job("second", "team", "0s", "20m", 1, 4),
    );
    let r = report(&write("replace_member", &text));
    assert_eq!(outcome(&r, "first"), done(0, 3600, "m"));
    assert_eq!(outcome(&r, "second"), done(600, 1800, "m"));
    let placement = |name: &str| {
        r["jobs"]
            .as_array()
            .and_then(|js| js.iter().find(|j| j["name"] == name))
            .map(|j| j["placement"].clone())
    };
    assert_eq!(placement("first"), Some(json!({"m-n": 1})));
    assert_eq!(placement("second"), Some(json!({"extra": 1})));
}

#[test]
fn an_unreachable_member_gets_nothing_new_until_it_answers() {
    // b is down from 5m to 20m: at 10m one job takes a, the other waits for b's return although
    // b is empty; the job running on b since 0s runs on.
    let text = format!(
        "clusters:\n{}{}changes:\n- at: 20m\n  reachable: {{cluster: b, reachable: true}}\n- at: 5m\n  reachable: {{cluster: b, reachable: false}}\njobs:\n{}{}{}",
        member("a", 2),
        member("b", 4),
        job("on-b", "team", "0s", "8m", 1, 4),
        job("one", "team", "10m", "30m", 1, 2),
        job("other", "team", "10m", "30m", 1, 2),
    );
    let r = report(&write("unreachable", &text));
    assert_eq!(outcome(&r, "on-b"), done(0, 480, "b"));
    assert_eq!(outcome(&r, "one"), done(600, 2400, "a"));
    assert_eq!(outcome(&r, "other"), done(1200, 3000, "b"));
}

#[test]
fn an_invalid_tree_in_changes_is_refused_naming_its_path() {
    let bad = "    apiVersion: scheduling.sigs.k8s.io/v1beta1
    kind: ElasticQuotaTree
    spec:
      root:
        name: root
        max: {cpu: \"8\"}
        children:
        - name: a
          min: {cpu: \"6\"}
          max: {cpu: \"5\"}
          namespaces: [team]
";
    let text = format!(
        "clusters:\n{}changes:\n- at: 1m\n  quota:\n{}- at: 2m\n  quota:\n{bad}jobs:\n{}",
        member("m", 8),
        tree("4", "    "),
        job("j", "team", "0s", "10m", 1, 1),
    );
    let file = write("invalid_tree", &text);
    let err = refused(&file);
    assert!(
        err.contains("invalid_tree.yaml: changes[1].quota: the ElasticQuotaTree is invalid"),
        "{err}"
    );
    assert!(
        err.contains(
            "error: changes[1].quota.spec.root.children[0].min[cpu]: root/a: min 6 is above max 5"
        ),
        "{err}"
    );
}

#[test]
fn a_reachable_change_naming_no_member_is_refused() {
    let base = format!("clusters:\n{}", member("m", 8));
    let err = refused(&write(
        "unknown_member",
        &format!("{base}changes:\n- at: 1m\n  reachable: {{cluster: nope, reachable: false}}\n"),
    ));
    assert!(
        err.contains("changes[0].reachable.cluster: \"nope\" is not a member (members: m)"),
        "{err}"
    );
    // A member is known from the change that adds it on, not before.
    let added = as_change(&member("late", 2));
    let err = refused(&write(
        "member_too_early",
        &format!(
            "{base}changes:\n- at: 10m\n  cluster:\n{added}- at: 5m\n  reachable: {{cluster: late, reachable: false}}\n"
        ),
    ));
    assert!(
        err.contains("changes[1].reachable.cluster: \"late\" is not a member at 5m: changes[0] adds it at 10m"),
        "{err}"
    );
}

#[test]
fn a_change_has_exactly_one_kind() {
    let base = format!("clusters:\n{}", member("m", 8));
    let err = refused(&write(
        "two_kinds",
        &format!(
            "{base}changes:\n- at: 1m\n  quota: null\n  reachable: {{cluster: m, reachable: false}}\n"
        ),
    ));
    assert!(
        err.contains("changes[0]: a change has exactly one of quota, cluster, reachable; found quota and reachable"),
        "{err}"
    );
    let err = refused(&write("no_kind", &format!("{base}changes:\n- at: 1m\n")));
    assert!(
        err.contains(
            "changes[0]: a change has exactly one of quota, cluster, reachable; found none"
        ),
        "{err}"
    );
    let err = refused(&write(
        "bad_at",
        &format!("{base}changes:\n- at: soon\n  quota: null\n"),
    ));
    assert!(err.contains("changes[0].at"), "{err}");
}

/// The example docs/sim.md shows: every outcome its comments claim.
#[test]
fn the_changes_example_runs_as_its_comments_say() {
    let r = report(&repo().join("examples/changes.yaml"));
    assert_eq!(outcome(&r, "train-4"), done(600, 4200, "member-a"));
    assert_eq!(outcome(&r, "wide"), done(1200, 4800, "member-b"));
    assert_eq!(outcome(&r, "eval"), done(3000, 3600, "member-a"));
    // 6 GPUs for 1,200 s then 14 for 3,600 s (57,600 GPU-s); held 4 x 3,600 + 7 x 3,600 +
    // 2 x 600 = 40,800 GPU-s.
    assert_eq!(r["summary"]["utilization"]["nvidia.com/gpu"], json!(70.8));
}

/// `muster what-if` refuses a scenario with scheduled changes rather than mixing its changes
/// with them.
#[test]
fn what_if_refuses_a_scenario_with_changes() {
    let out = muster(&[
        "what-if",
        "--scenario",
        "examples/changes.yaml",
        "--change",
        "remove-member=member-a",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("examples/changes.yaml: changes: muster what-if does not take a scenario with scheduled changes"), "{err}");
}
