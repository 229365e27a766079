//! `muster sim` as users run it: the built binary on the embedded default scenario and on the
//! scenario files under tests/data/scenarios, its JSON and table output, exit codes and errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn scenario(name: &str) -> PathBuf {
    repo().join("tests/data/scenarios").join(name)
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

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `muster sim ARGS -o json`, asserting exit code 0, and returns the report.
fn sim_json(args: &[&str]) -> Value {
    let mut all = vec!["sim"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let out = muster(&all);
    assert_eq!(
        out.status.code(),
        Some(0),
        "muster {all:?} failed:\n{}",
        stderr(&out)
    );
    serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("muster {all:?} printed no JSON ({e}):\n{}", stdout(&out)))
}

fn job<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["jobs"]
        .as_array()
        .expect("jobs array")
        .iter()
        .find(|j| j["name"] == name)
        .unwrap_or_else(|| panic!("no job {name} in {report:#}"))
}

fn secs(v: &Value) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("expected a number of seconds, found {v}"))
}

fn reason(j: &Value) -> &str {
    j["reason"].as_str().unwrap_or("")
}

/// The placement's pod count (`{node: pods}`).
fn pods(j: &Value) -> u64 {
    j["placement"]
        .as_object()
        .expect("placement object")
        .values()
        .map(|v| v.as_u64().expect("pod count"))
        .sum()
}

/// Every "Must show" point of the default scenario.
fn check_default(r: &Value) {
    let jobs = r["jobs"].as_array().expect("jobs");
    assert_eq!(jobs.len(), 7);
    for j in jobs {
        for key in [
            "namespace",
            "name",
            "kind",
            "queue",
            "submitted",
            "dispatched",
            "finished",
            "cluster",
            "placement",
            "preemptions",
            "reason",
        ] {
            assert!(j.get(key).is_some(), "job has no {key}: {j}");
        }
    }

    // A cpu master and 2 workers x 3 GPU: member-c, the only node with 3 free GPUs; all 3 pods.
    let big = job(r, "train-big");
    assert_eq!(big["kind"], "PyTorchJob");
    assert_eq!(big["cluster"], "member-c", "{big}");
    assert_eq!(big["placement"], serde_json::json!({"c": 3}), "{big}");
    assert_eq!(secs(&big["dispatched"]), 0.0);
    assert_eq!(secs(&big["finished"]), 1800.0);
    assert_eq!(big["preemptions"], 0);

    // 2 workers x 1 GPU (+ master): the whole job in one cluster.
    let small = job(r, "train-small");
    let cluster = small["cluster"].as_str().expect("train-small dispatched");
    assert!(cluster.starts_with("member-"), "{small}");
    assert_eq!(pods(small), 3, "all 3 pods placed: {small}");
    let node_prefix = &cluster["member-".len()..];
    for node in small["placement"].as_object().unwrap().keys() {
        assert!(
            node.starts_with(node_prefix),
            "node {node} is not in {cluster}: {small}"
        );
    }
    assert_eq!(
        secs(&small["finished"]) - secs(&small["dispatched"]),
        1200.0
    );

    // 2 x 4 GPU restricted to members with 2-GPU nodes: inadmissible, and says why.
    let wide = job(r, "train-wide");
    assert_eq!(wide["state"], "Inadmissible", "{wide}");
    assert!(wide["dispatched"].is_null() && wide["cluster"].is_null());
    assert!(
        reason(wide).contains("nvidia.com/gpu 4 on one node; the most free on any node is 2"),
        "{wide}"
    );
    assert!(reason(wide).contains("member-a") && reason(wide).contains("member-b"));

    // platform has kube-queue/max-jobs 1: one after another, in priority order.
    let mut platform: Vec<&Value> = jobs
        .iter()
        .filter(|j| j["namespace"] == "platform")
        .collect();
    assert_eq!(platform.len(), 3);
    for j in &platform {
        assert_eq!(j["state"], "Finished", "{j}");
    }
    platform.sort_by(|a, b| secs(&a["dispatched"]).total_cmp(&secs(&b["dispatched"])));
    let order: Vec<&str> = platform
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["eval-first", "eval-urgent", "eval-normal"]);
    for w in platform.windows(2) {
        assert!(
            secs(&w[1]["dispatched"]) >= secs(&w[0]["finished"]),
            "{} dispatched at {} before {} finished at {}",
            w[1]["name"],
            w[1]["dispatched"],
            w[0]["name"],
            w[0]["finished"]
        );
    }
    // After the first (alone in its queue at 0s), higher priority first.
    for w in platform[1..].windows(2) {
        assert!(
            w[0]["priority"].as_i64() > w[1]["priority"].as_i64(),
            "{} (priority {}) before {} (priority {})",
            w[0]["name"],
            w[0]["priority"],
            w[1]["name"],
            w[1]["priority"]
        );
    }
    assert_eq!(job(r, "eval-urgent")["priority"], 1000);
    assert_eq!(job(r, "eval-normal")["priority"], 100);

    // A malformed job is rejected with the field named; the run goes on.
    let typo = job(r, "typo");
    assert_eq!(typo["state"], "Rejected", "{typo}");
    assert!(typo["dispatched"].is_null());
    assert!(
        reason(typo).starts_with(
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits[nvidia.com/gpu]"
        ),
        "{typo}"
    );
    assert!(reason(typo).contains(r#""two""#), "{typo}");

    let s = &r["summary"];
    assert_eq!(s["jobs"], 7);
    assert_eq!(s["finished"], 5);
    assert_eq!(s["inadmissible"], 1);
    assert_eq!(s["rejected"], 1);
    assert_eq!(s["dispatches"], 5);
}

#[test]
fn default_scenario_embedded() {
    check_default(&sim_json(&[]));
}

#[test]
fn default_scenario_from_file() {
    let from_file = sim_json(&["examples/default.yaml"]);
    check_default(&from_file);
    assert_eq!(
        from_file,
        sim_json(&[]),
        "the embedded default is examples/default.yaml"
    );
}

#[test]
fn default_scenario_table() {
    let out = muster(&["sim"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "JOB", "QUEUE", "CLUSTER", "WAIT", "EST.WAIT", "STATE", "REASON"
        ]
    );
    let row = lines
        .iter()
        .find(|l| l.starts_with("research/train-big "))
        .expect("a line for train-big");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[..6],
        [
            "research/train-big",
            "root/research",
            "member-c",
            "0s",
            "0s",
            "Finished"
        ]
    );
    // Told at submission it would wait until eval-first ends (840 s); eval-urgent, submitted
    // later with a higher priority, went first.
    let normal = lines
        .iter()
        .find(|l| l.starts_with("platform/eval-normal "))
        .expect("a line for eval-normal");
    let cells: Vec<&str> = normal.split_whitespace().collect();
    assert_eq!(cells[3..6], ["1440s", "840s", "Finished"], "{normal}");
    let wide = lines
        .iter()
        .find(|l| l.starts_with("research/train-wide "))
        .expect("a line for train-wide");
    assert!(wide.contains("Inadmissible") && wide.contains("the most free on any node is 2"));
    assert!(wide.contains(" never "), "{wide}");
    assert!(
        text.contains(
            "7 jobs: 5 finished, 0 running, 0 pending, 1 inadmissible, 1 rejected, 0 ignored; 5 dispatches, 0 preemptions"
        ),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("utilization: ") && l.contains("nvidia.com/gpu")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("wait root/platform: 3 jobs, p50 ")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("wait root/research: 2 jobs, p50 ")),
        "{text}"
    );
}

#[test]
fn gang_wider_than_any_node_is_never_dispatched() {
    let r = sim_json(&[scenario("two_gpu_nodes.yaml").to_str().unwrap()]);
    let wide = job(&r, "wide");
    assert_eq!(wide["state"], "Inadmissible", "{wide}");
    assert!(wide["dispatched"].is_null(), "{wide}");
    assert!(wide["cluster"].is_null(), "{wide}");
    assert_eq!(wide["placement"], serde_json::json!({}));
    for m in ["member-a", "member-b"] {
        assert!(
            reason(wide).contains(&format!(
                "{m}: worker needs nvidia.com/gpu 4 on one node; the most free on any node is 2"
            )),
            "{wide}"
        );
    }
    // The 6 free GPUs of member-b never count as a fit: the other job still runs.
    let narrow = job(&r, "narrow");
    assert_eq!(narrow["state"], "Finished", "{narrow}");
    assert_eq!(pods(narrow), 2);
    assert_eq!(r["summary"]["dispatches"], 1);
}

#[test]
fn quota_reclaim_preempts_a_borrower() {
    let r = sim_json(&[scenario("reclaim.yaml").to_str().unwrap()]);
    let first = job(&r, "a-first");
    let borrower = job(&r, "a-borrower");
    let guaranteed = job(&r, "b-guaranteed");
    // team-a runs 8 GPUs (4 above its min of 4) until team-b's job arrives at 10m.
    assert_eq!(secs(&first["dispatched"]), 0.0, "{first}");
    assert_eq!(first["preemptions"], 0, "{first}");
    assert_eq!(secs(&first["finished"]), 3600.0, "{first}");
    // team-b's job is within team-b's min: it dispatches the moment it arrives.
    assert_eq!(secs(&guaranteed["submitted"]), 600.0);
    assert_eq!(secs(&guaranteed["dispatched"]), 600.0, "{guaranteed}");
    assert_eq!(guaranteed["state"], "Finished", "{guaranteed}");
    // The most recently admitted borrower was preempted, requeued, and later ran its full runFor.
    assert!(borrower["preemptions"].as_u64() >= Some(1), "{borrower}");
    assert_eq!(borrower["state"], "Finished", "{borrower}");
    assert!(secs(&borrower["dispatched"]) > 600.0, "{borrower}");
    assert_eq!(
        secs(&borrower["finished"]) - secs(&borrower["dispatched"]),
        3600.0,
        "{borrower}"
    );
    // It went back to its original place in team-a's queue, ahead of a job submitted later.
    let later = job(&r, "a-later");
    assert_eq!(later["state"], "Finished", "{later}");
    assert!(
        secs(&later["dispatched"]) > secs(&borrower["dispatched"]),
        "the preempted job lost its place: {r:#}"
    );
    assert!(r["summary"]["preemptions"].as_u64() >= Some(1));
    assert_eq!(r["summary"]["dispatches"], 5);
}

#[test]
fn strict_fifo_head_blocks_the_queue() {
    let r = sim_json(&[scenario("strict_fifo.yaml").to_str().unwrap()]);
    let big = job(&r, "big");
    let small = job(&r, "small");
    // big waits for the filler (done at 10m); small, behind it, waits for big.
    assert_eq!(secs(&big["dispatched"]), 600.0, "{big}");
    assert!(
        secs(&small["dispatched"]) >= secs(&big["dispatched"]),
        "small ran before the head of its StrictFIFO queue: {small}"
    );
    assert_eq!(small["state"], "Finished");
}

#[test]
fn best_effort_fifo_lets_small_jobs_pass() {
    let r = sim_json(&[scenario("best_effort_fifo.yaml").to_str().unwrap()]);
    let big = job(&r, "big");
    let small = job(&r, "small");
    assert_eq!(secs(&small["dispatched"]), 120.0, "{small}");
    assert!(
        secs(&small["dispatched"]) < secs(&big["dispatched"]),
        "{r:#}"
    );
    assert_eq!(secs(&big["dispatched"]), 600.0, "{big}");
}

// ----- errors -----------------------------------------------------------------------------------

#[test]
fn missing_file_is_exit_2_naming_it() {
    let out = muster(&["sim", "tests/data/scenarios/does-not-exist.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("tests/data/scenarios/does-not-exist.yaml"),
        "{err}"
    );
    assert!(stdout(&out).is_empty());
}

/// `muster sim --no-estimates` with its stdout going to `out`.
fn sim_into(out: impl Into<std::process::Stdio>) -> Output {
    Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["sim", "--no-estimates"])
        .current_dir(repo())
        .stdout(out)
        .output()
        .expect("run muster")
}

/// `muster sim | head`: the reader has gone before muster writes (the pipe's read end is closed
/// before it starts, so every write fails). It ends quietly with status 0; `print!` panicked
/// there (status 101).
#[test]
fn a_reader_that_has_gone_ends_the_output_quietly() {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = sim_into(writer);
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
}

/// Any other error writing the report (here a full disk) is reported and ends with status 1.
#[test]
fn a_failed_write_of_the_report_is_an_error() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let out = sim_into(full);
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("error: writing to stdout"), "{err}");
    assert_eq!(out.status.code(), Some(1), "{err}");
}

#[test]
fn malformed_yaml_is_exit_2_naming_file_and_place() {
    let out = muster(&["sim", "tests/data/scenarios/malformed.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("tests/data/scenarios/malformed.yaml"), "{err}");
    assert!(err.contains("clusters[0].nodes[0]"), "{err}");
    assert!(err.contains("line 4"), "{err}");
}

#[test]
fn wrong_field_type_is_exit_2_naming_the_field() {
    let out = muster(&["sim", "tests/data/scenarios/bad_runfor.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("tests/data/scenarios/bad_runfor.yaml"),
        "{err}"
    );
    assert!(err.contains("jobs[0].runFor"), "{err}");
    assert!(err.contains(r#""abc" is not a duration"#), "{err}");

    let out = muster(&["sim", "tests/data/scenarios/bad_allocatable.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("tests/data/scenarios/bad_allocatable.yaml"),
        "{err}"
    );
    assert!(
        err.contains("clusters[0].nodes[0].allocatable.cpu"),
        "{err}"
    );
    assert!(err.contains(r#""four" is not a quantity"#), "{err}");
}

#[test]
fn unknown_field_is_exit_2_naming_it() {
    let dir = std::env::temp_dir().join(format!("muster-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("typo.yaml");
    std::fs::write(
        &file,
        "clusters:\n- name: m\n  nodes:\n  - name: n\n    alocatable: {cpu: \"4\"}\n",
    )
    .unwrap();
    let out = muster(&["sim", file.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("typo.yaml"), "{err}");
    assert!(err.contains("alocatable"), "{err}");
    assert!(err.contains("clusters[0].nodes[0]"), "{err}");
}

#[test]
fn invalid_quota_tree_is_exit_2_listing_every_problem() {
    let out = muster(&["sim", "tests/data/scenarios/invalid_quota.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).is_empty());
    let err = stderr(&out);
    assert!(
        err.contains("tests/data/scenarios/invalid_quota.yaml"),
        "{err}"
    );
    for line in [
        "error: spec.root.children[0].min[cpu]: root/a: min 6 is above max 5",
        r#"error: spec.root.children[1].max[cpu]: "ten" is not a quantity"#,
        r#"error: spec.root.children[1].namespaces: namespace "shared" is in both root/a and root/b"#,
        r#"error: spec.root.children[2].name: duplicate name "a" (also at spec.root.children[0])"#,
        "error: spec.root.min[cpu]: root: children's min sum to 6, above this node's min 4",
        "warning: spec.root.children[2].max[cpu]: root/a: max 16 is above its parent's max 8",
    ] {
        assert!(err.contains(line), "missing {line:?} in:\n{err}");
    }
}

#[test]
fn bad_arguments_do_not_panic() {
    let out = muster(&["sim", "-o", "xml"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("xml"));
    let out = muster(&["sim", "tests/data/scenarios"]);
    assert_eq!(out.status.code(), Some(2), "a directory is not a scenario");
    assert!(stderr(&out).contains("tests/data/scenarios"));
}

#[test]
fn jobs_that_can_never_run_block_nobody() {
    let r = sim_json(&[scenario("never_admissible.yaml").to_str().unwrap()]);
    let too_big = job(&r, "too-big");
    assert_eq!(too_big["state"], "Inadmissible", "{too_big}");
    assert_eq!(
        reason(too_big),
        "requests nvidia.com/gpu 4 but quota root/team allows at most 2: can never be admitted"
    );
    let no_class = job(&r, "no-class");
    assert_eq!(no_class["state"], "Inadmissible", "{no_class}");
    assert!(reason(no_class).contains(r#"PriorityClass "urgent" does not exist"#));
    let elsewhere = job(&r, "elsewhere");
    assert_eq!(elsewhere["state"], "Ignored", "{elsewhere}");
    assert!(reason(elsewhere).contains("not-in-tree"), "{elsewhere}");
    assert!(elsewhere["dispatched"].is_null());
    // Even in a StrictFIFO leaf, the job behind them runs at once.
    let small = job(&r, "small");
    assert_eq!(secs(&small["dispatched"]), 0.0, "{small}");
    assert_eq!(r["summary"]["inadmissible"], 2);
    assert_eq!(r["summary"]["ignored"], 1);
}

/// A member in pinned mode gets robust plans only: the job that fits there only by sharing a
/// node waits for the member that places per pod; one that needs no sharing runs there.
#[test]
fn pinned_members_get_robust_plans_only() {
    let r = sim_json(&[scenario("pinned.yaml").to_str().unwrap()]);
    let first = job(&r, "shared-1");
    assert_eq!(first["cluster"], "member-g", "{first}");
    let second = job(&r, "shared-2");
    assert_eq!(second["cluster"], "member-g", "{second}");
    assert_eq!(secs(&second["dispatched"]), 600.0, "{second}");
    assert!(
        reason(second).contains(
            "member-p: places pods by node set only (pinned mode): no plan keeps master and \
             worker on separate nodes (they fit together only by sharing a node)"
        ),
        "{second}"
    );
    let apart = job(&r, "apart");
    assert_eq!(apart["cluster"], "member-p", "{apart}");
    assert_eq!(
        apart["placement"],
        serde_json::json!({"p-0": 1, "p-1": 1}),
        "{apart}"
    );
}

#[test]
fn unknown_placement_mode_is_exit_2_naming_the_field() {
    let dir = std::env::temp_dir().join(format!("muster-sim-mode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("mode.yaml");
    std::fs::write(&file, "clusters:\n- name: m\n  placement: sometimes\n").unwrap();
    let out = muster(&["sim", file.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("clusters[0].placement"), "{err}");
    assert!(err.contains("gates") && err.contains("pinned"), "{err}");
}
