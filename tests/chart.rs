//! The Helm chart (charts/muster), rendered by a helm built from its Go module
//! (hack/helm/build.sh; the tests fail, never skip, when it cannot be built).
//!
//! Without a cluster: `helm lint --strict`; the Deployment's flags, ports, probes and certificate
//! mount agree with each other and with the Services; the webhook's rules and the RBAC rules are
//! exactly what the controller needs for every job kind it manages (JobKind::ALL), no more; the
//! chart-made certificate serves the controller's own webhook server to a client that trusts the
//! caBundle; the cert-manager, ServiceMonitor, dashboard and other switches; every value is
//! documented in the chart's README.
//!
//! On the local fleet: every rendered object applied to the hub (server-side, strict field
//! validation), then `muster controller` runs out of cluster as the chart's ServiceAccount
//! (a TokenRequest token: exactly the chart's RBAC) with the chart's flags, and the end-to-end
//! path still works: a PyTorchJob runs in exactly one member and its QueuedJob reaches Running,
//! a batch Job finishes; statuses, Events and the webhook registration are written; the log has
//! no "forbidden".

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use kube::{Client, Config};
use muster::controller::crd::QueuedJobState;
use muster::controller::{intake, kinds, registration, tls};
use muster::workload::JobKind;
use serde_json::{Value, json};
use support::fleet::{self, client_for, ensure_fleet_up, repo_root, unique_name, wait_for};
use support::helm::{self, NAMESPACE, all, one, render, try_render};
use support::hub::{self, CONTROLLER_NS, Controller};

const T: Duration = Duration::from_secs(90);

fn unb64(v: &Value) -> String {
    let s = v.as_str().unwrap_or_else(|| panic!("not a string: {v}"));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s)
        .unwrap_or_else(|e| panic!("not base64 ({e}): {s}"));
    String::from_utf8(bytes).expect("UTF-8")
}

fn container(docs: &[Value]) -> &Value {
    let dep = one(docs, "Deployment", "muster");
    let c = dep
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .expect("containers");
    assert_eq!(c.len(), 1);
    &c[0]
}

/// The container's `--flag=value` arguments after `controller`, as (flag, value).
fn flags(docs: &[Value]) -> Vec<(String, String)> {
    let args: Vec<String> = container(docs)["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_string())
        .collect();
    assert_eq!(args.first().map(String::as_str), Some("controller"));
    args[1..]
        .iter()
        .map(|a| {
            let (f, v) = a
                .split_once('=')
                .unwrap_or_else(|| panic!("chart args are --flag=value: {a}"));
            (f.to_string(), v.to_string())
        })
        .collect()
}

fn flag(docs: &[Value], name: &str) -> String {
    let found: Vec<String> = flags(docs)
        .into_iter()
        .filter(|(f, _)| f == name)
        .map(|(_, v)| v)
        .collect();
    assert_eq!(found.len(), 1, "{name}: {found:?}");
    found[0].clone()
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {addr}"))
}

/// `muster controller --help`: the flags this build of the controller knows.
fn controller_flags() -> BTreeSet<String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["controller", "--help"])
        .output()
        .expect("muster controller --help");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with("--"))
        .map(|w| w.trim_end_matches([',', '=']).to_string())
        .map(|w| w.split(['=', '<', '[']).next().unwrap_or("").to_string())
        .collect()
}

/// Flags the chart passes for features the controller on this branch does not have yet
/// (leader election is being added on another branch). While `muster controller --help` does not
/// list one of these, the out-of-cluster run leaves it out; once it does, it is passed like every
/// other chart flag. Any other unknown flag fails the tests.
const PENDING_FLAGS: &[&str] = &["--leader-elect"];

#[test]
fn chart_lints() {
    helm::run(&["lint", "--strict", helm::CHART]).unwrap_or_else(|e| panic!("helm lint:\n{e}"));
}

#[test]
fn deployment_flags_ports_and_mounts_agree() {
    let docs = render(&[]);
    let dep = one(&docs, "Deployment", "muster");
    assert_eq!(dep["spec"]["replicas"], 2);
    assert_eq!(dep["metadata"]["namespace"], NAMESPACE);
    let known = controller_flags();
    for (f, _) in flags(&docs) {
        assert!(
            known.contains(&f) || PENDING_FLAGS.contains(&f.as_str()),
            "the chart passes {f}, which `muster controller` does not know ({known:?})"
        );
    }
    assert_eq!(flag(&docs, "--leader-elect"), "true");
    assert_eq!(flag(&docs, "--namespace"), NAMESPACE);
    assert_eq!(flag(&docs, "--quota-namespace"), "kube-system");
    assert_eq!(flag(&docs, "--webhook-failure-policy"), "Fail");
    assert_eq!(
        flag(&docs, "--webhook-service"),
        format!("{NAMESPACE}/muster-webhook:443")
    );
    let c = container(&docs);
    let port = |name: &str| -> u16 {
        let p = c["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("container port {name}"));
        p["containerPort"].as_u64().expect("port") as u16
    };
    assert!(flag(&docs, "--http-addr").starts_with("0.0.0.0:"));
    assert_eq!(port_of(&flag(&docs, "--http-addr")), port("http"));
    assert_eq!(port_of(&flag(&docs, "--webhook-addr")), port("webhook"));
    for (probe, path) in [
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
        ("startupProbe", "/healthz"),
    ] {
        assert_eq!(c[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(c[probe]["httpGet"]["port"], "http", "{probe}");
    }
    let env: BTreeMap<String, Value> = c["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| (e["name"].as_str().expect("name").to_string(), e.clone()))
        .collect();
    assert_eq!(
        env["POD_NAME"].pointer("/valueFrom/fieldRef/fieldPath"),
        Some(&json!("metadata.name")),
        "--instance comes from POD_NAME"
    );
    // Every replica mounts the one certificate Secret at --webhook-cert-dir: one CA for all.
    let cert_dir = flag(&docs, "--webhook-cert-dir");
    let mounts = c["volumeMounts"].as_array().expect("mounts");
    let m = mounts
        .iter()
        .find(|m| m["mountPath"] == cert_dir.as_str())
        .expect("a mount at --webhook-cert-dir");
    let vols = dep
        .pointer("/spec/template/spec/volumes")
        .and_then(Value::as_array)
        .expect("volumes");
    let v = vols
        .iter()
        .find(|v| v["name"] == m["name"])
        .expect("the mount's volume");
    assert_eq!(v["secret"]["secretName"], "muster-webhook-cert");
    one(&docs, "Secret", "muster-webhook-cert");
    // Hosts of the certificate include the Service's in-cluster name.
    assert!(
        flag(&docs, "--webhook-hosts")
            .split(',')
            .any(|h| h == format!("muster-webhook.{NAMESPACE}.svc")),
    );
    // Security: non-root, read-only root file system, no privilege escalation.
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(pod["serviceAccountName"], "muster");
    one(&docs, "ServiceAccount", "muster");
    // Services select the pods and reach the named ports.
    let pod_labels = dep["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .expect("labels");
    for (svc, port_name, target) in [
        ("muster-webhook", "https", "webhook"),
        ("muster-metrics", "http-metrics", "http"),
    ] {
        let s = one(&docs, "Service", svc);
        for (k, v) in s["spec"]["selector"].as_object().expect("selector") {
            assert_eq!(pod_labels.get(k), Some(v), "{svc} selects the pods");
        }
        let p = s["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .find(|p| p["name"] == port_name)
            .unwrap_or_else(|| panic!("{svc} port {port_name}"));
        assert_eq!(p["targetPort"], target);
    }
    let webhook_svc = one(&docs, "Service", "muster-webhook");
    assert_eq!(webhook_svc["spec"]["ports"][0]["port"], 443);
    // Two replicas: a PodDisruptionBudget; the CRDs come from crds/ (checked by tests/crds.rs).
    one(&docs, "PodDisruptionBudget", "muster");
    assert_eq!(all(&docs, "CustomResourceDefinition").len(), 3);
    assert!(all(&docs, "ServiceMonitor").is_empty());
    assert!(all(&docs, "ConfigMap").is_empty());
    assert!(all(&docs, "Certificate").is_empty());
}

#[test]
fn switches_change_what_is_rendered() {
    let docs = render(&["leaderElection.enabled=false", "replicaCount=1"]);
    assert_eq!(flag(&docs, "--leader-elect"), "false");
    assert!(all(&docs, "PodDisruptionBudget").is_empty());
    let docs = render(&[
        "controller.quotaNamespace=quota",
        "webhook.failurePolicy=Ignore",
        "controller.extraArgs={--origin-x=1}",
        "rbac.memberSecretNamespaces={members,muster-system}",
    ]);
    assert_eq!(flag(&docs, "--quota-namespace"), "quota");
    assert_eq!(flag(&docs, "--webhook-failure-policy"), "Ignore");
    assert_eq!(flag(&docs, "--origin-x"), "1");
    let mwc = one(&docs, "MutatingWebhookConfiguration", "muster");
    assert_eq!(mwc["webhooks"][0]["failurePolicy"], "Ignore");
    let quota = one(&docs, "Role", "muster-quota");
    assert_eq!(quota["metadata"]["namespace"], "quota");
    // memberSecretNamespaces: a Role in each other namespace, none twice in the release's.
    let secrets = all(&docs, "Role")
        .into_iter()
        .filter(|r| r["metadata"]["name"] == "muster-member-secrets")
        .map(|r| {
            r["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect::<Vec<_>>();
    assert_eq!(secrets, vec!["members".to_string()]);
    let docs = render(&[
        "rbac.create=false",
        "serviceAccount.create=false",
        "serviceAccount.name=mine",
    ]);
    assert!(all(&docs, "ClusterRole").is_empty() && all(&docs, "Role").is_empty());
    assert!(all(&docs, "ServiceAccount").is_empty());
    assert_eq!(
        one(&docs, "Deployment", "muster")["spec"]["template"]["spec"]["serviceAccountName"],
        "mine"
    );
    let err = try_render(&["serviceAccount.create=false"]).expect_err("a name is required");
    assert!(err.contains("serviceAccount.name is required"), "{err}");
    let docs = render(&["image.repository=registry.example/muster", "image.tag=v9"]);
    assert_eq!(container(&docs)["image"], "registry.example/muster:v9");
    let docs = render(&[]);
    assert_eq!(
        container(&docs)["image"],
        "muster:0.1.0",
        "appVersion by default"
    );
}

type Grant = (String, String, String, String);

/// Every (apiGroup, resource, verb, resourceName or "*") a list of RBAC rules grants.
fn grants(rules: &Value) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    for r in rules.as_array().expect("rules") {
        let names = strings(&r["resourceNames"]);
        let names = if names.is_empty() {
            vec!["*".to_string()]
        } else {
            names
        };
        for g in strings(&r["apiGroups"]) {
            for res in strings(&r["resources"]) {
                for v in strings(&r["verbs"]) {
                    assert_ne!(v, "*", "no wildcard verbs");
                    assert_ne!(res, "*", "no wildcard resources");
                    for n in &names {
                        out.insert((g.clone(), res.clone(), v.clone(), n.clone()));
                    }
                }
            }
        }
    }
    out
}

fn expect(set: &mut BTreeSet<Grant>, group: &str, resource: &str, verbs: &[&str], name: &str) {
    for v in verbs {
        set.insert((group.into(), resource.into(), v.to_string(), name.into()));
    }
}

#[test]
fn rbac_is_exactly_what_the_controller_calls() {
    let docs = render(&[]);
    let mut cluster = BTreeSet::new();
    for k in JobKind::ALL {
        let ar = kinds::api_resource(k);
        // Watched everywhere, suspended, status copied back from the member.
        expect(
            &mut cluster,
            &ar.group,
            &ar.plural,
            &["list", "watch", "patch"],
            "*",
        );
        expect(
            &mut cluster,
            &ar.group,
            &format!("{}/status", ar.plural),
            &["patch"],
            "*",
        );
    }
    let q = &["get", "list", "watch", "create", "patch"];
    expect(&mut cluster, "muster.dev", "queuedjobs", q, "*");
    expect(
        &mut cluster,
        "muster.dev",
        "queuedjobs/status",
        &["patch"],
        "*",
    );
    expect(
        &mut cluster,
        "muster.dev",
        "memberclusters",
        &["get", "list", "watch"],
        "*",
    );
    expect(
        &mut cluster,
        "muster.dev",
        "memberclusters/status",
        &["patch"],
        "*",
    );
    expect(
        &mut cluster,
        "scheduling.k8s.io",
        "priorityclasses",
        &["list", "watch"],
        "*",
    );
    for r in ["clustertrainingruntimes", "trainingruntimes"] {
        expect(
            &mut cluster,
            "trainer.kubeflow.org",
            r,
            &["list", "watch"],
            "*",
        );
    }
    expect(
        &mut cluster,
        "events.k8s.io",
        "events",
        &["create", "patch"],
        "*",
    );
    // Namespaces watched (pod-security labels); pods created in dry run only (hubcheck).
    expect(&mut cluster, "", "namespaces", &["list", "watch"], "*");
    expect(&mut cluster, "", "pods", &["create"], "*");
    let mwc = "mutatingwebhookconfigurations";
    expect(
        &mut cluster,
        "admissionregistration.k8s.io",
        mwc,
        &["get", "patch"],
        "muster",
    );
    let cr = one(&docs, "ClusterRole", "muster");
    assert_eq!(grants(&cr["rules"]), cluster);

    let mut own = BTreeSet::new();
    expect(&mut own, "", "secrets", &["get"], "*");
    expect(&mut own, "coordination.k8s.io", "leases", &["create"], "*");
    let lease = &["get", "update", "patch"];
    expect(
        &mut own,
        "coordination.k8s.io",
        "leases",
        lease,
        "muster-controller",
    );
    // The run-time history (forecasting::HISTORY_CONFIGMAP): created by server-side apply.
    expect(&mut own, "", "configmaps", &["create"], "*");
    expect(&mut own, "", "configmaps", lease, "muster-runtime-history");
    let role = one(&docs, "Role", "muster");
    assert_eq!(role["metadata"]["namespace"], NAMESPACE);
    assert_eq!(grants(&role["rules"]), own);

    let mut quota = BTreeSet::new();
    let eqt = "elasticquotatrees";
    expect(
        &mut quota,
        "scheduling.sigs.k8s.io",
        eqt,
        &["get", "list", "watch"],
        "*",
    );
    expect(
        &mut quota,
        "scheduling.sigs.k8s.io",
        "elasticquotatrees/status",
        &["patch"],
        "*",
    );
    let role = one(&docs, "Role", "muster-quota");
    assert_eq!(role["metadata"]["namespace"], "kube-system");
    assert_eq!(grants(&role["rules"]), quota);

    // Each bound to the ServiceAccount the pods run as.
    for (kind, role_kind, name, ns) in [
        ("ClusterRoleBinding", "ClusterRole", "muster", None),
        ("RoleBinding", "Role", "muster", Some(NAMESPACE)),
        ("RoleBinding", "Role", "muster-quota", Some("kube-system")),
    ] {
        let b = one(&docs, kind, name);
        assert_eq!(b["metadata"]["namespace"].as_str(), ns, "{kind} {name}");
        assert_eq!(
            b["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name})
        );
        assert_eq!(
            b["subjects"],
            json!([{"kind": "ServiceAccount", "name": "muster", "namespace": NAMESPACE}])
        );
    }
    assert_eq!(all(&docs, "ClusterRole").len(), 1);
    assert_eq!(all(&docs, "Role").len(), 2);
}

/// `hubPodAdmission: false` turns the dry-run check off and drops the grant it needs.
#[test]
fn hub_pod_admission_off_drops_its_grant() {
    let on = render(&[]);
    assert_eq!(flag(&on, "--hub-pod-admission"), "true");
    let off = render(&["hubPodAdmission=false"]);
    assert_eq!(flag(&off, "--hub-pod-admission"), "false");
    let pods = |docs: &[Value]| {
        grants(&one(docs, "ClusterRole", "muster")["rules"])
            .iter()
            .any(|g| g.1 == "pods")
    };
    assert!(pods(&on));
    assert!(!pods(&off));
}

/// What `registration::configuration` writes for one kind (the chart must write the same).
fn expected_webhook_rules() -> Value {
    Value::Array(
        JobKind::ALL
            .iter()
            .map(|&k| {
                let ar = kinds::api_resource(k);
                json!({"apiGroups": [ar.group], "apiVersions": [ar.version],
                       "resources": [ar.plural], "operations": ["CREATE", "UPDATE"],
                       "scope": "Namespaced"})
            })
            .collect(),
    )
}

#[test]
fn webhook_configuration_matches_the_controllers() {
    let docs = render(&[]);
    let mwc = one(&docs, "MutatingWebhookConfiguration", "muster");
    let hooks = mwc["webhooks"].as_array().expect("webhooks");
    assert_eq!(hooks.len(), 1);
    let w = &hooks[0];
    assert_eq!(w["name"], "suspend.muster.dev");
    assert_eq!(w["rules"], expected_webhook_rules());
    // What the controller writes while the tree covers nothing: no namespace is intercepted
    // until a replica registers the namespaces the tree covers.
    assert_eq!(
        w["namespaceSelector"],
        registration::namespace_selector(&BTreeSet::new(), &[])
    );
    assert_eq!(
        w["namespaceSelector"],
        json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                     "operator": "DoesNotExist"}]})
    );
    for (k, v) in [
        ("failurePolicy", json!("Fail")),
        ("sideEffects", json!("None")),
        ("timeoutSeconds", json!(5)),
        ("reinvocationPolicy", json!("IfNeeded")),
        ("admissionReviewVersions", json!(["v1"])),
    ] {
        assert_eq!(w[k], v, "{k}");
    }
    assert_eq!(
        w["clientConfig"]["service"],
        json!({"namespace": NAMESPACE, "name": "muster-webhook", "path": "/mutate", "port": 443})
    );
}

fn tls_client(ca_pem: &str) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("PEM")).expect("a CA certificate");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

/// One POST /mutate over TLS, verifying the server as `server_name` with `ca_pem`.
async fn post_mutate(
    port: u16,
    ca_pem: &str,
    server_name: &str,
    body: &str,
) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from(server_name.to_string())
        .map_err(|e| e.to_string())?;
    let mut tls = tls_client(ca_pem)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let req = format!(
        "POST /mutate HTTP/1.1\r\nHost: {server_name}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out).await;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[tokio::test]
async fn chart_certificate_serves_the_controllers_webhook() {
    let docs = render(&[]);
    let secret = one(&docs, "Secret", "muster-webhook-cert");
    assert_eq!(secret["type"], "kubernetes.io/tls");
    let mwc = one(&docs, "MutatingWebhookConfiguration", "muster");
    assert_eq!(
        mwc["webhooks"][0]["clientConfig"]["caBundle"], secret["data"]["ca.crt"],
        "the caBundle is the CA of the Secret every replica mounts"
    );
    let annotations =
        &one(&docs, "Deployment", "muster")["spec"]["template"]["metadata"]["annotations"];
    assert!(
        annotations["checksum/webhook-cert"].is_string(),
        "{annotations}"
    );
    let cert = tls::ServingCert {
        cert_pem: unb64(&secret["data"]["tls.crt"]),
        key_pem: unb64(&secret["data"]["tls.key"]),
        ca_pem: unb64(&secret["data"]["ca.crt"]),
    };
    let ca = cert.ca_pem.clone();
    let port = hub::free_port();
    let covered: intake::Covered = Arc::new(std::sync::RwLock::new(Some(BTreeSet::from([
        "team-a".to_string(),
    ]))));
    let stop = tokio_util::sync::CancellationToken::new();
    let server = {
        let stop = stop.clone();
        tokio::spawn(async move {
            intake::serve(
                format!("127.0.0.1:{port}").parse().expect("addr"),
                tls::CertReloader::fixed(&cert).expect("the chart's certificate loads"),
                covered,
                stop,
            )
            .await
        })
    };
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "0b1c2d3e-0000-4000-8000-000000000002",
            "kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
            "resource": {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"},
            "name": "j", "namespace": "team-a", "operation": "CREATE", "userInfo": {},
            "object": {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                       "metadata": {"name": "j", "namespace": "team-a"},
                       "spec": {"pytorchReplicaSpecs": {}}}
        }
    })
    .to_string();
    let svc = format!("muster-webhook.{NAMESPACE}.svc");
    let answer = wait_for(
        "the webhook answers over TLS",
        Duration::from_secs(10),
        || {
            let (ca, svc, review) = (ca.clone(), svc.clone(), review.clone());
            async move { post_mutate(port, &ca, &svc, &review).await }
        },
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("\"patchType\":\"JSONPatch\""),
        "the job is suspended: {answer}"
    );
    // The same certificate is not good for another name, and another render's CA does not
    // trust it.
    let other = post_mutate(port, &ca, "muster-webhook.elsewhere.svc", &review).await;
    assert!(
        other.as_ref().is_err_and(|e| e.starts_with("TLS")),
        "{other:?}"
    );
    let docs2 = render(&[]);
    let ca2 = unb64(&one(&docs2, "Secret", "muster-webhook-cert")["data"]["ca.crt"]);
    assert_ne!(
        ca2, ca,
        "helm template makes a new CA each time (no cluster to look up)"
    );
    let other = post_mutate(port, &ca2, &svc, &review).await;
    assert!(
        other.as_ref().is_err_and(|e| e.starts_with("TLS")),
        "{other:?}"
    );
    stop.cancel();
    let _ = server.await;
}

#[test]
fn cert_manager_issues_the_certificate_when_enabled() {
    let docs = render(&["webhook.certManager.enabled=true"]);
    assert!(
        all(&docs, "Secret").is_empty(),
        "cert-manager writes the Secret"
    );
    let cert = one(&docs, "Certificate", "muster-webhook");
    assert_eq!(cert["apiVersion"], "cert-manager.io/v1");
    assert_eq!(cert["spec"]["secretName"], "muster-webhook-cert");
    let dns: Vec<&str> = cert["spec"]["dnsNames"]
        .as_array()
        .expect("dnsNames")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        dns.contains(&format!("muster-webhook.{NAMESPACE}.svc").as_str()),
        "{dns:?}"
    );
    assert_eq!(cert["spec"]["issuerRef"]["name"], "muster-ca");
    one(&docs, "Issuer", "muster-selfsigned");
    one(&docs, "Issuer", "muster-ca");
    let ca = one(&docs, "Certificate", "muster-ca");
    assert_eq!(ca["spec"]["isCA"], true);
    let mwc = one(&docs, "MutatingWebhookConfiguration", "muster");
    assert_eq!(
        mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!("{NAMESPACE}/muster-webhook")
    );
    assert!(mwc["webhooks"][0]["clientConfig"].get("caBundle").is_none());
    let dep = one(&docs, "Deployment", "muster");
    let vols = dep["spec"]["template"]["spec"]["volumes"].to_string();
    assert!(vols.contains("muster-webhook-cert"), "{vols}");
    assert!(
        dep["spec"]["template"]["metadata"]["annotations"]
            .get("checksum/webhook-cert")
            .is_none()
    );
    // An issuer of one's own: only the serving Certificate.
    let docs = render(&[
        "webhook.certManager.enabled=true",
        "webhook.certManager.issuerRef.name=corp-ca",
        "webhook.certManager.issuerRef.kind=ClusterIssuer",
    ]);
    assert!(all(&docs, "Issuer").is_empty());
    assert_eq!(all(&docs, "Certificate").len(), 1);
    let cert = one(&docs, "Certificate", "muster-webhook");
    assert_eq!(
        cert["spec"]["issuerRef"],
        json!({"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"})
    );
}

#[test]
fn service_monitor_and_dashboard() {
    let docs = render(&[
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=prom",
    ]);
    let sm = one(&docs, "ServiceMonitor", "muster");
    assert_eq!(sm["metadata"]["labels"]["release"], "prom");
    let ep = &sm["spec"]["endpoints"][0];
    assert_eq!(ep["path"], "/metrics");
    let svc = one(&docs, "Service", "muster-metrics");
    let port_names: Vec<&Value> = svc["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| &p["name"])
        .collect();
    assert!(port_names.contains(&&ep["port"]), "{port_names:?}");
    for (k, v) in sm["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("selector")
    {
        assert_eq!(
            &svc["metadata"]["labels"][k], v,
            "the ServiceMonitor selects the Service"
        );
    }
    let err = try_render(&[
        "metrics.serviceMonitor.enabled=true",
        "metrics.service.enabled=false",
    ])
    .expect_err("a ServiceMonitor needs the Service");
    assert!(err.contains("metrics.service.enabled"), "{err}");

    // The dashboard: the chart's copy of dashboards/muster.json (make chart-dashboard).
    let copy = repo_root().join("charts/muster/dashboards/muster.json");
    match std::fs::read_to_string(&copy) {
        Ok(text) => {
            let docs = render(&["grafanaDashboard.enabled=true"]);
            let cm = one(&docs, "ConfigMap", "muster-dashboard");
            assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
            let got: Value =
                serde_json::from_str(cm["data"]["muster.json"].as_str().expect("data"))
                    .expect("the ConfigMap holds JSON");
            let want: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
            assert_eq!(got, want);
        }
        Err(_) => {
            let err = try_render(&["grafanaDashboard.enabled=true"])
                .expect_err("no dashboard file: rendering it fails");
            assert!(err.contains("make chart-dashboard"), "{err}");
        }
    }
}

#[test]
fn chart_dashboard_copy_is_in_sync() {
    let root = std::fs::read(repo_root().join("dashboards/muster.json")).ok();
    let copy = std::fs::read(repo_root().join("charts/muster/dashboards/muster.json")).ok();
    match (root, copy) {
        (Some(a), Some(b)) => assert!(
            a == b,
            "charts/muster/dashboards/muster.json differs from dashboards/muster.json; run `make chart-dashboard`"
        ),
        (Some(_), None) => {
            panic!("dashboards/muster.json is not in the chart; run `make chart-dashboard`")
        }
        (None, Some(_)) => {
            panic!("the chart has a dashboard the repository does not (dashboards/muster.json)")
        }
        (None, None) => {}
    }
}

/// Keys of values.yaml, down to scalars, lists and empty maps.
fn value_keys(prefix: &str, v: &serde_yaml::Value, out: &mut Vec<String>) {
    match v {
        serde_yaml::Value::Mapping(m) if !m.is_empty() => {
            for (k, v) in m {
                let k = k.as_str().expect("string keys");
                let p = if prefix.is_empty() {
                    k.to_string()
                } else {
                    format!("{prefix}.{k}")
                };
                value_keys(&p, v, out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

#[test]
fn every_value_is_documented() {
    let values: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo_root().join("charts/muster/values.yaml")).expect("values"),
    )
    .expect("values.yaml parses");
    let mut keys = Vec::new();
    value_keys("", &values, &mut keys);
    let readme =
        std::fs::read_to_string(repo_root().join("charts/muster/README.md")).expect("README");
    // The first column of the table in the README's "## Values" section.
    let (_, section) = readme
        .split_once("\n## Values\n")
        .expect("a \"## Values\" section");
    let documented: BTreeSet<String> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once("` |"))
        .map(|(k, _)| k.to_string())
        .collect();
    let mut missing = Vec::new();
    for k in &keys {
        // A key or the map it is in (resources, podSecurityContext, ...) is documented.
        let covered = documented
            .iter()
            .any(|d| k == d || k.starts_with(&format!("{d}.")));
        if !covered {
            missing.push(k.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "values not in charts/muster/README.md: {missing:?}"
    );
    let unknown: Vec<&String> = documented
        .iter()
        .filter(|d| {
            !keys
                .iter()
                .any(|k| k == *d || k.starts_with(&format!("{d}.")))
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "README documents values that do not exist: {unknown:?}"
    );
}

// ----- on the fleet --------------------------------------------------------------------------

/// Server-side apply of one rendered object (strict: unknown fields are errors).
async fn apply(
    client: &Client,
    found: &mut BTreeMap<String, (ApiResource, ApiCapabilities)>,
    obj: &Value,
    manager: &str,
) -> Result<(), String> {
    let (group, version) = obj["apiVersion"]
        .as_str()
        .and_then(|v| v.rsplit_once('/').or(Some(("", v))))
        .expect("apiVersion");
    let kind = obj["kind"].as_str().expect("kind");
    let key = format!("{group}/{version}/{kind}");
    if !found.contains_key(&key) {
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let r = kube::discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|e| format!("{key}: not served: {e}"))?;
        found.insert(key.clone(), r);
    }
    let (ar, caps) = &found[&key];
    let name = obj["metadata"]["name"].as_str().expect("name");
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => {
            let ns = obj["metadata"]["namespace"].as_str().unwrap_or(NAMESPACE);
            Api::namespaced_with(client.clone(), ns, ar)
        }
        Scope::Cluster => Api::all_with(client.clone(), ar),
    };
    let pp = PatchParams {
        field_validation: Some(kube::api::ValidationDirective::Strict),
        ..PatchParams::apply(manager).force()
    };
    api.patch(name, &pp, &Patch::Apply(obj))
        .await
        .map(|_| ())
        .map_err(|e| format!("{kind} {name}: {e}"))
}

async fn delete(
    client: &Client,
    found: &BTreeMap<String, (ApiResource, ApiCapabilities)>,
    obj: &Value,
) {
    let (group, version) = obj["apiVersion"]
        .as_str()
        .and_then(|v| v.rsplit_once('/').or(Some(("", v))))
        .expect("apiVersion");
    let key = format!("{group}/{version}/{}", obj["kind"].as_str().unwrap_or(""));
    let Some((ar, caps)) = found.get(&key) else {
        return;
    };
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            obj["metadata"]["namespace"].as_str().unwrap_or(NAMESPACE),
            ar,
        ),
        Scope::Cluster => Api::all_with(client.clone(), ar),
    };
    let _ = api.delete(name, &DeleteParams::background()).await;
}

async fn client_from(path: &std::path::Path) -> Client {
    let kc = Kubeconfig::read_from(path).expect("kubeconfig");
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    Client::try_from(fleet::bounded(cfg)).expect("client")
}

fn forbidden<T: std::fmt::Debug>(r: kube::Result<T>, what: &str) {
    match r {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("{what} must be forbidden to the chart's ServiceAccount, got {other:?}"),
    }
}

fn pytorchjob(ns: &str, name: &str) -> Value {
    let c = |res: Value| {
        json!([{"name": "pytorch", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": res.clone(), "limits": res}}])
    };
    json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"runPolicy": {"cleanPodPolicy": "All"}, "pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "restartPolicy": "Never",
                "template": {"spec": {"containers": c(json!({"cpu": "1", "memory": "1Gi"}))}}},
            "Worker": {"replicas": 2, "restartPolicy": "Never",
                "template": {"spec": {"containers": c(json!({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}))}}}
        }}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chart_installs_on_the_hub_and_its_rbac_is_enough() {
    ensure_fleet_up();
    assert_eq!(NAMESPACE, CONTROLLER_NS);
    let hub = client_for("hub").await;
    hub::reset_hub(&hub).await;
    hub::ensure_namespace(&hub, NAMESPACE).await;
    let docs = render(&[]);
    let manager = "helm-chart-test";
    let mut found = BTreeMap::new();

    // CRDs first (helm installs crds/ before the templates), then everything else in order.
    for d in all(&docs, "CustomResourceDefinition") {
        apply(&hub, &mut found, d, manager).await.expect("CRD");
        let name = d["metadata"]["name"].as_str().expect("name").to_string();
        hub::wait_established(&hub, &name).await;
    }
    let objects: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] != "CustomResourceDefinition")
        .collect();
    let mut errors = Vec::new();
    for d in &objects {
        if let Err(e) = apply(&hub, &mut found, d, manager).await {
            errors.push(e);
        }
    }
    assert!(
        errors.is_empty(),
        "the hub refused rendered objects:\n  {}",
        errors.join("\n  ")
    );

    // Credentials of the chart's ServiceAccount, and nothing more.
    let sa: Api<ServiceAccount> = Api::namespaced(hub.clone(), NAMESPACE);
    let tr: TokenRequest = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": 3600}
    }))
    .expect("TokenRequest");
    let token = sa
        .create_token_request("muster", &PostParams::default(), &tr)
        .await
        .expect("a token for the chart's ServiceAccount")
        .status
        .expect("token status")
        .token
        .expect("a token");
    let dir = repo_root().join("target").join("e2e");
    std::fs::create_dir_all(&dir).expect("target/e2e");
    let kubeconfig = dir.join(format!("chart-sa-{}.kubeconfig", std::process::id()));
    hub::token_kubeconfig(&token, &kubeconfig);
    let as_sa = client_from(&kubeconfig).await;
    forbidden(
        Api::<Secret>::namespaced(as_sa.clone(), "kube-system")
            .list(&ListParams::default())
            .await,
        "listing Secrets in kube-system",
    );
    forbidden(
        Api::<Secret>::namespaced(as_sa.clone(), NAMESPACE)
            .list(&ListParams::default())
            .await,
        "listing Secrets in its own namespace (only get is granted)",
    );
    let mwcs: Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration> =
        Api::all(as_sa.clone());
    forbidden(
        mwcs.get("someone-elses").await,
        "reading another webhook configuration",
    );
    mwcs.get("muster")
        .await
        .expect("its own webhook configuration is readable");

    // Members, a tree and a namespace it covers (as an administrator would).
    hub::register_members(&hub).await;
    let ns = unique_name("chart");
    fleet::create_namespace(&hub, &ns).await;
    hub::apply_tree(
        &hub,
        json!({
            "name": "root", "max": {"cpu": "100", "memory": "400Gi", "nvidia.com/gpu": "16"},
            "children": [{"name": "chart", "namespaces": [ns],
                          "max": {"cpu": "50", "memory": "200Gi", "nvidia.com/gpu": "8"}}]
        }),
    )
    .await
    .expect("tree");

    // Out of cluster the API server reaches the webhook by URL, not through the Service:
    // point the chart's configuration at the controller's loopback port (the controller's own
    // registration then updates it, which needs the chart's `patch` on it).
    let webhook_port = hub::free_port();
    let url = format!("https://127.0.0.1:{webhook_port}/mutate");
    let chart_mwc = one(&docs, "MutatingWebhookConfiguration", "muster").clone();
    let mut by_url = chart_mwc.clone();
    let cc = &mut by_url["webhooks"][0]["clientConfig"];
    cc.as_object_mut().expect("clientConfig").remove("service");
    cc["url"] = json!(url);
    apply(&hub, &mut found, &by_url, manager)
        .await
        .expect("webhook by URL");

    // The controller with the chart's flags, except what an out-of-cluster run must set itself.
    let known = controller_flags();
    let mut extra = Vec::new();
    for (f, v) in flags(&docs) {
        match f.as_str() {
            "--namespace" => assert_eq!(v, CONTROLLER_NS),
            // Addresses, certificate and registration of the in-cluster run; resync faster.
            "--http-addr" | "--snapshot-addr" | "--webhook-addr" | "--webhook-cert-dir"
            | "--webhook-hosts" | "--webhook-service" | "--resync-seconds" => {}
            _ if known.contains(&f) => extra.push(format!("{f}={v}")),
            _ if PENDING_FLAGS.contains(&f.as_str()) => {
                eprintln!("note: `muster controller` has no {f} yet; run without it");
            }
            _ => panic!("the chart passes {f}, which `muster controller` does not know"),
        }
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let started = jiff::Timestamp::now();
    let controller = Controller::start_as("chart", &kubeconfig, webhook_port, &extra).await;

    let result = tokio::time::timeout(Duration::from_secs(240), async {
        let hub = &hub;
        let ns = ns.as_str();
        // The registration is the chart's, updated by the controller itself.
        let live = wait_for("the controller's webhook registration", T, || async move {
            let m = Api::<
                    k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration,
                >::all(hub.clone())
                .get("muster")
                .await
                .map_err(|e| e.to_string())?;
            let v = serde_json::to_value(&m).map_err(|e| e.to_string())?;
            let by_muster = m
                .metadata
                .managed_fields
                .unwrap_or_default()
                .iter()
                .any(|f| f.manager.as_deref() == Some("muster"));
            if by_muster {
                Ok(v)
            } else {
                Err("no field manager muster yet".into())
            }
        })
        .await;
        let (w, c) = (&live["webhooks"][0], &chart_mwc["webhooks"][0]);
        // The namespace selector is the controller's: exactly the namespaces the tree covers.
        assert_eq!(
            w["namespaceSelector"],
            json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                         "values": [ns]}]}),
            "the controller registers the tree's namespaces"
        );
        for k in [
            "name",
            "rules",
            "failurePolicy",
            "sideEffects",
            "timeoutSeconds",
            "reinvocationPolicy",
            "admissionReviewVersions",
        ] {
            assert_eq!(w[k], c[k], "the controller registers {k} as the chart does");
        }
        assert_eq!(w["clientConfig"]["url"], json!(url));
        assert!(w["clientConfig"].get("service").is_none());

        // Members Ready first, as written by this controller (memberclusters/status; a status
        // left by an earlier run has an older lastContact), as an administrator would check
        // before submitting: a job submitted while the controller is still listing the members'
        // nodes is first judged against members without nodes ("Inadmissible ... has no
        // nodes"), and only admitted a sync later.
        let since = started
            .checked_sub(jiff::SignedDuration::from_secs(2))
            .expect("a time");
        let mcs = fleet::dynamic_api(
            hub,
            "muster.dev/v1alpha1",
            "MemberCluster",
            "memberclusters",
            None,
        );
        wait_for("MemberClusters Ready", T, || {
            let mcs = mcs.clone();
            async move {
                let mut not = Vec::new();
                for m in fleet::MEMBERS {
                    let o = serde_json::to_value(mcs.get(m).await.map_err(|e| e.to_string())?)
                        .map_err(|e| e.to_string())?;
                    let ready = o
                        .pointer("/status/conditions")
                        .and_then(Value::as_array)
                        .is_some_and(|a| {
                            a.iter()
                                .any(|c| c["type"] == "Ready" && c["status"] == "True")
                        });
                    let fresh = o
                        .pointer("/status/lastContact")
                        .and_then(Value::as_str)
                        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                        .is_some_and(|t| t >= since);
                    if !(ready && fresh) {
                        not.push(m);
                    }
                }
                if not.is_empty() {
                    Ok(())
                } else {
                    Err(format!("not Ready: {not:?}"))
                }
            }
        })
        .await;
        fleet::create_json(hub, "pytorchjobs", pytorchjob(ns, "chart-job"))
            .await
            .expect("create");
        let obj = fleet::dynamic_api(
            hub,
            "kubeflow.org/v1",
            "PyTorchJob",
            "pytorchjobs",
            Some(ns),
        )
        .get("chart-job")
        .await
        .expect("hub job");
        let obj = serde_json::to_value(obj).expect("json");
        assert_eq!(
            obj.pointer("/spec/runPolicy/suspend"),
            Some(&json!(true)),
            "suspended by the webhook"
        );
        let q = hub::wait_queued_state(
            hub,
            ns,
            "PyTorchJob",
            "chart-job",
            QueuedJobState::Running,
            T,
        )
        .await;
        let st = q.status.expect("status");
        let cluster = st.cluster.clone().expect("cluster");
        assert_eq!(
            st.pods.as_ref().map(|p| (p.expected, p.running)),
            Some((3, 3)),
            "{st:?}"
        );
        assert_eq!(
            hub::members_with(
                "kubeflow.org/v1",
                "PyTorchJob",
                "pytorchjobs",
                ns,
                "chart-job"
            )
            .await,
            vec![cluster.clone()],
            "exactly one member holds the job"
        );
        // The hub job's status is copied back (patch of pytorchjobs/status).
        wait_for("hub job status synced", T, || async move {
            let o = fleet::dynamic_api(
                hub,
                "kubeflow.org/v1",
                "PyTorchJob",
                "pytorchjobs",
                Some(ns),
            )
            .get("chart-job")
            .await
            .map_err(|e| e.to_string())?;
            let o = serde_json::to_value(o).map_err(|e| e.to_string())?;
            let running = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|a| {
                    a.iter()
                        .any(|c| c["type"] == "Running" && c["status"] == "True")
                });
            if running {
                Ok(())
            } else {
                Err(format!("{:?}", o.get("status")))
            }
        })
        .await;
        let events = hub::events_for(hub, ns, "chart-job").await;
        hub::assert_history(&events);

        // A batch Job finishes (batch jobs, jobs/status).
        let job = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "chart-batch", "namespace": ns},
            "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}}}
        });
        fleet::create_json(hub, "jobs", job)
            .await
            .expect("create Job");
        hub::wait_queued_state(hub, ns, "Job", "chart-batch", QueuedJobState::Finished, T).await;

        let trees = fleet::dynamic_api(
            hub,
            "scheduling.sigs.k8s.io/v1beta1",
            "ElasticQuotaTree",
            "elasticquotatrees",
            Some("kube-system"),
        );
        let t = serde_json::to_value(trees.get("muster-e2e").await.expect("tree")).expect("json");
        assert_eq!(
            t.pointer("/status/conditions/0/type"),
            Some(&json!("Valid")),
            "{t}"
        );
        assert_eq!(
            t.pointer("/status/conditions/0/status"),
            Some(&json!("True")),
            "{t}"
        );
    });
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(result)).await;
    let mut controller = controller;
    let exited = controller.child.try_wait().ok().flatten();

    // Clean up while the controller still runs (deleting hub jobs deletes the member copies).
    fleet::delete_namespace(&hub, &ns).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for m in fleet::MEMBERS {
        fleet::delete_namespace(&client_for(m).await, &ns).await;
    }
    hub::delete_webhook(&hub).await;
    let log = controller.log_text();
    let tail = controller.log_tail();
    drop(controller);
    for d in objects
        .iter()
        .filter(|d| d["kind"] != "MutatingWebhookConfiguration")
    {
        delete(&hub, &found, d).await;
    }
    let _ = std::fs::remove_file(&kubeconfig);

    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(_)) => panic!("the scenario timed out; controller log tail:\n{tail}"),
        Err(e) => {
            let msg = fleet::panic_message(e.as_ref());
            panic!("the scenario failed: {msg}\ncontroller log tail:\n{tail}")
        }
    }
    assert!(
        exited.is_none(),
        "the controller exited early ({exited:?}):\n{tail}"
    );
    let denied: Vec<&str> = log
        .lines()
        .filter(|l| l.to_lowercase().contains("forbidden"))
        .collect();
    assert!(
        denied.is_empty(),
        "the chart's RBAC refused the controller something:\n{}",
        denied.join("\n")
    );
}

/// `rbac.jobNamespaces`: the writes on jobs and the dry-run pod creates move from the
/// ClusterRole to a Role in each listed namespace; list and watch stay cluster-wide.
#[test]
fn job_writes_are_granted_per_namespace_when_listed() {
    let docs = render(&["rbac.jobNamespaces={team-a,team-b}"]);
    let cluster = grants(&one(&docs, "ClusterRole", "muster")["rules"]);
    for k in JobKind::ALL {
        let ar = kinds::api_resource(k);
        let on = |verb: &str, res: &str| {
            cluster
                .iter()
                .any(|g| g.0 == ar.group && g.1 == res && g.2 == verb)
        };
        assert!(on("list", &ar.plural) && on("watch", &ar.plural), "{k:?}");
        assert!(!on("patch", &ar.plural), "{k:?} patch stays cluster-wide");
        assert!(!on("patch", &format!("{}/status", ar.plural)), "{k:?}");
    }
    assert!(
        !cluster.iter().any(|g| g.1 == "pods"),
        "pods create stays cluster-wide"
    );
    for ns in ["team-a", "team-b"] {
        let role = all(&docs, "Role")
            .into_iter()
            .find(|r| r["metadata"]["name"] == "muster-jobs" && r["metadata"]["namespace"] == ns)
            .unwrap_or_else(|| panic!("no Role muster-jobs in {ns}"));
        let g = grants(&role["rules"]);
        for k in JobKind::ALL {
            let ar = kinds::api_resource(k);
            assert!(
                g.iter().any(|x| x.1 == ar.plural && x.2 == "patch"),
                "{ns} {k:?}"
            );
            let status = format!("{}/status", ar.plural);
            assert!(
                g.iter().any(|x| x.1 == status && x.2 == "patch"),
                "{ns} {k:?}"
            );
        }
        assert!(g.iter().any(|x| x.1 == "pods" && x.2 == "create"), "{ns}");
        let b = all(&docs, "RoleBinding")
            .into_iter()
            .find(|r| r["metadata"]["name"] == "muster-jobs" && r["metadata"]["namespace"] == ns)
            .unwrap_or_else(|| panic!("no RoleBinding muster-jobs in {ns}"));
        assert_eq!(
            b["subjects"],
            json!([{"kind": "ServiceAccount", "name": "muster", "namespace": NAMESPACE}])
        );
    }
}
