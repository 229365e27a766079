//! How the controller runs: its flags as `main` parses them (`Options`), and the checks they
//! must pass before anything starts.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{leader, registration, secret_ref};

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Kubeconfig of the hub (in-cluster or the default chain when `None`).
    pub hub_kubeconfig: Option<PathBuf>,
    /// The controller's namespace: member Secrets without a namespace live here.
    pub namespace: String,
    /// Namespace of the ElasticQuotaTree in force.
    pub quota_namespace: String,
    /// Identity of this hub, written on member copies (`muster.dev/origin`).
    pub origin: String,
    /// Name of this replica (Events, leader election).
    pub instance: String,
    /// /healthz, /readyz and /metrics (`http`).
    pub http_addr: SocketAddr,
    /// /snapshot (every tenant's jobs): loopback unless `--snapshot-insecure-expose` (`http`).
    pub snapshot_addr: SocketAddr,
    /// The admission webhook (TLS); none = no webhook (the sync loop still suspends).
    pub webhook_addr: Option<SocketAddr>,
    pub webhook_cert_dir: PathBuf,
    /// DNS names / IPs the serving certificate is made for.
    pub webhook_hosts: Vec<String>,
    /// Register the MutatingWebhookConfiguration pointing here.
    pub webhook_endpoint: Option<registration::Endpoint>,
    pub webhook_failure_policy: String,
    /// Longest time between two syncs when nothing happens.
    pub resync: Duration,
    /// How often every waiting job's start is forecast (zero: never).
    pub estimate_interval: Duration,
    /// Wall time one forecast may take (zero: no bound); the jobs it has not seen start by
    /// then get a lower bound.
    pub estimate_budget: Duration,
    /// How expected run times are chosen.
    pub runtime_rules: crate::runtime::Rules,
    /// Take a dispatched job back when not every pod runs this long after dispatch.
    pub pods_ready_timeout: Duration,
    /// Take a running job back when some of its pods are gone (node lost) this long.
    pub pods_lost_timeout: Duration,
    /// Requeue the jobs of a member that does not answer for this long.
    pub member_lost_grace: Duration,
    /// Backoff before a job taken back is queued again: base·2^(n-1), at most max.
    pub requeue_backoff: Duration,
    pub requeue_backoff_max: Duration,
    /// What to do with the jobs of a member that does not answer (`--partition-policy`).
    pub partition: crate::lifecycle::Partition,
    /// Take a job back when its copy stays absent from its answering member this long.
    pub copy_missing_grace: Duration,
    /// Take a job back (avoiding the member) when creating its copy fails this long.
    pub create_give_up: Duration,
    /// Leader election (None: this replica always acts).
    pub lease: Option<leader::LeaseConfig>,
    /// Accept member kubeconfigs that run programs or read files (`kubeconfig::check`).
    pub allow_kubeconfig_files_and_exec: bool,
    /// Where member kubeconfig Secrets may be read (`secret_ref`).
    pub member_secret_namespaces: secret_ref::SecretNamespaces,
    /// How long the webhook and health servers keep answering, not ready, after a stop.
    pub shutdown_drain: Duration,
    /// Check every pod template with a server-side dry-run Pod create in the job's hub
    /// namespace before a job is queued (`hubcheck`); off with `--hub-pod-admission=false`.
    pub hub_pod_admission: bool,
}

/// Flags checked before anything starts: `--origin` must be a label value (it labels every
/// member copy), and a lease must be renewed at least twice within its duration.
pub fn check_flags(
    origin: &str,
    leader_elect: bool,
    lease_duration_seconds: u64,
    lease_retry_seconds: u64,
) -> Result<(), String> {
    if !crate::labels::is_label_name(origin) {
        return Err(format!(
            "--origin {origin:?}: must be a label value (1-63 characters [A-Za-z0-9_.-], starting and ending with a letter or digit)"
        ));
    }
    if leader_elect && lease_retry_seconds.max(1) * 2 > lease_duration_seconds.max(2) {
        return Err(format!(
            "--lease-retry-seconds {lease_retry_seconds}: must be at most half of --lease-duration-seconds ({lease_duration_seconds}), so that the leader renews before its lease can expire"
        ));
    }
    Ok(())
}
