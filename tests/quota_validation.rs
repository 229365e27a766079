//! One test per ElasticQuotaTree validation problem: each is reported with its manifest field path
//! and a message that says what is wrong, errors and warnings apart, and all of them at once.

use muster::quota::{
    FAIR_PREEMPTION_ATTRIBUTE, PREEMPTION_ATTRIBUTE, Problem, QuotaTree, STRATEGY_ATTRIBUTE,
    Severity, Strategy, WEIGHT_ATTRIBUTE,
};
use serde_json::{Value, json};

fn tree(root: Value) -> Value {
    json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "elasticquotatree", "namespace": "kube-system"},
        "spec": {"root": root}
    })
}

/// The problems of an invalid tree (panics when the tree is accepted).
fn problems(manifest: &Value) -> Vec<Problem> {
    match QuotaTree::parse(manifest) {
        Ok(t) => panic!("tree accepted, expected problems: {t:#?}"),
        Err(p) => p,
    }
}

fn errors(p: &[Problem]) -> Vec<&Problem> {
    p.iter().filter(|p| p.severity == Severity::Error).collect()
}

/// The one problem at `field`, asserting there is exactly one.
fn at<'a>(p: &'a [Problem], field: &str) -> &'a Problem {
    let found: Vec<&Problem> = p.iter().filter(|p| p.field == field).collect();
    assert_eq!(
        found.len(),
        1,
        "expected exactly one problem at {field}, got {p:#?}"
    );
    found[0]
}

#[test]
fn min_above_max_is_an_error_at_the_min_field() {
    let p = problems(&tree(json!({
        "name": "root",
        "children": [
            {"name": "a", "min": {"cpu": "5", "nvidia.com/gpu": "1"}, "max": {"cpu": "4", "nvidia.com/gpu": "2"}, "namespaces": ["a"]}
        ]
    })));
    assert_eq!(errors(&p).len(), 1, "{p:#?}");
    let e = at(&p, "spec.root.children[0].min[cpu]");
    assert_eq!(e.severity, Severity::Error);
    assert_eq!(e.message, "root/a: min 5 is above max 4");
    assert_eq!(
        e.to_string(),
        "error: spec.root.children[0].min[cpu]: root/a: min 5 is above max 4"
    );
}

#[test]
fn min_equal_to_max_is_fine_and_exact_quantities_compare() {
    // 1Gi == 1024Mi exactly: not above.
    let t = QuotaTree::parse(&tree(json!({
        "name": "root",
        "children": [
            {"name": "a", "min": {"memory": "1024Mi", "cpu": "500m"}, "max": {"memory": "1Gi", "cpu": "0.5"}, "namespaces": ["a"]}
        ]
    })))
    .expect("min == max is valid");
    assert!(t.warnings.is_empty(), "{:#?}", t.warnings);
    // One milli-unit above is not.
    let p = problems(&tree(json!({
        "name": "root",
        "children": [
            {"name": "a", "min": {"cpu": "501m"}, "max": {"cpu": "0.5"}, "namespaces": ["a"]}
        ]
    })));
    assert_eq!(
        at(&p, "spec.root.children[0].min[cpu]").message,
        "root/a: min 501m is above max 500m"
    );
}

#[test]
fn children_min_summing_above_parent_min_is_an_error_at_the_parent() {
    let p = problems(&tree(json!({
        "name": "root",
        "min": {"nvidia.com/gpu": "8"},
        "max": {"nvidia.com/gpu": "16"},
        "children": [
            {"name": "a", "min": {"nvidia.com/gpu": "6"}, "max": {"nvidia.com/gpu": "16"}, "namespaces": ["a"]},
            {"name": "b", "min": {"nvidia.com/gpu": "4"}, "max": {"nvidia.com/gpu": "16"}, "namespaces": ["b"]}
        ]
    })));
    assert_eq!(errors(&p).len(), 1, "{p:#?}");
    let e = at(&p, "spec.root.min[nvidia.com/gpu]");
    assert_eq!(e.severity, Severity::Error);
    assert_eq!(
        e.message,
        "root: children's min sum to 10, above this node's min 8"
    );
}

#[test]
fn children_min_sum_is_checked_at_every_level() {
    let p = problems(&tree(json!({
        "name": "root",
        "min": {"cpu": "100"},
        "children": [
            {"name": "team", "min": {"cpu": "10"}, "children": [
                {"name": "x", "min": {"cpu": "6"}, "namespaces": ["x"]},
                {"name": "y", "min": {"cpu": "5"}, "namespaces": ["y"]}
            ]}
        ]
    })));
    assert_eq!(errors(&p).len(), 1, "{p:#?}");
    assert_eq!(
        at(&p, "spec.root.children[0].min[cpu]").message,
        "root/team: children's min sum to 11, above this node's min 10"
    );
}

#[test]
fn namespace_in_two_leaves_is_an_error_naming_both() {
    let p = problems(&tree(json!({
        "name": "root",
        "children": [
            {"name": "a", "namespaces": ["shared", "only-a"]},
            {"name": "b", "namespaces": ["only-b", "shared"]}
        ]
    })));
    assert_eq!(errors(&p).len(), 1, "{p:#?}");
    let e = at(&p, "spec.root.children[1].namespaces");
    assert_eq!(e.severity, Severity::Error);
    assert_eq!(
        e.message,
        r#"namespace "shared" is in both root/a and root/b"#
    );
}

#[test]
fn namespace_on_an_inner_node_is_an_error() {
    let p = problems(&tree(json!({
        "name": "root",
        "children": [
            {"name": "team", "namespaces": ["team-ns"], "children": [
                {"name": "leaf", "namespaces": ["leaf-ns"]}
            ]}
        ]
    })));
    assert_eq!(errors(&p).len(), 1, "{p:#?}");
    let e = at(&p, "spec.root.children[0].namespaces");
    assert_eq!(e.severity, Severity::Error);
    assert_eq!(
        e.message,
        "root/team: namespaces are only allowed on leaves, this node has children"
    );
}

#[test]
fn namespace_on_the_root_with_children_is_an_error() {
    let p = problems(&tree(json!({
        "name": "root",
        "namespaces": ["default"],
        "children": [{"name": "a", "namespaces": ["a"]}]
    })));
    assert_eq!(
        at(&p, "spec.root.namespaces").message,
        "root: namespaces are only allowed on leaves, this node has children"
    );
}

#[test]
fn duplicate_node_names_are_an_error_at_the_second() {
    let p = problems(&tree(json!({
        "name": "root",
        "children": [
            {"name": "team", "children": [{"name": "dup", "namespaces": ["x"]}]},
            {"name": "dup", "namespaces": ["y"]}
        ]
    })));
    assert_eq!(errors(&p).len(), 1, "{p:#?}");
    let e = at(&p, "spec.root.children[1].name");
    assert_eq!(e.severity, Severity::Error);
    assert_eq!(
        e.message,
        r#"duplicate name "dup" (also at spec.root.children[0].children[0])"#
    );
}

#[test]
fn unparsable_quantity_names_the_field_path() {
    let p = problems(&tree(json!({
        "name": "root",
        "children": [
            {"name": "a", "max": {"cpu": "four", "memory": "1GB"}, "namespaces": ["a"]},
            {"name": "b", "min": {"nvidia.com/gpu": "1.2.3"}, "namespaces": ["b"]}
        ]
    })));
    assert_eq!(errors(&p).len(), 3, "{p:#?}");
    let cpu = at(&p, "spec.root.children[0].max[cpu]");
    assert_eq!(cpu.severity, Severity::Error);
    assert_eq!(cpu.message, r#""four" is not a quantity: expected digits"#);
    assert_eq!(
        at(&p, "spec.root.children[0].max[memory]").message,
        r#""1GB" is not a quantity: unknown suffix "GB""#
    );
    assert!(
        at(&p, "spec.root.children[1].min[nvidia.com/gpu]")
            .message
            .contains(r#""1.2.3" is not a quantity"#),
        "{p:#?}"
    );
}

#[test]
fn negative_and_non_string_quantities_are_errors() {
    let p = problems(&tree(json!({
        "name": "root",
        "max": {"cpu": "-1", "memory": true},
        "children": [{"name": "a", "min": "lots", "namespaces": ["a"]}]
    })));
    assert_eq!(at(&p, "spec.root.max[cpu]").message, r#""-1" is negative"#);
    assert!(
        at(&p, "spec.root.max[memory]")
            .message
            .contains("is not a quantity"),
        "{p:#?}"
    );
    assert_eq!(
        at(&p, "spec.root.children[0].min").message,
        "expected a map of quantities"
    );
}

#[test]
fn numbers_are_quantities_too() {
    let t = QuotaTree::parse(&tree(json!({
        "name": "root",
        "max": {"cpu": 8, "nvidia.com/gpu": 2},
        "children": [{"name": "a", "min": {"cpu": 0.5}, "namespaces": ["a"]}]
    })))
    .expect("numbers are valid quantities");
    assert_eq!(t.nodes[0].max.get("cpu").milli(), 8000);
    assert_eq!(t.nodes[1].min.get("cpu").milli(), 500);
}

#[test]
fn missing_root_is_an_error() {
    let p = problems(&json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
        "kind": "ElasticQuotaTree",
        "spec": {}
    }));
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(p[0].field, "spec.root");
    assert_eq!(p[0].message, "missing");
    assert_eq!(p[0].severity, Severity::Error);
    let p = problems(&json!({"kind": "ElasticQuotaTree"}));
    assert_eq!(at(&p, "spec.root").message, "missing");
}

#[test]
fn missing_names_are_errors_at_their_path() {
    let p = problems(&tree(json!({
        "max": {"cpu": "10"},
        "children": [
            {"namespaces": ["a"]},
            {"name": "", "namespaces": ["b"]},
            {"name": "ok", "namespaces": ["c"]}
        ]
    })));
    assert_eq!(errors(&p).len(), 3, "{p:#?}");
    for f in [
        "spec.root.name",
        "spec.root.children[0].name",
        "spec.root.children[1].name",
    ] {
        let e = at(&p, f);
        assert_eq!(e.severity, Severity::Error);
        assert_eq!(e.message, "missing");
    }
}

#[test]
fn bad_queueing_strategy_attribute_is_an_error() {
    let p = problems(&tree(json!({
        "name": "root",
        "children": [
            {"name": "a", "namespaces": ["a"], "attributes": {STRATEGY_ATTRIBUTE: "FIFO"}},
            {"name": "b", "namespaces": ["b"], "attributes": {STRATEGY_ATTRIBUTE: 3}}
        ]
    })));
    let e = at(
        &p,
        "spec.root.children[0].attributes[muster.dev/queueing-strategy]",
    );
    assert_eq!(e.severity, Severity::Error);
    assert_eq!(e.message, r#""FIFO" is not StrictFIFO or BestEffortFIFO"#);
    assert_eq!(
        at(
            &p,
            "spec.root.children[1].attributes[muster.dev/queueing-strategy]"
        )
        .message,
        "expected a string"
    );
}

#[test]
fn queueing_strategy_attribute_is_read_per_leaf() {
    let t = QuotaTree::parse(&tree(json!({
        "name": "root",
        "children": [
            {"name": "strict", "namespaces": ["s"], "attributes": {STRATEGY_ATTRIBUTE: "StrictFIFO"}},
            {"name": "best", "namespaces": ["b"], "attributes": {STRATEGY_ATTRIBUTE: "BestEffortFIFO"}},
            {"name": "plain", "namespaces": ["p"]}
        ]
    })))
    .expect("valid");
    assert_eq!(t.strategy(t.leaf_for("s").unwrap()), Strategy::StrictFIFO);
    assert_eq!(
        t.strategy(t.leaf_for("b").unwrap()),
        Strategy::BestEffortFIFO
    );
    assert_eq!(
        t.strategy(t.leaf_for("p").unwrap()),
        Strategy::BestEffortFIFO
    );
}

#[test]
fn child_max_above_parent_max_is_a_warning_not_an_error() {
    let t = QuotaTree::parse(&tree(json!({
        "name": "root",
        "max": {"nvidia.com/gpu": "8", "cpu": "32"},
        "children": [
            {"name": "a", "max": {"nvidia.com/gpu": "12", "cpu": "32"}, "namespaces": ["a"]},
            {"name": "b", "max": {"nvidia.com/gpu": "8"}, "namespaces": ["b"]}
        ]
    })))
    .expect("a max above the parent's is only a warning");
    assert_eq!(t.warnings.len(), 1, "{:#?}", t.warnings);
    let w = &t.warnings[0];
    assert_eq!(w.severity, Severity::Warning);
    assert_eq!(w.field, "spec.root.children[0].max[nvidia.com/gpu]");
    assert_eq!(
        w.message,
        "root/a: max 12 is above its parent's max 8 and can never be reached"
    );
    assert!(w.to_string().starts_with("warning: "), "{w}");
}

#[test]
fn warnings_are_reported_with_errors_when_the_tree_is_invalid() {
    let p = problems(&tree(json!({
        "name": "root",
        "max": {"cpu": "4"},
        "children": [
            {"name": "a", "min": {"cpu": "9"}, "max": {"cpu": "8"}, "namespaces": ["a"]}
        ]
    })));
    assert_eq!(p.len(), 2, "{p:#?}");
    // Errors first.
    assert_eq!(p[0].severity, Severity::Error);
    assert_eq!(p[0].field, "spec.root.children[0].min[cpu]");
    assert_eq!(p[1].severity, Severity::Warning);
    assert_eq!(p[1].field, "spec.root.children[0].max[cpu]");
}

#[test]
fn wrong_kind_or_api_version_is_an_error() {
    let mut m = tree(json!({"name": "root", "namespaces": ["a"]}));
    m["kind"] = json!("ElasticQuota");
    m["apiVersion"] = json!("scheduling.sigs.k8s.io/v1alpha1");
    let p = problems(&m);
    assert_eq!(
        at(&p, "kind").message,
        r#"expected ElasticQuotaTree, found "ElasticQuota""#
    );
    assert!(at(&p, "apiVersion").message.contains("v1alpha1"), "{p:#?}");
}

#[test]
fn a_tree_with_several_problems_reports_all_of_them() {
    let p = problems(&tree(json!({
        "name": "root",
        "min": {"cpu": "10"},
        "max": {"cpu": "20"},
        "children": [
            {"name": "a", "min": {"cpu": "8"}, "max": {"cpu": "4"}, "namespaces": ["shared"]},
            {"name": "b", "min": {"cpu": "8"}, "max": {"cpu": "30"}, "namespaces": ["shared"]},
            {"name": "a", "max": {"nvidia.com/gpu": "x"}, "namespaces": ["c"]},
            {"name": "inner", "namespaces": ["i"], "children": [
                {"name": "leaf", "namespaces": ["l"], "attributes": {STRATEGY_ATTRIBUTE: "LIFO"}}
            ]},
            {"namespaces": ["n"]}
        ]
    })));
    let mut got: Vec<(Severity, &str)> = p.iter().map(|p| (p.severity, p.field.as_str())).collect();
    got.sort();
    let mut want = vec![
        (Severity::Error, "spec.root.children[0].min[cpu]"), // min 8 > max 4
        (Severity::Error, "spec.root.min[cpu]"),             // 8 + 8 > 10
        (Severity::Error, "spec.root.children[1].namespaces"), // shared in a and b
        (Severity::Error, "spec.root.children[2].name"),     // duplicate a
        (Severity::Error, "spec.root.children[2].max[nvidia.com/gpu]"), // unparsable
        (Severity::Error, "spec.root.children[3].namespaces"), // inner node
        (
            Severity::Error,
            "spec.root.children[3].children[0].attributes[muster.dev/queueing-strategy]",
        ),
        (Severity::Error, "spec.root.children[4].name"), // missing
        (Severity::Warning, "spec.root.children[1].max[cpu]"), // 30 > 20
    ];
    want.sort();
    assert_eq!(got, want, "{p:#?}");
    // Sorted errors first.
    let first_warning = p.iter().position(|p| p.severity == Severity::Warning);
    assert_eq!(first_warning, Some(p.len() - 1), "{p:#?}");
}

#[test]
fn a_valid_tree_maps_namespaces_to_leaves() {
    let t = QuotaTree::parse(&tree(json!({
        "name": "root",
        "min": {"nvidia.com/gpu": "16"},
        "max": {"nvidia.com/gpu": "16", "cpu": "100"},
        "children": [
            {"name": "research", "min": {"nvidia.com/gpu": "10"}, "max": {"nvidia.com/gpu": "16"}, "children": [
                {"name": "vision", "min": {"nvidia.com/gpu": "6"}, "namespaces": ["vision", "vision-dev"]},
                {"name": "nlp", "min": {"nvidia.com/gpu": "4"}, "namespaces": ["nlp"]}
            ]},
            {"name": "platform", "min": {"nvidia.com/gpu": "4"}, "max": {"nvidia.com/gpu": "8", "kube-queue/max-jobs": "1"}, "namespaces": ["platform"]}
        ]
    })))
    .expect("valid tree");
    assert!(t.warnings.is_empty(), "{:#?}", t.warnings);
    let path = |ns: &str| t.leaf_for(ns).map(|i| t.nodes[i].path.clone());
    assert_eq!(path("vision").as_deref(), Some("root/research/vision"));
    assert_eq!(path("vision-dev").as_deref(), Some("root/research/vision"));
    assert_eq!(path("nlp").as_deref(), Some("root/research/nlp"));
    assert_eq!(path("platform").as_deref(), Some("root/platform"));
    assert_eq!(path("research"), None, "inner nodes own no namespace");
    assert_eq!(path("default"), None);
    assert_eq!(t.leaf_of_namespace.len(), 4);
    for ns in ["vision", "nlp", "platform"] {
        assert!(t.is_leaf(t.leaf_for(ns).unwrap()));
    }
    let nlp = t.leaf_for("nlp").unwrap();
    let up: Vec<&str> = t
        .path_up(nlp)
        .into_iter()
        .map(|i| t.nodes[i].name.as_str())
        .collect();
    assert_eq!(up, ["nlp", "research", "root"]);
    assert_eq!(
        t.nodes[t.leaf_for("platform").unwrap()]
            .max
            .get("kube-queue/max-jobs")
            .milli(),
        1000
    );
    assert_eq!(t.nodes[0].field, "spec.root");
    assert_eq!(t.nodes[nlp].field, "spec.root.children[0].children[1]");
}

#[test]
fn a_single_leaf_root_is_valid() {
    let t = QuotaTree::parse(&tree(json!({
        "name": "root", "max": {"cpu": "4"}, "namespaces": ["a", "b"]
    })))
    .expect("a root without children may hold namespaces");
    assert_eq!(t.leaf_for("a"), Some(0));
    assert_eq!(t.leaf_for("b"), Some(0));
}

#[test]
fn within_queue_preemption_attribute_is_checked_and_read_per_leaf() {
    let p = problems(&tree(json!({
        "name": "root",
        "children": [
            {"name": "a", "namespaces": ["a"], "attributes": {PREEMPTION_ATTRIBUTE: "Always"}}
        ]
    })));
    let e = at(
        &p,
        "spec.root.children[0].attributes[muster.dev/within-queue-preemption]",
    );
    assert_eq!(e.severity, Severity::Error);
    assert_eq!(e.message, r#""Always" is not LowerPriority or Never"#);
    let t = QuotaTree::parse(&tree(json!({
        "name": "root",
        "children": [
            {"name": "lower", "namespaces": ["l"], "attributes": {PREEMPTION_ATTRIBUTE: "LowerPriority"}},
            {"name": "never", "namespaces": ["n"], "attributes": {PREEMPTION_ATTRIBUTE: "Never"}},
            {"name": "plain", "namespaces": ["p"]}
        ]
    })))
    .expect("valid");
    let leaf = |ns: &str| t.leaf_for(ns).expect("a leaf");
    assert!(t.preempts_lower_priority(leaf("l")));
    assert!(!t.preempts_lower_priority(leaf("n")));
    assert!(!t.preempts_lower_priority(leaf("p")));
}

#[test]
fn a_fair_sharing_weight_must_be_a_quantity_above_zero_and_not_too_large() {
    let with = |w: &str| {
        tree(json!({"name": "root", "max": {"cpu": "8"}, "children": [
            {"name": "a", "namespaces": ["a"], "attributes": {WEIGHT_ATTRIBUTE: w}},
            {"name": "b", "namespaces": ["b"]}]}))
    };
    let field = format!("spec.root.children[0].attributes[{WEIGHT_ATTRIBUTE}]");
    for (w, says) in [
        ("two", "is not a quantity"),
        ("0", "must be above 0"),
        ("-1", "must be above 0"),
        ("2000000", "is above the largest weight, 1000000"),
    ] {
        let p = problems(&with(w));
        let e = at(&p, &field);
        assert_eq!(e.severity, Severity::Error);
        assert!(e.message.contains(says), "{w}: {}", e.message);
    }
    for (w, milli) in [
        ("2", 2000),
        ("500m", 500),
        ("1.5", 1500),
        ("1000000", 1_000_000_000),
    ] {
        let t = QuotaTree::parse(&with(w)).expect("valid");
        assert_eq!(t.nodes[1].weight.milli(), milli, "{w}");
        assert_eq!(t.nodes[2].weight.milli(), 1000, "the default is 1");
    }
}

#[test]
fn fair_sharing_preemption_is_checked_and_read_per_node() {
    let with = |root: &str, leaf: &str| {
        tree(json!({"name": "root", "max": {"cpu": "8"},
            "attributes": {FAIR_PREEMPTION_ATTRIBUTE: root},
            "children": [
                {"name": "a", "namespaces": ["a"], "attributes": {FAIR_PREEMPTION_ATTRIBUTE: leaf}},
                {"name": "b", "namespaces": ["b"]}]}))
    };
    // A value it does not know is an error naming the field.
    let p = problems(&with("Always", "Never"));
    let e = at(
        &p,
        &format!("spec.root.attributes[{FAIR_PREEMPTION_ATTRIBUTE}]"),
    );
    assert_eq!(e.severity, Severity::Error);
    assert!(
        e.message
            .contains("is not LessThanOrEqualToFinalShare or Never"),
        "{}",
        e.message
    );
    // On a leaf it has nothing to act on: a warning, the tree still valid.
    let t = QuotaTree::parse(&with("LessThanOrEqualToFinalShare", "Never")).expect("valid");
    let w = t
        .warnings
        .iter()
        .find(|w| {
            w.field == format!("spec.root.children[0].attributes[{FAIR_PREEMPTION_ATTRIBUTE}]")
        })
        .expect("a warning for the leaf");
    assert_eq!(w.severity, Severity::Warning);
    assert!(
        w.message.contains("has no effect on a leaf"),
        "{}",
        w.message
    );
    assert!(t.preempts_for_fairness(0));
    assert!(!t.preempts_for_fairness(1) && !t.preempts_for_fairness(2));
    let t = QuotaTree::parse(&with("Never", "Never")).expect("valid");
    assert!(!t.preempts_for_fairness(0), "Never is off");
}
