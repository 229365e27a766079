//! Metrics as operators see them: `muster sim --metrics` on a scenario with known numbers, the
//! exposition parsed and checked value by value, and the Grafana dashboard's queries checked
//! against the metrics muster really exports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use muster::metrics::{DispatchFailure, Metrics};
use muster::sim;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn scenario_path() -> PathBuf {
    repo().join("tests/data/scenarios/metrics.yaml")
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

/// A scratch file under the target directory, unique per test.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("metrics-tests");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir.join(name)
}

// ----- a small parser of the text exposition format ---------------------------------------------

#[derive(Clone, Debug, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

#[derive(Debug, Default)]
struct Exposition {
    samples: Vec<Sample>,
    /// Family name → type (`counter`, `gauge`, `histogram`).
    types: BTreeMap<String, String>,
    help: BTreeSet<String>,
}

fn parse_exposition(text: &str) -> Exposition {
    let mut e = Exposition::default();
    for (n, line) in text.lines().enumerate() {
        let at = |msg: &str| format!("line {}: {msg}: {line:?}", n + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest
                .split_once(' ')
                .unwrap_or_else(|| panic!("{}", at("TYPE")));
            e.types.insert(name.to_string(), ty.to_string());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest
                .split_once(' ')
                .unwrap_or_else(|| panic!("{}", at("HELP")));
            assert!(!help.trim().is_empty(), "{}", at("empty help"));
            e.help.insert(name.to_string());
            continue;
        }
        assert!(!line.starts_with('#'), "{}", at("unknown comment"));
        let name_end = line
            .find(['{', ' '])
            .unwrap_or_else(|| panic!("{}", at("no value")));
        let name = &line[..name_end];
        let mut labels = BTreeMap::new();
        let mut rest = &line[name_end..];
        if let Some(body) = rest.strip_prefix('{') {
            let mut chars = body.char_indices().peekable();
            let end;
            loop {
                // label name
                let mut key = String::new();
                while let Some(&(_, c)) = chars.peek() {
                    if c == '=' || c == '}' {
                        break;
                    }
                    key.push(c);
                    chars.next();
                }
                match chars.next() {
                    Some((i, '}')) => {
                        assert!(key.is_empty(), "{}", at("label without value"));
                        end = i;
                        break;
                    }
                    Some((_, '=')) => {}
                    _ => panic!("{}", at("unterminated labels")),
                }
                assert_eq!(
                    chars.next().map(|x| x.1),
                    Some('"'),
                    "{}",
                    at("label value")
                );
                let mut value = String::new();
                loop {
                    match chars.next() {
                        Some((_, '\\')) => match chars.next() {
                            Some((_, 'n')) => value.push('\n'),
                            Some((_, c)) => value.push(c),
                            None => panic!("{}", at("dangling escape")),
                        },
                        Some((_, '"')) => break,
                        Some((_, c)) => value.push(c),
                        None => panic!("{}", at("unterminated label value")),
                    }
                }
                labels.insert(key, value);
                if let Some(&(_, ',')) = chars.peek() {
                    chars.next();
                }
            }
            rest = &body[end + 1..];
        }
        let value = rest.trim();
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("{}", at("value"))),
        };
        e.samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    e
}

impl Exposition {
    /// The value of the sample with exactly these labels.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels == want)
            .map(|s| s.value)
    }

    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or_else(|| {
            panic!(
                "no sample {name}{labels:?}; samples of {name}: {:#?}",
                self.of(name)
            )
        })
    }

    fn of(&self, name: &str) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.name == name).collect()
    }

    /// Sum over samples of `name` whose labels include `labels`.
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.of(name)
            .into_iter()
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
            .sum()
    }

    /// Metric names a query may use: samples' names, and every series name of each family
    /// (a histogram's `_bucket`, `_sum`, `_count`), with the label names each carries.
    fn names(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (family, ty) in &self.types {
            let series: Vec<String> = if ty == "histogram" {
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .map(|s| format!("{family}{s}"))
                    .collect()
            } else {
                vec![family.clone()]
            };
            for s in series {
                out.entry(s).or_default();
            }
        }
        for s in &self.samples {
            out.entry(s.name.clone())
                .or_default()
                .extend(s.labels.keys().cloned());
        }
        out
    }
}

#[test]
fn the_parser_reads_labels_escapes_and_special_values() {
    let e = parse_exposition(
        "# HELP x_total A counter.\n# TYPE x_total counter\nx_total{a=\"1\",b=\"q\\\"u\\\\o\\nte\"} 3\ny 2.5\nz_bucket{le=\"+Inf\"} 7\nw -Inf\n",
    );
    assert_eq!(e.value("x_total", &[("a", "1"), ("b", "q\"u\\o\nte")]), 3.0);
    assert_eq!(e.value("y", &[]), 2.5);
    assert_eq!(e.value("z_bucket", &[("le", "+Inf")]), 7.0);
    assert_eq!(e.value("w", &[]), f64::NEG_INFINITY);
    assert_eq!(e.types.get("x_total").map(String::as_str), Some("counter"));
    assert_eq!(
        e.get("x_total", &[("a", "1")]),
        None,
        "labels must match exactly"
    );
}

// ----- the simulator's exposition -----------------------------------------------------------------

/// Runs `muster sim metrics.yaml --metrics FILE [--metrics-at AT] -o json`; the exposition and
/// the report.
fn sim_metrics(at: Option<&str>, file: &str) -> (Exposition, String, Value) {
    let path = scratch(file);
    let _ = std::fs::remove_file(&path);
    let scenario = scenario_path();
    let mut args = vec![
        "sim",
        scenario.to_str().expect("utf-8 path"),
        "--metrics",
        path.to_str().expect("utf-8 path"),
        "-o",
        "json",
    ];
    if let Some(at) = at {
        args.extend_from_slice(&["--metrics-at", at]);
    }
    let out = muster(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "muster {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("the report is still printed");
    let text = std::fs::read_to_string(&path).expect("exposition written");
    (parse_exposition(&text), text, report)
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

#[test]
fn at_10m_gauges_show_queues_quota_and_members() {
    let (e, _, _) = sim_metrics(Some("10m"), "at-10m.prom");
    let pending = "muster_pending_jobs";
    let team_a = "root/team-a";
    assert_eq!(
        e.value(
            pending,
            &[("queue", team_a), ("priority", "0"), ("status", "pending")]
        ),
        1.0,
        "a-one, preempted at 5m, waits for quota"
    );
    assert_eq!(
        e.value(
            pending,
            &[
                ("queue", team_a),
                ("priority", "100"),
                ("status", "pending")
            ]
        ),
        1.0,
        "a-high waits"
    );
    assert_eq!(
        e.value(
            pending,
            &[
                ("queue", team_a),
                ("priority", "0"),
                ("status", "inadmissible")
            ]
        ),
        1.0,
        "a-wide asks for more than team-a's max"
    );
    assert_eq!(e.of(pending).len(), 3, "{:#?}", e.of(pending));
    // Running: a-two (2 pods x 1 cpu, 2 GPU), b-one and b-two (1 cpu, 1Gi, 2 GPU each).
    let used = |node, res| e.value("muster_quota_used", &[("node", node), ("resource", res)]);
    assert_eq!(used("root", "cpu"), 4.0);
    assert_eq!(used("root", "memory"), 2.0 * GIB);
    assert_eq!(used("root", "nvidia.com/gpu"), 8.0);
    assert_eq!(used("root", "pods"), 4.0);
    assert_eq!(used("root", "kube-queue/max-jobs"), 3.0);
    assert_eq!(used("root/team-a", "cpu"), 2.0);
    assert_eq!(used("root/team-a", "nvidia.com/gpu"), 4.0);
    assert_eq!(used("root/team-a", "pods"), 2.0);
    assert_eq!(
        e.get(
            "muster_quota_used",
            &[("node", "root/team-a"), ("resource", "memory")]
        ),
        Some(0.0),
        "team-a's running job asks for no memory, other jobs do: zero, not absent"
    );
    assert_eq!(used("root/team-b", "cpu"), 2.0);
    assert_eq!(used("root/team-b", "memory"), 2.0 * GIB);
    assert_eq!(used("root/team-b", "nvidia.com/gpu"), 4.0);
    let q = |m, node, res| e.get(m, &[("node", node), ("resource", res)]);
    assert_eq!(
        q("muster_quota_min", "root/team-b", "nvidia.com/gpu"),
        Some(4.0)
    );
    assert_eq!(q("muster_quota_max", "root", "cpu"), Some(40.0));
    assert_eq!(q("muster_quota_min", "root", "cpu"), Some(0.0));
    assert_eq!(
        q("muster_quota_max", "root/team-a", "cpu"),
        None,
        "no max series where the tree sets none"
    );
    let active = |queue, cluster| {
        e.get(
            "muster_admitted_active_jobs",
            &[("queue", queue), ("cluster", cluster)],
        )
    };
    assert_eq!(active(team_a, "member-b"), Some(1.0));
    assert_eq!(active("root/team-b", "member-a"), Some(2.0));
    assert_eq!(e.of("muster_admitted_active_jobs").len(), 2);
    // Members: member-a, one node of 8 cpu, 32Gi, 4 GPU, holds b-one and b-two; member-b, two
    // nodes of 16 cpu, 2 GPU, holds a-two's workers, one on each.
    let cl = |m, c, r| e.value(m, &[("cluster", c), ("resource", r)]);
    assert_eq!(
        cl("muster_cluster_allocatable", "member-b", "nvidia.com/gpu"),
        4.0
    );
    assert_eq!(cl("muster_cluster_free", "member-b", "nvidia.com/gpu"), 0.0);
    assert_eq!(cl("muster_cluster_free", "member-a", "nvidia.com/gpu"), 0.0);
    assert_eq!(cl("muster_cluster_free", "member-b", "cpu"), 30.0);
    assert_eq!(cl("muster_cluster_largest_free", "member-b", "cpu"), 15.0);
    // member-b's two nodes share rack r1: one domain, with all of member-b's free in it.
    let level = [("cluster", "member-b"), ("level", "example.com/rack")];
    assert_eq!(e.value("muster_cluster_topology_domains", &level), 1.0);
    let rack = |r| {
        e.value(
            "muster_cluster_topology_largest_free",
            &[level[0], level[1], ("resource", r)],
        )
    };
    assert_eq!(rack("cpu"), 30.0);
    assert_eq!(rack("nvidia.com/gpu"), 0.0);
    assert_eq!(
        e.of("muster_cluster_topology_domains").len(),
        1,
        "member-a declares no levels"
    );
    assert_eq!(cl("muster_cluster_free", "member-a", "cpu"), 6.0);
    assert_eq!(cl("muster_cluster_free", "member-a", "memory"), 30.0 * GIB);
    assert_eq!(
        cl("muster_cluster_largest_free", "member-a", "memory"),
        30.0 * GIB
    );
    assert_eq!(cl("muster_cluster_free", "member-a", "pods"), 108.0);
    assert_eq!(cl("muster_cluster_allocatable", "member-b", "pods"), 220.0);
    assert_eq!(cl("muster_cluster_free", "member-b", "pods"), 218.0);
    let node_gauge = |m, c| e.value(m, &[("cluster", c)]);
    assert_eq!(node_gauge("muster_cluster_nodes", "member-b"), 2.0);
    assert_eq!(
        node_gauge("muster_cluster_schedulable_nodes", "member-b"),
        2.0
    );
    assert_eq!(node_gauge("muster_cluster_reachable", "member-a"), 1.0);
    // Counters until 10m.
    assert_eq!(e.sum("muster_admitted_jobs_total", &[]), 5.0);
    assert_eq!(
        e.value(
            "muster_preempted_jobs_total",
            &[("queue", team_a), ("cluster", "member-a")]
        ),
        1.0,
        "a-one"
    );
    assert_eq!(
        e.value(
            "muster_requeued_jobs_total",
            &[("queue", team_a), ("reason", "preempted")]
        ),
        1.0
    );
    assert_eq!(
        e.value(
            "muster_finished_jobs_total",
            &[
                ("queue", "root/team-b"),
                ("cluster", "member-a"),
                ("outcome", "succeeded")
            ]
        ),
        1.0,
        "b-quick"
    );
    assert_eq!(
        e.value("muster_rejected_jobs_total", &[("queue", "root/team-b")]),
        1.0
    );
    assert_eq!(e.sum("muster_submitted_jobs_total", &[]), 7.0);
}

#[test]
fn at_the_end_counters_match_the_report_and_gauges_are_empty() {
    let (e, _, report) = sim_metrics(None, "end.prom");
    let summary = &report["summary"];
    let n = |k: &str| summary[k].as_f64().unwrap_or_else(|| panic!("summary.{k}"));
    // Every admission is a dispatch in the simulator.
    assert_eq!(e.sum("muster_admitted_jobs_total", &[]), n("dispatches"));
    assert_eq!(e.sum("muster_dispatched_jobs_total", &[]), n("dispatches"));
    assert_eq!(e.sum("muster_preempted_jobs_total", &[]), n("preemptions"));
    assert_eq!(e.sum("muster_finished_jobs_total", &[]), n("finished"));
    assert_eq!(e.sum("muster_rejected_jobs_total", &[]), n("rejected"));
    assert_eq!(
        e.value("muster_admission_cycle_duration_seconds_count", &[]),
        n("cycles")
    );
    let wait_count = e.sum("muster_admission_wait_time_seconds_count", &[]);
    assert_eq!(wait_count, n("dispatches"));
    // Known numbers: 7 dispatches (a-two twice), one preemption, 6 jobs finished.
    assert_eq!(n("dispatches"), 7.0);
    assert_eq!(n("preemptions"), 1.0);
    assert_eq!(n("finished"), 6.0);
    let team_a = "root/team-a";
    assert_eq!(
        e.value(
            "muster_admission_wait_time_seconds_count",
            &[("queue", team_a)]
        ),
        4.0,
        "a-one twice, a-two, a-high"
    );
    // The +Inf bucket holds every observation; buckets never decrease.
    let buckets: Vec<&Sample> = e
        .of("muster_admission_wait_time_seconds_bucket")
        .into_iter()
        .filter(|s| s.labels.get("queue").map(String::as_str) == Some(team_a))
        .collect();
    assert_eq!(
        buckets
            .iter()
            .find(|s| s.labels.get("le").map(String::as_str) == Some("+Inf"))
            .map(|s| s.value),
        Some(4.0)
    );
    let mut last = 0.0;
    for b in &buckets {
        assert!(b.value >= last, "{buckets:#?}");
        last = b.value;
    }
    // Waits in virtual seconds: what the report's jobs imply, summed per queue.
    let wait_sum = e.value(
        "muster_admission_wait_time_seconds_sum",
        &[("queue", team_a)],
    );
    assert_eq!(wait_sum, expected_wait_sum(&report, team_a));
    // Finished jobs per queue and member: what the report says.
    let mut finished: BTreeMap<(String, String), f64> = BTreeMap::new();
    for j in report["jobs"].as_array().expect("jobs") {
        if j["state"] == "Finished" {
            let key = (
                j["queue"].as_str().unwrap_or_default().to_string(),
                j["cluster"].as_str().unwrap_or_default().to_string(),
            );
            *finished.entry(key).or_default() += 1.0;
        }
    }
    assert_eq!(finished.len(), 3, "{finished:?}");
    for ((queue, cluster), n) in &finished {
        let labels = [
            ("queue", queue.as_str()),
            ("cluster", cluster.as_str()),
            ("outcome", "succeeded"),
        ];
        assert_eq!(e.value("muster_finished_jobs_total", &labels), *n);
    }
    // Nothing runs at the end: quota usage is zero everywhere, only the inadmissible job waits.
    let used = e.of("muster_quota_used");
    assert!(!used.is_empty());
    assert!(used.iter().all(|s| s.value == 0.0), "{used:#?}");
    assert!(e.of("muster_admitted_active_jobs").is_empty());
    let pending = e.of("muster_pending_jobs");
    assert_eq!(pending.len(), 1, "{pending:#?}");
    assert_eq!(
        pending[0].labels.get("status").map(String::as_str),
        Some("inadmissible")
    );
    assert_eq!(
        e.value(
            "muster_cluster_free",
            &[("cluster", "member-b"), ("resource", "nvidia.com/gpu")]
        ),
        4.0
    );
}

/// Sum of (dispatch − entering the queue) over a queue's admissions, from the report: a-one is
/// admitted at 0, preempted at 5m and admitted again at its final dispatch.
fn expected_wait_sum(report: &Value, queue: &str) -> f64 {
    let mut sum = 0.0;
    for j in report["jobs"].as_array().expect("jobs") {
        if j["queue"] != queue || j["dispatched"].is_null() {
            continue;
        }
        let d = j["dispatched"].as_f64().expect("dispatched");
        let s = j["submitted"].as_f64().expect("submitted");
        sum += if j["name"] == "a-one" {
            assert_eq!(j["preemptions"], 1);
            d - 300.0
        } else {
            d - s
        };
    }
    sum
}

#[test]
fn no_label_value_is_a_job_name() {
    let text = std::fs::read_to_string(scenario_path()).expect("scenario");
    let sc = sim::parse_scenario("metrics.yaml", &text).expect("parses");
    let names: BTreeSet<String> = sc
        .jobs
        .iter()
        .filter_map(|j| j.manifest.identity().2)
        .collect();
    assert_eq!(names.len(), 8);
    for at in [Some("10m"), None] {
        let (e, _, _) = sim_metrics(at, &format!("labels-{}.prom", at.unwrap_or("end")));
        for s in &e.samples {
            for v in s.labels.values() {
                assert!(
                    !names.iter().any(|n| v.contains(n.as_str())),
                    "{} has a job name in a label: {s:?}",
                    s.name
                );
            }
        }
    }
}

#[test]
fn metrics_to_stdout_replace_the_report() {
    let scenario = scenario_path();
    let out = muster(&[
        "sim",
        scenario.to_str().expect("utf-8"),
        "--metrics",
        "-",
        "--metrics-at",
        "10m",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("# HELP muster_"), "{text}");
    let e = parse_exposition(&text);
    assert_eq!(
        e.value(
            "muster_quota_used",
            &[("node", "root"), ("resource", "cpu")]
        ),
        4.0
    );
}

#[test]
fn bad_metrics_arguments_exit_2() {
    let scenario = scenario_path();
    let s = scenario.to_str().expect("utf-8");
    let out = muster(&["sim", s, "--metrics-at", "10m"]);
    assert_eq!(out.status.code(), Some(2), "--metrics-at needs --metrics");
    let file = scratch("never.prom");
    let f = file.to_str().expect("utf-8");
    let out = muster(&["sim", s, "--metrics", f, "--metrics-at", "ten"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--metrics-at"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = muster(&["sim", s, "--metrics", "/nonexistent-dir/m.prom"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "fails before running");
}

// ----- the dashboard --------------------------------------------------------------------------------

/// Every series name muster exports, with its label names: the simulator's final state on the
/// metrics scenario, plus a dispatch error (the simulator never fails to dispatch).
fn exported() -> (Exposition, BTreeMap<String, BTreeSet<String>>) {
    let text = std::fs::read_to_string(scenario_path()).expect("scenario");
    let sc = sim::parse_scenario("metrics.yaml", &text).expect("parses");
    let m = Metrics::new();
    sim::run_with_metrics("metrics.yaml", &sc, &mut (), &m, Some(10 * 60 * 1000)).expect("runs");
    m.dispatch_error("member-a", DispatchFailure::Unreachable);
    // Only a member that misplaces a pod makes this one appear (never in a simulation).
    m.placement_mismatch("member-a");
    // Only a partitioned member does this (the controller with --partition-policy replace).
    m.maybe_running_twice(&[("member-a".to_string(), 1)].into_iter().collect());
    // The controller's start-time forecasts (the simulator reports estimates per job instead).
    m.forecast(
        &[(
            "root/a".to_string(),
            muster::metrics::QueueOutlook {
                waits: vec![30, 90, 600],
                never: 1,
                not_before: 2,
            },
        )]
        .into_iter()
        .collect(),
        0.01,
    );
    let e = parse_exposition(&m.encode());
    let names = e.names();
    (e, names)
}

/// PromQL keywords and aggregation operators (whose `(` may come after a `by` clause):
/// identifiers that are not metric names. Functions are known by the `(` that follows them.
const NOT_METRICS: &[&str] = &[
    "bool",
    "offset",
    "and",
    "or",
    "unless",
    "inf",
    "nan",
    "Inf",
    "NaN",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// A metric selector in a query: its name and the label names of its matchers.
#[derive(Debug, PartialEq)]
struct Selector {
    metric: String,
    labels: Vec<String>,
}

/// The metric selectors and grouping labels of a PromQL expression (a tokenizer, not a parser:
/// strings, ranges and matchers are skipped as a whole; a name followed by `(` is a function).
fn promql_refs(expr: &str) -> Result<(Vec<Selector>, Vec<String>), String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    let mut selectors: Vec<Selector> = Vec::new();
    let mut grouping = Vec::new();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let skip_ws = |mut i: usize| {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        i
    };
    let skip_string = |mut i: usize| -> Result<usize, String> {
        let q = chars[i];
        i += 1;
        while i < chars.len() && chars[i] != q {
            if chars[i] == '\\' {
                i += 1;
            }
            i += 1;
        }
        if i >= chars.len() {
            return Err(format!("unterminated string in {expr:?}"));
        }
        Ok(i + 1)
    };
    let mut after_metric = false;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '"' || c == '\'' || c == '`' {
            i = skip_string(i)?;
            after_metric = false;
        } else if c == '[' {
            let end = chars[i..]
                .iter()
                .position(|&c| c == ']')
                .ok_or_else(|| format!("unterminated range in {expr:?}"))?;
            i += end + 1;
        } else if c == '{' {
            // Matchers: name op "value", ...
            let mut labels = Vec::new();
            i += 1;
            loop {
                i = skip_ws(i);
                match chars.get(i) {
                    None => return Err(format!("unterminated matchers in {expr:?}")),
                    Some('}') => {
                        i += 1;
                        break;
                    }
                    Some(',') => i += 1,
                    Some(_) => {
                        let start = i;
                        while i < chars.len() && ident(chars[i]) {
                            i += 1;
                        }
                        if start == i {
                            return Err(format!("bad matcher at {i} in {expr:?}"));
                        }
                        labels.push(chars[start..i].iter().collect());
                        while i < chars.len() && "=!~ ".contains(chars[i]) {
                            i += 1;
                        }
                        if !matches!(chars.get(i), Some('"' | '\'' | '`')) {
                            return Err(format!("matcher without a string at {i} in {expr:?}"));
                        }
                        i = skip_string(i)?;
                    }
                }
            }
            match selectors.last_mut() {
                Some(s) if after_metric => s.labels.extend(labels),
                _ => return Err(format!("a selector without a metric name in {expr:?}")),
            }
            after_metric = false;
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            after_metric = false;
        } else if ident(c) {
            let start = i;
            while i < chars.len() && ident(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = skip_ws(i);
            after_metric = false;
            if GROUPING.contains(&word.as_str()) {
                if chars.get(next) == Some(&'(') {
                    let end = chars[next..]
                        .iter()
                        .position(|&c| c == ')')
                        .ok_or_else(|| format!("unterminated label list in {expr:?}"))?;
                    let list: String = chars[next + 1..next + end].iter().collect();
                    grouping.extend(
                        list.split(',')
                            .map(str::trim)
                            .filter(|s| !s.is_empty())
                            .map(str::to_string),
                    );
                    i = next + end + 1;
                }
            } else if chars.get(next) == Some(&'(') || NOT_METRICS.contains(&word.as_str()) {
                // A function or aggregation, or a keyword.
            } else {
                selectors.push(Selector {
                    metric: word,
                    labels: Vec::new(),
                });
                after_metric = true;
            }
        } else {
            after_metric = false;
            i += 1;
        }
    }
    Ok((selectors, grouping))
}

/// Problems of one expression against the exported names and labels.
fn check_expr(expr: &str, exported: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let (selectors, grouping) = match promql_refs(expr) {
        Ok(r) => r,
        Err(e) => return vec![e],
    };
    let mut problems = Vec::new();
    if selectors.is_empty() {
        problems.push(format!("no metric in {expr:?}"));
    }
    let mut labels_in_scope: BTreeSet<String> = BTreeSet::new();
    for s in &selectors {
        match exported.get(&s.metric) {
            None => problems.push(format!("unknown metric {} in {expr:?}", s.metric)),
            Some(labels) => {
                labels_in_scope.extend(labels.iter().cloned());
                for l in &s.labels {
                    if !labels.contains(l) {
                        problems.push(format!("{} has no label {l} (in {expr:?})", s.metric));
                    }
                }
            }
        }
    }
    for g in &grouping {
        if !labels_in_scope.contains(g) {
            problems.push(format!("no metric of {expr:?} has the label {g}"));
        }
    }
    problems
}

fn collect_exprs(v: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{path}.{k}");
                if k == "expr" {
                    out.push((p, x.as_str().unwrap_or_default().to_string()));
                } else {
                    collect_exprs(x, &p, out);
                }
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                collect_exprs(x, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(repo().join("dashboards/muster.json")).expect("dashboard");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

#[test]
fn the_query_checker_catches_unknown_metrics_and_labels() {
    let (_, exported) = exported();
    let good = "sum by (queue) (muster_pending_jobs{status=\"pending\"}) / on (queue) sum without (priority, status) (muster_pending_jobs)";
    assert_eq!(check_expr(good, &exported), Vec::<String>::new());
    let bad = [
        "rate(muster_nope_total[5m])",
        "up",
        "sum(rate(muster_admitted_jobs_total[5m])) / kube_node_info",
        "muster_pending_jobs{job_name=\"x\"}",
        "sum by (namespace) (muster_pending_jobs)",
        "{__name__=\"muster_pending_jobs\"}",
        "rate(muster_admission_wait_time_seconds[5m])",
    ];
    for b in bad {
        assert!(
            !check_expr(b, &exported).is_empty(),
            "{b} should be refused"
        );
    }
}

#[test]
fn every_dashboard_query_uses_exported_metrics() {
    let (e, exported) = exported();
    // The families the simulator, a dispatch error, a placement mismatch and a partitioned member
    // produce: all of muster's.
    assert_eq!(e.types.len(), 34, "{:?}", e.types.keys());
    let d = dashboard();
    let mut exprs = Vec::new();
    collect_exprs(&d, "", &mut exprs);
    assert!(exprs.len() >= 20, "{exprs:#?}");
    let mut problems = Vec::new();
    let mut used: BTreeSet<String> = BTreeSet::new();
    for (path, expr) in &exprs {
        for p in check_expr(expr, &exported) {
            problems.push(format!("{path}: {p}"));
        }
        if let Ok((sel, _)) = promql_refs(expr) {
            used.extend(sel.into_iter().map(|s| s.metric));
        }
    }
    // Template variables: label_values(metric, label).
    let vars = d["templating"]["list"].as_array().expect("templating");
    for v in vars {
        if v["type"] == "query" {
            let q = v["definition"].as_str().unwrap_or_default();
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|r| r.strip_suffix(')'))
                .unwrap_or_else(|| panic!("variable {}: {q}", v["name"]));
            let (metric, label) = inner.split_once(',').expect("label_values(metric, label)");
            match exported.get(metric.trim()) {
                Some(l) if l.contains(label.trim()) => {}
                _ => problems.push(format!("variable {}: {q}", v["name"])),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The panels the issue asks for are there.
    for m in [
        "muster_pending_jobs",
        "muster_admission_wait_time_seconds_bucket",
        "muster_quota_used",
        "muster_quota_min",
        "muster_quota_max",
        "muster_cluster_free",
        "muster_cluster_largest_free",
        "muster_cluster_topology_largest_free",
        "muster_dispatched_jobs_total",
        "muster_preempted_jobs_total",
        "muster_requeued_jobs_total",
        "muster_dispatch_errors_total",
        "muster_pods_released_total",
        "muster_placement_mismatches_total",
        "muster_admission_cycle_duration_seconds_bucket",
        "muster_jobs_maybe_running_twice",
        "muster_jobs_beyond_forecast",
    ] {
        assert!(used.contains(m), "no panel uses {m}");
    }
}

#[test]
fn the_dashboard_takes_its_datasource_from_a_variable() {
    let d = dashboard();
    let vars = d["templating"]["list"].as_array().expect("templating");
    assert!(
        vars.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "{vars:#?}"
    );
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().expect("panels") {
        assert!(
            ids.insert(p["id"].as_u64().expect("panel id")),
            "duplicate id {}",
            p["id"]
        );
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(
            p["datasource"]["uid"], "${datasource}",
            "panel {}",
            p["title"]
        );
        for t in p["targets"].as_array().expect("targets") {
            assert_eq!(
                t["datasource"]["uid"], "${datasource}",
                "panel {}",
                p["title"]
            );
        }
    }
}

#[test]
fn every_metric_is_documented() {
    let (e, _) = exported();
    let doc =
        std::fs::read_to_string(repo().join("docs/operations.md")).expect("docs/operations.md");
    for name in e.types.keys() {
        assert!(
            doc.contains(&format!("`{name}`")),
            "docs/operations.md does not list {name}"
        );
        assert!(e.help.contains(name), "{name} has no HELP");
    }
}
