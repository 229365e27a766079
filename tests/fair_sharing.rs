//! Fair sharing between siblings (rules A7 and F1–F5 of docs/concepts.md, issue 30) in `muster
//! sim`, the built binary as users run it: a flood from one team no longer starves its sibling,
//! under a steady overload borrowed capacity converges to the weights, and where the tree allows
//! preemption for fairness a late team takes its weighted part at once. Each test reads every job's
//! dispatch and end from the JSON report and judges the whole run, instant by instant.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn write(name: &str, text: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fair_sharing");
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, text).expect("scenario written");
    file
}

fn report(file: &Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["sim", file.to_str().expect("UTF-8"), "-o", "json"])
        .output()
        .expect("run muster");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON report")
}

/// One member of two nodes of 8 GPUs; a root lending 16 GPUs to `team-a` and `team-b` (their
/// `weights` as attributes, no min); `jobs` of one GPU each: (team, count, at seconds).
fn scenario(weights: [Option<&str>; 2], jobs: &[(&str, usize, u64)], run_s: u64) -> String {
    let mut s = String::from(
        "clusters:\n- name: m\n  nodes:\n  - name: n\n    count: 2\n    allocatable: {cpu: \"64\", memory: 256Gi, nvidia.com/gpu: \"8\", pods: \"110\"}\n\
quota:\n  apiVersion: scheduling.sigs.k8s.io/v1beta1\n  kind: ElasticQuotaTree\n  metadata: {name: elasticquotatree, namespace: kube-system}\n  spec:\n    root:\n      name: root\n      max: {nvidia.com/gpu: \"16\"}\n      children:\n",
    );
    for (team, w) in ["team-a", "team-b"].iter().zip(weights) {
        s.push_str(&format!(
            "      - name: {team}\n        namespaces: [{team}]\n"
        ));
        if let Some(w) = w {
            s.push_str(&format!(
                "        attributes: {{muster.dev/fair-sharing-weight: \"{w}\"}}\n"
            ));
        }
    }
    s.push_str("jobs:\n");
    for (team, n, at) in jobs {
        s.push_str(&jobs_yaml(team, *n, *at, run_s));
    }
    s
}

/// `n` one-GPU jobs of `team` submitted at `at` seconds, running `run_s` seconds each.
fn jobs_yaml(team: &str, n: usize, at: u64, run_s: u64) -> String {
    (0..n)
        .map(|i| format!(
            "- at: {at}s\n  runFor: {run_s}s\n  manifest:\n    apiVersion: batch/v1\n    kind: Job\n    metadata: {{name: {team}-{at}-{i}, namespace: {team}}}\n    spec:\n      template:\n        spec:\n          restartPolicy: Never\n          containers:\n          - {{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}\n"
        ))
        .collect()
}

/// Per job: (team, dispatched s, finished s).
fn runs(r: &Value) -> Vec<(String, u64, u64)> {
    r["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| {
            let name = j["name"].as_str().expect("name");
            let team = if name.contains("team-a") {
                "team-a"
            } else {
                "team-b"
            };
            (
                team.to_string(),
                j["dispatched"].as_u64().unwrap_or(u64::MAX),
                j["finished"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect()
}

/// GPUs each team runs at second `t`.
fn running(runs: &[(String, u64, u64)], t: u64) -> (u64, u64) {
    let count = |team: &str| {
        runs.iter()
            .filter(|(tm, d, f)| tm == team && *d <= t && t < *f)
            .count() as u64
    };
    (count("team-a"), count("team-b"))
}

#[test]
fn a_flood_from_one_team_no_longer_starves_its_sibling() {
    // team-a submits 160 one-GPU jobs at 0s, team-b 8 at 1s; every job runs 5 minutes on 16
    // GPUs. In queue order team-b would start only once all of team-a's had (after 50 minutes);
    // by share, it takes half of what the first wave frees.
    let file = write(
        "flood",
        &scenario([None, None], &[("team-a", 160, 0), ("team-b", 8, 1)], 300),
    );
    let r = report(&file);
    let runs = runs(&r);
    let b: Vec<u64> = runs
        .iter()
        .filter(|(t, _, _)| t == "team-b")
        .map(|(_, d, _)| *d)
        .collect();
    assert_eq!(b.len(), 8);
    let last = b.iter().max().copied().unwrap_or(u64::MAX);
    assert!(last <= 300, "team-b's last job started at {last}s: {b:?}");
    // And never more than the whole: 16 GPUs at every instant.
    for t in (0..3600).step_by(30) {
        let (a, b) = running(&runs, t);
        assert!(a + b <= 16, "{a} + {b} GPUs at {t}s");
    }
}

#[test]
fn borrowed_capacity_converges_to_the_weights() {
    // Both teams flood (200 jobs each at 0s, 5 minutes each); team-b weighs 3, team-a 1: of the
    // 16 GPUs, 4 go to team-a and 12 to team-b, wave after wave, while both still wait.
    let file = write(
        "weights",
        &scenario(
            [Some("1"), Some("3")],
            &[("team-a", 200, 0), ("team-b", 200, 0)],
            300,
        ),
    );
    let r = report(&file);
    let runs = runs(&r);
    let mut seen = 0;
    for wave in 0..16u64 {
        let t = wave * 300 + 150;
        let (a, b) = running(&runs, t);
        if a + b < 16 {
            break; // one team ran out of jobs
        }
        seen += 1;
        assert!(
            a.abs_diff(4) <= 1 && b.abs_diff(12) <= 1,
            "at {t}s team-a runs {a}, team-b {b}: not 1:3"
        );
    }
    assert!(seen >= 10, "only {seen} full waves seen");
}

#[test]
fn equal_weights_split_evenly_and_a_weight_of_one_half_takes_a_third() {
    for (weights, want) in [([None, None], (8, 8)), ([Some("500m"), None], (5, 11))] {
        let file = write(
            &format!("split-{}", weights[0].unwrap_or("1")),
            &scenario(weights, &[("team-a", 100, 0), ("team-b", 100, 0)], 300),
        );
        let runs = runs(&report(&file));
        for wave in 0..5u64 {
            let t = wave * 300 + 150;
            let (a, b) = running(&runs, t);
            assert!(
                a.abs_diff(want.0) <= 1 && b.abs_diff(want.1) <= 1,
                "weights {weights:?} at {t}s: team-a {a}, team-b {b}, want about {want:?}"
            );
        }
    }
}

/// team-a fills the 16 GPUs with jobs of an hour at 0s; team-b submits 16 jobs of 5 minutes at
/// 60s. With `preempt`, the root allows preemption for fairness.
fn late_sibling(weights: [Option<&str>; 2], preempt: bool) -> Vec<(String, u64, u64)> {
    let mut text = scenario(weights, &[("team-a", 16, 0)], 3600);
    text.push_str(&jobs_yaml("team-b", 16, 60, 300));
    if preempt {
        text = text.replace(
            "      name: root\n",
            "      name: root\n      attributes: {muster.dev/fair-sharing-preemption: LessThanOrEqualToFinalShare}\n",
        );
    }
    let name = format!("late-{}-{preempt}", weights[1].unwrap_or("1"));
    let r = report(&write(&name, &text));
    let preemptions = r["summary"]["preemptions"].as_u64().expect("preemptions");
    let runs = runs(&r);
    // Each victim is taken once: no job taken back and forth (the team-a jobs preempted are
    // exactly those that start again later).
    let again = runs
        .iter()
        .filter(|(t, d, _)| t == "team-a" && *d > 0)
        .count() as u64;
    assert_eq!(
        preemptions, again,
        "preemptions against team-a jobs started again"
    );
    runs
}

#[test]
fn preemption_for_fairness_gives_a_late_sibling_its_weighted_part_at_once() {
    // Without preemption, team-b waits for team-a's hour.
    let runs = late_sibling([None, None], false);
    for t in (60..3600).step_by(60) {
        assert_eq!(running(&runs, t), (16, 0), "at {t}s without preemption");
    }
    // With it, equal weights: team-b takes 8 GPUs at 60s, and gives them back as its jobs end.
    // Weight 3 for team-b: 12 of 16.
    for (w, want) in [(None, (8, 8)), (Some("3"), (4, 12))] {
        let runs = late_sibling([None, w], true);
        for t in (60..360).step_by(30) {
            assert_eq!(running(&runs, t), want, "weight {w:?} at {t}s");
        }
        // team-b's next wave takes the same part as the first ends; team-a has the rest.
        let (a, b) = running(&runs, 400);
        assert_eq!(a + b, 16, "weight {w:?} at 400s: {a} + {b}");
    }
}
