//! The chart's security settings, rendered by helm (hack/helm/build.sh) without a cluster: the
//! snapshot listener stays on the pod's loopback and out of every Service and container port;
//! the NetworkPolicies admit only the metrics and webhook ports (from the configured peers) and
//! go away when disabled; member Secret namespaces reach the controller's flag, and Secret
//! names narrow the Roles' `get` to `resourceNames`.

mod support;

use serde_json::{Value, json};
use support::helm::{NAMESPACE, all, one, render};

fn container(docs: &[Value]) -> &Value {
    &one(docs, "Deployment", "muster")["spec"]["template"]["spec"]["containers"][0]
}

/// The controller's arguments.
fn args(docs: &[Value]) -> Vec<String> {
    container(docs)["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("a string").to_string())
        .collect()
}

fn flag(docs: &[Value], name: &str) -> Option<String> {
    let prefix = format!("{name}=");
    let found: Vec<String> = args(docs)
        .iter()
        .filter_map(|a| a.strip_prefix(&prefix).map(str::to_string))
        .collect();
    assert!(found.len() <= 1, "{name} given twice: {found:?}");
    found.into_iter().next()
}

#[test]
fn the_snapshot_listener_is_on_loopback_and_in_no_port_or_service() {
    let docs = render(&[]);
    assert_eq!(
        flag(&docs, "--snapshot-addr").as_deref(),
        Some("127.0.0.1:8081")
    );
    let ports: Vec<u64> = container(&docs)["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| p["containerPort"].as_u64().expect("a port"))
        .collect();
    assert!(!ports.contains(&8081), "{ports:?}");
    for svc in all(&docs, "Service") {
        for p in svc["spec"]["ports"].as_array().expect("ports") {
            assert_ne!(p["targetPort"], json!(8081), "{svc}");
            assert_ne!(p["port"], json!(8081), "{svc}");
        }
    }
    let docs = render(&["controller.snapshotPort=9999"]);
    assert_eq!(
        flag(&docs, "--snapshot-addr").as_deref(),
        Some("127.0.0.1:9999")
    );
    assert_eq!(flag(&docs, "--snapshot-insecure-expose"), None);
}

fn controller_selector() -> Value {
    json!({"matchLabels": {
        "app.kubernetes.io/name": "muster",
        "app.kubernetes.io/instance": "muster",
        "app.kubernetes.io/component": "controller",
    }})
}

#[test]
fn network_policies_admit_the_metrics_and_webhook_ports_only() {
    let docs = render(&[]);
    let policies = all(&docs, "NetworkPolicy");
    assert_eq!(policies.len(), 3);
    for p in &policies {
        assert_eq!(p["metadata"]["namespace"], NAMESPACE);
        assert_eq!(p["spec"]["podSelector"], controller_selector());
        assert_eq!(p["spec"]["policyTypes"], json!(["Ingress"]));
    }
    let deny = one(&docs, "NetworkPolicy", "muster-default-deny");
    assert!(deny["spec"].get("ingress").is_none(), "{deny}");
    let metrics = one(&docs, "NetworkPolicy", "muster-metrics");
    assert_eq!(
        metrics["spec"]["ingress"],
        json!([{
            "from": [{"namespaceSelector": {}, "podSelector": {}}],
            "ports": [{"port": "http", "protocol": "TCP"}],
        }])
    );
    let webhook = one(&docs, "NetworkPolicy", "muster-webhook");
    assert_eq!(
        webhook["spec"]["ingress"],
        json!([{"ports": [{"port": "webhook", "protocol": "TCP"}]}])
    );
    // The named ports exist on the container.
    let names: Vec<&str> = container(&docs)["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(
        names.contains(&"http") && names.contains(&"webhook"),
        "{names:?}"
    );

    let docs = render(&[
        "networkPolicy.metrics.namespaceSelector.matchLabels.team=monitoring",
        "networkPolicy.metrics.podSelector.matchLabels.app=prometheus",
        "networkPolicy.webhook.from[0].ipBlock.cidr=10.0.0.0/8",
    ]);
    let metrics = one(&docs, "NetworkPolicy", "muster-metrics");
    assert_eq!(
        metrics["spec"]["ingress"][0]["from"],
        json!([{
            "namespaceSelector": {"matchLabels": {"team": "monitoring"}},
            "podSelector": {"matchLabels": {"app": "prometheus"}},
        }])
    );
    let webhook = one(&docs, "NetworkPolicy", "muster-webhook");
    assert_eq!(
        webhook["spec"]["ingress"][0]["from"],
        json!([{"ipBlock": {"cidr": "10.0.0.0/8"}}])
    );

    let docs = render(&["networkPolicy.enabled=false"]);
    assert!(all(&docs, "NetworkPolicy").is_empty());
}

/// The `secrets` rule of a Role.
fn secrets_rule(role: &Value) -> Value {
    role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|r| r["resources"] == json!(["secrets"]))
        .cloned()
        .unwrap_or_else(|| panic!("no secrets rule: {role}"))
}

#[test]
fn member_secret_namespaces_reach_the_flag_and_names_narrow_the_roles() {
    let docs = render(&[]);
    assert_eq!(flag(&docs, "--member-secret-namespaces"), None);
    let own = secrets_rule(one(&docs, "Role", "muster"));
    assert!(own.get("resourceNames").is_none(), "{own}");
    assert_eq!(own["verbs"], json!(["get"]));

    let docs = render(&[
        "rbac.memberSecretNamespaces={members,muster-system,more}",
        "rbac.memberSecretNames={member-a,member-b}",
    ]);
    // The release namespace is the controller's own: not repeated in the flag.
    assert_eq!(
        flag(&docs, "--member-secret-namespaces").as_deref(),
        Some("members,more")
    );
    for role in all(&docs, "Role") {
        let name = role["metadata"]["name"].as_str().unwrap_or("");
        if name == "muster" || name == "muster-member-secrets" {
            let rule = secrets_rule(role);
            assert_eq!(
                rule["resourceNames"],
                json!(["member-a", "member-b"]),
                "{role}"
            );
            assert_eq!(rule["verbs"], json!(["get"]));
        }
    }
    let other: Vec<&str> = all(&docs, "Role")
        .into_iter()
        .filter(|r| r["metadata"]["name"] == "muster-member-secrets")
        .filter_map(|r| r["metadata"]["namespace"].as_str())
        .collect();
    assert_eq!(other, vec!["members", "more"]);
}
