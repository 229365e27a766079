//! `muster sim --explain NAMESPACE/NAME` as users run it: the built binary on the embedded
//! default scenario and on scenarios under tests/data/scenarios; the structured explanation in
//! the JSON report, and the text after the table. Numbers are asserted exactly.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
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

fn ok(args: &[&str]) -> String {
    let out = muster(args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "muster {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `muster sim ARGS -o json`: the explanations of the report.
fn explanations(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["sim"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let text = ok(&all);
    let r: Value = serde_json::from_str(&text).expect("JSON report");
    r["explanations"]
        .as_array()
        .unwrap_or_else(|| panic!("no explanations in {r:#}"))
        .clone()
}

/// The explanation of `job` taken at `moment`.
fn at<'a>(ex: &'a [Value], job: &str, moment: &str) -> &'a Value {
    ex.iter()
        .find(|e| e["job"] == job && e["moment"] == moment)
        .unwrap_or_else(|| panic!("no {moment} explanation of {job} in {ex:#?}"))
}

fn text(e: &Value) -> &str {
    e["text"].as_str().expect("text")
}

fn cluster<'a>(e: &'a Value, name: &str) -> &'a Value {
    e["explanation"]["status"]["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .find(|c| c["cluster"] == name)
        .unwrap_or_else(|| panic!("no cluster {name} in {e:#}"))
}

fn quota_row<'a>(e: &'a Value, node: &str, res: &str) -> &'a Value {
    e["explanation"]["status"]["quota"]
        .as_array()
        .expect("quota rows")
        .iter()
        .find(|r| r["node"] == node && r["resource"] == res)
        .unwrap_or_else(|| panic!("no quota row {node} {res} in {e:#}"))
}

const GPU_SHORT: &str = "tests/data/scenarios/explain_gpu_short.yaml";
const QUOTA: &str = "tests/data/scenarios/explain_quota.yaml";

/// (a) Per-node GPUs short: the resource, one pod's need and the best node's free amount, per
/// cluster; then where it went once the filler ended.
#[test]
fn per_node_gpu_shortage_per_cluster() {
    let ex = explanations(&[GPU_SHORT, "--explain", "research/train-3gpu"]);
    let moments: Vec<(&str, u64)> = ex
        .iter()
        .map(|e| (e["moment"].as_str().unwrap(), e["at"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        moments,
        [("waiting", 60), ("dispatched", 1800), ("end", 2400)]
    );

    let w = at(&ex, "research/train-3gpu", "waiting");
    assert_eq!(w["explanation"]["status"]["state"], "Pending");
    assert_eq!(w["explanation"]["status"]["ahead"], 0);
    for (c, free, node) in [
        ("member-a", "2", "a"),
        ("member-b", "2", "b-0"),
        ("member-c", "0", "c"),
    ] {
        let fit = &cluster(w, c)["fit"];
        assert_eq!(fit["result"], "NoFit", "{c}: {fit}");
        let comps = fit["components"].as_array().expect("components");
        // The master (cpu only) fits on its own; the workers do not.
        let master = comps
            .iter()
            .find(|x| x["component"] == "master")
            .expect("master");
        assert!(master["problem"].is_null(), "{master}");
        let worker = comps
            .iter()
            .find(|x| x["component"] == "worker")
            .expect("worker");
        assert_eq!(worker["pods"], 2);
        assert_eq!(
            worker["per_pod"],
            json!({"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "3"})
        );
        assert_eq!(
            worker["problem"],
            json!({"kind": "Short", "short": [
                {"resource": "nvidia.com/gpu", "need": "3", "best_free": free, "node": node}]}),
            "{c}"
        );
    }
    let t = text(w);
    assert!(
        t.starts_with(
            "research/train-3gpu: waiting in queue research (priority 0, first in line).\n"
        ),
        "{t}"
    );
    for line in [
        "  member-a: worker: each pod needs nvidia.com/gpu 3 on one node; the most free on any node is 2 (node a)\n",
        "  member-b: worker: each pod needs nvidia.com/gpu 3 on one node; the most free on any node is 2 (node b-0)\n",
        "  member-c: worker: each pod needs nvidia.com/gpu 3 on one node; the most free on any node is 0 (node c)\n",
    ] {
        assert!(t.contains(line), "missing {line:?} in\n{t}");
    }
    let summary = w["summary"].as_str().unwrap();
    assert!(summary.len() <= 200, "{summary}");
    assert!(summary.starts_with("waiting: no member cluster fits it now: member-a: worker: each pod needs nvidia.com/gpu 3"), "{summary}");

    let d = at(&ex, "research/train-3gpu", "dispatched");
    assert_eq!(d["explanation"]["status"]["state"], "Admitted");
    assert_eq!(d["explanation"]["status"]["cluster"], "member-c");
    assert_eq!(d["explanation"]["status"]["nodes"], json!({"c": 3}));
    assert_eq!(
        text(at(&ex, "research/train-3gpu", "end")),
        "research/train-3gpu: finished.\n"
    );
}

/// (b) Blocked by quota, in the default scenario: platform's `kube-queue/max-jobs: 1` is taken by
/// eval-first; the tree node, resource, usage, request and max are named, and the other levels.
#[test]
fn quota_block_in_the_default_scenario() {
    let ex = explanations(&["--explain", "platform/eval-normal"]);
    let w = at(&ex, "platform/eval-normal", "waiting");
    assert_eq!(w["at"], 60);
    let row = quota_row(w, "root/platform", "kube-queue/max-jobs");
    assert_eq!(
        row,
        &json!({"node": "root/platform", "resource": "kube-queue/max-jobs", "used": "1",
                "request": "1", "min": "0", "max": "1", "fits": false, "borrows": true})
    );
    let gpu = quota_row(w, "root/platform", "nvidia.com/gpu");
    assert_eq!(
        (
            &gpu["used"],
            &gpu["min"],
            &gpu["max"],
            &gpu["fits"],
            &gpu["borrows"]
        ),
        (
            &json!("2"),
            &json!("4"),
            &json!("8"),
            &json!(true),
            &json!(false)
        )
    );
    // At the root: eval-first (2 x 1 cpu, 2Gi, 1 GPU), train-big and train-small are charged.
    let cpu = quota_row(w, "root", "cpu");
    assert_eq!(
        (&cpu["used"], &cpu["request"], &cpu["max"]),
        (&json!("2450m"), &json!("1"), &json!("100"))
    );
    let mem = quota_row(w, "root", "memory");
    assert_eq!(
        (&mem["used"], &mem["request"], &mem["max"]),
        (&json!("4384Mi"), &json!("2Gi"), &json!("400Gi"))
    );
    let t = text(w);
    for line in [
        "platform/eval-normal: waiting in queue root/platform (priority 100, first in line).\n",
        "  quota root/platform: kube-queue/max-jobs 1 in use + 1 requested = 2, above max 1\n",
        "  root/platform  kube-queue/max-jobs  1 + 1 = 2 of max 1: OVER MAX by 1\n",
        "  root/platform  nvidia.com/gpu       2 + 1 = 3 of max 8, min 4: ok, within min\n",
        "  root           cpu                  2450m + 1 = 3450m of max 100: ok\n",
        "  root           memory               4384Mi + 2Gi = 6432Mi of max 400Gi: ok\n",
        "  root           nvidia.com/gpu       10 + 1 = 11 of max 16: ok\n",
        "  not limited on its path: pods\n",
        // Quota aside, member-b has a free GPU.
        "  member-b: fits now (b-0: 1 pod)\n",
    ] {
        assert!(t.contains(line), "missing {line:?} in\n{t}");
    }
    assert_eq!(
        w["summary"],
        "waiting: quota root/platform: kube-queue/max-jobs 1 in use + 1 requested = 2, above max 1"
    );
    // eval-urgent (priority 1000) overtook it at 15m; it ran at 25m on member-a.
    let d = at(&ex, "platform/eval-normal", "dispatched");
    assert_eq!(d["at"], 1500);
    assert_eq!(d["explanation"]["status"]["cluster"], "member-a");
}

/// (b) Blocked at the root while its own leaf has room.
#[test]
fn quota_block_at_the_root_with_leaf_within_max() {
    let ex = explanations(&[QUOTA, "--explain", "team-a/a-more"]);
    let w = at(&ex, "team-a/a-more", "waiting");
    let root = quota_row(w, "root", "nvidia.com/gpu");
    assert_eq!(
        (&root["used"], &root["request"], &root["max"], &root["fits"]),
        (&json!("8"), &json!("1"), &json!("8"), &json!(false))
    );
    let leaf = quota_row(w, "root/team-a", "nvidia.com/gpu");
    assert_eq!(
        (
            &leaf["used"],
            &leaf["request"],
            &leaf["min"],
            &leaf["max"],
            &leaf["fits"],
            &leaf["borrows"]
        ),
        (
            &json!("3"),
            &json!("1"),
            &json!("2"),
            &json!("4"),
            &json!(true),
            &json!(true)
        )
    );
    let t = text(w);
    for line in [
        "  root/team-a  nvidia.com/gpu  3 + 1 = 4 of max 4, min 2: ok, borrows 2 above min\n",
        "  root         nvidia.com/gpu  8 + 1 = 9 of max 8: OVER MAX by 1\n",
    ] {
        assert!(t.contains(line), "missing {line:?} in\n{t}");
    }
    assert_eq!(at(&ex, "team-a/a-more", "dispatched")["at"], 1200);
}

/// (c) Above a max: inadmissible, with the numbers.
#[test]
fn inadmissible_above_max() {
    let ex = explanations(&[QUOTA, "--explain", "team-a/a-huge"]);
    let w = at(&ex, "team-a/a-huge", "waiting");
    assert_eq!(w["at"], 60);
    let st = &w["explanation"]["status"];
    assert_eq!(st["state"], "Inadmissible");
    assert_eq!(
        st["quota"],
        json!({"node": "root/team-a", "resource": "nvidia.com/gpu", "request": "6", "max": "4"})
    );
    assert_eq!(
        text(w),
        "team-a/a-huge: can never run as written (inadmissible).\n\
         \x20 requests nvidia.com/gpu 6 but quota root/team-a allows at most 4: can never be admitted\n\
         \x20 quota root/team-a: this job alone asks nvidia.com/gpu 6, above its max 4 by 2; no usage can make room\n"
    );
    assert!(w["summary"].as_str().unwrap().starts_with(
        "can never run: requests nvidia.com/gpu 6 but quota root/team-a allows at most 4"
    ));
    // Never dispatched; the end says the same.
    assert!(ex.iter().all(|e| e["moment"] != "dispatched"));
    assert_eq!(text(at(&ex, "team-a/a-huge", "end")), text(w));
}

/// (c) Never fits any allowed member, even empty: each member's numbers, the excluded one named.
#[test]
fn inadmissible_no_member_could_hold_it() {
    let ex = explanations(&["--explain", "research/train-wide"]);
    let w = at(&ex, "research/train-wide", "waiting");
    assert_eq!(w["at"], 20);
    assert_eq!(w["explanation"]["status"]["state"], "Inadmissible");
    assert!(w["explanation"]["status"]["quota"].is_null());
    let c = cluster(w, "member-c");
    assert_eq!(
        (&c["excluded"], &c["fit"]["result"]),
        (&json!(true), &json!("NotTried"))
    );
    let t = text(w);
    for line in [
        "Member clusters, even with nothing else running:\n",
        "  member-a: worker: each pod needs nvidia.com/gpu 4 on one node; the most free on any node is 2 (node a)\n",
        "  member-b: worker: each pod needs nvidia.com/gpu 4 on one node; the most free on any node is 2 (node b-0)\n",
        "  member-c: excluded by the job's cluster restriction\n",
    ] {
        assert!(t.contains(line), "missing {line:?} in\n{t}");
    }
}

/// (d) Admitted: the cluster and the planned nodes; the table output shows it after the table.
#[test]
fn admitted_names_its_cluster() {
    let ex = explanations(&["--explain", "research/train-big"]);
    let d = at(&ex, "research/train-big", "dispatched");
    assert_eq!(d["at"], 0);
    assert_eq!(
        d["explanation"]["status"],
        json!({"state": "Admitted", "cluster": "member-c", "placement": "gates", "nodes": {"c": 3},
            "waited": null})
    );
    assert_eq!(d["summary"], "admitted to member-c (c: 3 pods)");
    assert!(
        ex.iter().all(|e| e["moment"] != "waiting"),
        "never waited: {ex:#?}"
    );

    let table = ok(&["sim", "--explain", "research/train-big"]);
    assert!(
        table.contains(
            "\n== research/train-big at 0s (dispatched)\n\
             research/train-big: admitted to member-c (queue root/research, priority 0).\n\
             \x20 planned nodes: c: 3 pods\n\
             \x20 placement: per pod (scheduling gates)\n\
             \n== research/train-big at 2100s (end)\n\
             research/train-big: finished.\n"
        ),
        "{table}"
    );
}

/// StrictFIFO: the job behind the head names it and the head's own reason.
#[test]
fn strict_fifo_names_the_head() {
    let ex = explanations(&[
        "tests/data/scenarios/strict_fifo.yaml",
        "--explain",
        "queue/small",
    ]);
    let w = at(&ex, "queue/small", "waiting");
    assert_eq!(w["at"], 120);
    let st = &w["explanation"]["status"];
    assert_eq!(st["ahead"], 1);
    assert_eq!(st["blocked_by"]["job"], "queue/big");
    assert_eq!(
        w["summary"],
        "waiting behind queue/big in StrictFIFO queue root/queue; by itself it is within quota and fits now on member"
    );
    assert!(text(w).contains(
        "  queue/big waits: no cluster fits: member: job needs nvidia.com/gpu 4 on one node; the most free on any node is 2\n"
    ), "{}", text(w));
}

#[test]
fn repeated_flags_unknown_jobs_and_rejected_jobs() {
    // Unknown job: exit 2, named.
    let out = muster(&["sim", "--explain", "research/nope"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--explain research/nope"), "{err}");
    // A rejected job: the simulator's reason, no structured explanation.
    let ex = explanations(&[
        "--explain",
        "research/typo",
        "--explain",
        "research/train-big",
    ]);
    let typo = at(&ex, "research/typo", "end");
    assert!(typo["explanation"].is_null());
    assert!(
        text(typo).starts_with("research/typo: rejected: spec.pytorchReplicaSpecs.Worker"),
        "{}",
        text(typo)
    );
    assert_eq!(at(&ex, "research/train-big", "end")["at"], 2100);
    // Without --explain, the report has no explanations key (unchanged output).
    let r: Value = serde_json::from_str(&ok(&["sim", "-o", "json"])).expect("JSON");
    assert!(r.get("explanations").is_none());
}
