//! The `muster` command line: `muster sim` runs the scheduling core on a scenario (and can write
//! the metrics a controller would export); `muster controller` runs it against real clusters;
//! `muster crds` prints the CRDs.

#[macro_use]
mod stdout;
mod cmd_sim;
mod cmd_whatif;

/// mimalloc instead of glibc's malloc: the simulator allocates and frees many small objects
/// (manifest trees, reason strings, plans); see docs/benchmarks.md.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use muster::lifecycle::Partition;
use muster::sim;

#[derive(Parser)]
#[command(
    name = "muster",
    version,
    about = "Queue, quota and gang-dispatch training jobs across clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the scheduling core on a scenario with a virtual clock (default: the embedded demo).
    Sim {
        /// Scenario file (YAML). Without it, the embedded default scenario runs.
        scenario: Option<String>,
        /// Output format.
        #[arg(long, short, value_enum, default_value_t = Output::Table)]
        output: Output,
        /// Explain why this job waits (repeatable): when it first waits, when it is dispatched
        /// and at the end of the run.
        #[arg(long, value_name = "NAMESPACE/NAME")]
        explain: Vec<String>,
        /// Write the Prometheus exposition of the final state to FILE (`-`: to stdout, in place
        /// of the report).
        #[arg(long, value_name = "FILE")]
        metrics: Option<String>,
        /// Take the metrics at this virtual time (e.g. 10m) instead of at the end.
        #[arg(long, value_name = "DURATION", requires = "metrics")]
        metrics_at: Option<String>,
        /// Skip the start-time estimate made at each job's submission (one forecast per
        /// instant at which a submitted job has to wait; see docs/sim.md for the cost).
        #[arg(long)]
        no_estimates: bool,
        /// Make every estimate at its job's submission, however long the forecasts take. By
        /// default the forecasts may spend about twice the run's own admission cycles (after a
        /// first 20,000): past that, estimates are made later in the wait or skipped, and the
        /// summary says how many (docs/sim.md#the-estimate-budget).
        #[arg(long, conflicts_with = "no_estimates")]
        exact_estimates: bool,
        /// Instead of a scenario: the deterministic simulation with faults, seeds
        /// FROM..FROM+N (see --faults-from); prints each broken invariant with its replay command.
        #[arg(long, value_name = "N", conflicts_with_all = ["scenario", "faults_seed", "metrics"])]
        faults: Option<u64>,
        /// First seed of --faults.
        #[arg(long, value_name = "FROM", default_value_t = 0, requires = "faults")]
        faults_from: u64,
        /// Replay one seed of the simulation with faults and print its whole trace.
        #[arg(long, value_name = "SEED", conflicts_with_all = ["scenario", "metrics"])]
        faults_seed: Option<u64>,
        /// Partition policy of the simulation with faults (as the controller's
        /// --partition-policy); `both` runs every seed under each.
        #[arg(long, value_enum, default_value_t = PolicyArg::Both)]
        partition_policy: PolicyArg,
        /// Re-introduce a defect of earlier controllers into the simulated controller, to see
        /// the invariants catch it.
        #[arg(long, value_parser = defect_parser())]
        faults_defect: Option<muster::sim::faults::Defect>,
    },
    /// Run the hub controller (suspend, queue, admit, dispatch, sync status).
    Controller(Box<ControllerArgs>),
    /// Why is my job waiting? What muster knows about a job, read from the hub.
    Explain {
        /// NAMESPACE/NAME of the job.
        job: String,
        /// The job's kind, when several kinds share the name.
        #[arg(long)]
        kind: Option<String>,
        /// Kubeconfig of the hub (default: $KUBECONFIG / ~/.kube/config).
        #[arg(long, env = "MUSTER_KUBECONFIG")]
        kubeconfig: Option<std::path::PathBuf>,
    },
    /// The live state of the leading controller as a `muster sim` scenario (YAML on stdout):
    /// members and nodes, the quota tree, PriorityClasses, running jobs with their remaining
    /// expected time, waiting jobs in queue order.
    Snapshot {
        #[command(flatten)]
        from: LiveArgs,
    },
    /// When would each waiting job start if ...? The start-time estimates before and after each
    /// change, from the live state or a scenario file.
    WhatIf {
        /// A scenario file (e.g. from `muster snapshot`) instead of the live state.
        #[arg(long, conflicts_with_all = ["url", "kubeconfig"])]
        scenario: Option<String>,
        #[command(flatten)]
        from: LiveArgs,
        /// A change to try (repeatable, applied in order): submit=JOB.yaml,
        /// add-member=CLUSTER.yaml, remove-member=NAME, add-nodes=MEMBER:NODES.yaml,
        /// remove-node=MEMBER/NODE, tree=TREE.yaml, priority=NAMESPACE/NAME:CLASS.
        #[arg(long, value_name = "KIND=ARG")]
        change: Vec<String>,
        /// Run time of a submitted job that declares none.
        #[arg(long, default_value = "1h", value_parser = parse_runtime)]
        default_runtime: u64,
    },
    /// Print the CustomResourceDefinitions muster serves (QueuedJob, MemberCluster,
    /// ElasticQuotaTree) as YAML.
    Crds {
        /// Write one file per CRD (`<group>_<plural>.yaml`) into this directory instead.
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
}

#[derive(clap::Args)]
struct ControllerArgs {
    /// Kubeconfig of the hub (default: in-cluster, then $KUBECONFIG / ~/.kube/config).
    #[arg(long, env = "MUSTER_KUBECONFIG")]
    kubeconfig: Option<std::path::PathBuf>,
    /// The controller's namespace (member Secrets without a namespace are read here).
    #[arg(long, env = "MUSTER_NAMESPACE", default_value = "muster-system")]
    namespace: String,
    /// Namespace of the ElasticQuotaTree in force.
    #[arg(long, default_value = "kube-system")]
    quota_namespace: String,
    /// This hub's identity, written on member copies (label muster.dev/origin).
    #[arg(long, default_value = "hub")]
    origin: String,
    /// Name of this replica (Events, leader election); default: the host name and process id.
    #[arg(long, env = "POD_NAME")]
    instance: Option<String>,
    /// Address of /healthz, /readyz and /metrics (nothing there shows a job's content).
    #[arg(long, default_value = "127.0.0.1:8080")]
    http_addr: std::net::SocketAddr,
    /// Address of /snapshot (every tenant's jobs, unauthenticated): loopback only, reached by
    /// `muster snapshot` (a port-forward) or `kubectl port-forward`.
    #[arg(long, default_value = muster::controller::http::SNAPSHOT_ADDR)]
    snapshot_addr: std::net::SocketAddr,
    /// Serve /snapshot on a --snapshot-addr that is not loopback (anyone who reaches it reads
    /// every tenant's jobs).
    #[arg(long)]
    snapshot_insecure_expose: bool,
    /// Address of the admission webhook (TLS); omit to run without the webhook.
    #[arg(long)]
    webhook_addr: Option<std::net::SocketAddr>,
    /// Directory with tls.crt, tls.key and ca.crt (read again when they change); created
    /// self-signed when empty.
    #[arg(long, default_value = "/tmp/muster-webhook")]
    webhook_cert_dir: std::path::PathBuf,
    /// Host names and IPs the self-signed certificate is made for.
    #[arg(long, value_delimiter = ',', default_value = "localhost,127.0.0.1")]
    webhook_hosts: Vec<String>,
    /// Register the MutatingWebhookConfiguration with this URL (out-of-cluster runs).
    #[arg(long)]
    webhook_url: Option<String>,
    /// Register the MutatingWebhookConfiguration with this Service (`namespace/name:port`).
    #[arg(long)]
    webhook_service: Option<String>,
    /// What the API server does when the webhook does not answer: Fail or Ignore.
    #[arg(long, default_value = "Fail", value_parser = ["Fail", "Ignore"])]
    webhook_failure_policy: String,
    /// Longest time between two syncs, in seconds.
    #[arg(long, default_value_t = 5)]
    resync_seconds: u64,
    /// Forecast every waiting job's start this often, in seconds (0: never).
    #[arg(long, default_value_t = 30)]
    estimate_interval_seconds: u64,
    /// Wall time one forecast may take, in milliseconds (0: no bound). The forward run stops
    /// at the first instant past it; the jobs it has not seen start by then get
    /// `status.estimate.notBefore` (a lower bound) instead of a start.
    #[arg(long, default_value_t = 200)]
    estimate_budget_ms: u64,
    /// Expected run time of a job that declares none (no muster.dev/expected-runtime, no
    /// deadline) and whose queue has no history of its shape yet (e.g. 1h, 90m).
    #[arg(long, default_value = "1h", value_parser = parse_runtime)]
    default_runtime: u64,
    /// Which percentile of the run times of finished jobs of the same queue and shape is their
    /// expected run time.
    #[arg(long, default_value_t = 80, value_parser = clap::value_parser!(u8).range(1..=100))]
    runtime_percentile: u8,
    /// Take a dispatched job back when not every pod runs this many seconds after dispatch.
    #[arg(long, default_value_t = 300)]
    pods_ready_timeout_seconds: u64,
    /// Take a job back when some of its pods stopped running (node lost) for this many seconds.
    #[arg(long, default_value_t = 120)]
    pods_lost_timeout_seconds: u64,
    /// Requeue the jobs of a member that does not answer for this many seconds.
    #[arg(long, default_value_t = 120)]
    member_lost_grace_seconds: u64,
    /// Backoff before a job taken back is queued again: base·2^(n-1) seconds ...
    #[arg(long, default_value_t = 30)]
    requeue_backoff_seconds: u64,
    /// ... at most this many.
    #[arg(long, default_value_t = 1800)]
    requeue_backoff_max_seconds: u64,
    /// What to do with a job whose member stops answering: `replace` places it elsewhere after
    /// --member-lost-grace-seconds (its old copy may still run unseen until the member answers
    /// again; the QueuedJob says so), `wait` keeps it there, quota held, until the member answers
    /// (never two copies).
    #[arg(long, value_enum, default_value_t = ControllerPolicy::Replace)]
    partition_policy: ControllerPolicy,
    /// Take a job back when its copy stays absent from its (answering) member this many seconds.
    #[arg(long, default_value_t = 15)]
    copy_missing_grace_seconds: u64,
    /// Take a job back (avoiding that member) when creating its copy fails this many seconds.
    #[arg(long, default_value_t = 60)]
    create_give_up_seconds: u64,
    /// Elect a leader with a Lease so that only one replica acts.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// Name of the Lease (in --namespace).
    #[arg(long, default_value = "muster-controller")]
    lease_name: String,
    /// Lease validity after a renewal, in seconds.
    #[arg(long, default_value_t = 15)]
    lease_duration_seconds: u64,
    /// How often the lease is renewed (or checked), in seconds.
    #[arg(long, default_value_t = 3)]
    lease_retry_seconds: u64,
    /// After SIGTERM / SIGINT, how long /readyz answers 503 while the webhook still answers, so
    /// that the Service stops sending calls here before the process exits.
    #[arg(long, default_value_t = 5)]
    shutdown_drain_seconds: u64,
    /// Accept member kubeconfigs with exec, auth-provider, tokenFile or file paths (by default
    /// only inline credentials: whoever writes a member Secret could otherwise run commands in
    /// the controller or read its files).
    #[arg(long)]
    allow_kubeconfig_files_and_exec: bool,
    /// Check pod templates against the hub's admission: every distinct pod template is sent to
    /// the hub as a server-side dry-run Pod create in the job's namespace before the job is
    /// queued, so Pod Security admission, ValidatingAdmissionPolicies and policy webhooks of
    /// the hub hold for the pods that run on members (needs `create` on pods; false: off).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    hub_pod_admission: bool,
    /// More namespaces where a MemberCluster's kubeconfig Secret may be
    /// (spec.kubeconfigSecretRef.namespace); by default only --namespace.
    #[arg(
        long,
        value_delimiter = ',',
        conflicts_with = "allow_any_secret_namespace"
    )]
    member_secret_namespaces: Vec<String>,
    /// A MemberCluster may name a kubeconfig Secret in any namespace.
    #[arg(long)]
    allow_any_secret_namespace: bool,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// `--faults-defect`: one of the core's defect names.
fn defect_parser() -> impl clap::builder::TypedValueParser<Value = muster::sim::faults::Defect> {
    use clap::builder::TypedValueParser;
    use muster::sim::faults::Defect;
    clap::builder::PossibleValuesParser::new(Defect::ALL.map(|(_, n)| n))
        .try_map(|n| Defect::named(&n).ok_or_else(|| format!("no defect named {n}")))
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PolicyArg {
    Replace,
    Wait,
    Both,
}

impl PolicyArg {
    fn policies(self) -> Vec<Partition> {
        match self {
            PolicyArg::Replace => vec![Partition::Replace],
            PolicyArg::Wait => vec![Partition::Wait],
            PolicyArg::Both => vec![Partition::Replace, Partition::Wait],
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum ControllerPolicy {
    Replace,
    Wait,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Json,
    Table,
}

/// A duration flag (`90s`, `10m`, `1h30m`) in milliseconds.
fn parse_runtime(s: &str) -> Result<u64, String> {
    match sim::parse_duration(s)? {
        0 => Err("must be longer than 0".into()),
        ms => Ok(ms),
    }
}

/// Where the live state is read from.
#[derive(clap::Args, Debug)]
struct LiveArgs {
    /// The controller's snapshot listener (`http://HOST:PORT`, its --snapshot-addr), read
    /// directly: an out-of-cluster controller, or a `kubectl port-forward`.
    #[arg(long)]
    url: Option<String>,
    /// Kubeconfig of the hub (default: $KUBECONFIG / ~/.kube/config): the snapshot is read
    /// through a port-forward to the leading controller pod (needs `create pods/portforward`,
    /// `list pods` and `get leases` in --namespace).
    #[arg(long, env = "MUSTER_KUBECONFIG", conflicts_with = "url")]
    kubeconfig: Option<std::path::PathBuf>,
    /// The controller's namespace.
    #[arg(long, default_value = "muster-system", conflicts_with = "url")]
    namespace: String,
    /// The port of the controller's --snapshot-addr in its pod.
    #[arg(long, default_value_t = 8081, conflicts_with = "url")]
    snapshot_port: u16,
    /// The controller's leader-election Lease (its holder is asked first).
    #[arg(long, default_value = "muster-controller", conflicts_with = "url")]
    lease_name: String,
}

impl LiveArgs {
    fn into_from(self, scenario: Option<String>) -> cmd_whatif::From {
        cmd_whatif::From {
            scenario,
            url: self.url,
            kubeconfig: self.kubeconfig,
            namespace: self.namespace,
            port: self.snapshot_port,
            lease: self.lease_name,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Every command but the controller ends soon: it keeps the pages it frees.
    if !matches!(cli.command, Command::Controller(_)) {
        muster::alloc::keep_freed_pages();
    }
    match cli.command {
        Command::Sim {
            faults,
            faults_from,
            faults_seed,
            partition_policy,
            faults_defect,
            ..
        } if faults.is_some() || faults_seed.is_some() => cmd_sim::run_faults(
            faults_from,
            faults,
            faults_seed,
            partition_policy,
            faults_defect,
        ),
        Command::Sim {
            scenario,
            output,
            explain,
            metrics,
            metrics_at,
            no_estimates,
            exact_estimates,
            ..
        } => cmd_sim::run_sim(
            scenario.as_deref(),
            output,
            &explain,
            metrics.as_deref(),
            metrics_at.as_deref(),
            (!no_estimates).then_some(if exact_estimates {
                sim::Budget::unbounded()
            } else {
                sim::Budget::DEFAULT
            }),
        ),
        Command::Controller(args) => run_controller(*args),
        Command::Explain {
            job,
            kind,
            kubeconfig,
        } => run_explain(&job, kind.as_deref(), kubeconfig),
        Command::Snapshot { from } => cmd_whatif::snapshot(&from.into_from(None)),
        Command::WhatIf {
            scenario,
            from,
            change,
            default_runtime,
        } => cmd_whatif::what_if(&from.into_from(scenario), &change, default_runtime),
        Command::Crds { dir: None } => match muster::controller::crd::crds_yaml() {
            Ok(y) => {
                out!("{y}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Crds { dir: Some(dir) } => write_crd_files(&dir),
    }
}

fn run_explain(job: &str, kind: Option<&str>, kubeconfig: Option<std::path::PathBuf>) -> ExitCode {
    let Some((ns, name)) = job.split_once('/') else {
        eprintln!("error: expected NAMESPACE/NAME, got {job:?}");
        return ExitCode::from(2);
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        let client = match kubeconfig {
            Some(p) => {
                let text = std::fs::read_to_string(&p)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
                muster::controller::members::client_from_kubeconfig("hub", &text).await?
            }
            None => kube::Client::try_default().await?,
        };
        muster::controller::explain::explain(&client, ns, name, kind).await
    });
    match result {
        Ok(text) => {
            outln!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `muster crds --dir DIR`: one file per CRD, replacing files of the same name.
fn write_crd_files(dir: &std::path::Path) -> ExitCode {
    let files = match muster::controller::crd::crd_files() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("error: {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    for (name, text) in files {
        let path = dir.join(name);
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("error: {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        outln!("{}", path.display());
    }
    ExitCode::SUCCESS
}

fn run_controller(a: ControllerArgs) -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match a.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
    let endpoint = match (&a.webhook_url, &a.webhook_service) {
        (Some(u), _) => Some(muster::controller::registration::Endpoint::Url(u.clone())),
        (None, Some(s)) => {
            let parsed = s.split_once('/').and_then(|(ns, rest)| {
                let (name, port) = rest.split_once(':').unwrap_or((rest, "443"));
                port.parse().ok().map(|p| (ns, name, p))
            });
            match parsed {
                Some((ns, name, port)) => {
                    Some(muster::controller::registration::Endpoint::Service {
                        namespace: ns.to_string(),
                        name: name.to_string(),
                        port,
                    })
                }
                None => {
                    eprintln!(
                        "error: --webhook-service: expected namespace/name[:port], got {s:?}"
                    );
                    return ExitCode::from(2);
                }
            }
        }
        (None, None) => None,
    };
    if let Err(e) = muster::controller::check_flags(
        &a.origin,
        a.leader_elect,
        a.lease_duration_seconds,
        a.lease_retry_seconds,
    ) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    if let Err(e) =
        muster::controller::http::check_snapshot_addr(a.snapshot_addr, a.snapshot_insecure_expose)
    {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    // Out of a cluster two replicas may share a host: the process id keeps their identities
    // (and so their leases) apart.
    let instance = a.instance.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "muster".to_string());
        format!("{host}-{}", std::process::id())
    });
    let opts = muster::controller::Options {
        hub_kubeconfig: a.kubeconfig,
        namespace: a.namespace.clone(),
        quota_namespace: a.quota_namespace,
        origin: a.origin,
        instance: instance.clone(),
        http_addr: a.http_addr,
        snapshot_addr: a.snapshot_addr,
        webhook_addr: a.webhook_addr,
        webhook_cert_dir: a.webhook_cert_dir,
        webhook_hosts: a.webhook_hosts,
        webhook_endpoint: endpoint,
        webhook_failure_policy: a.webhook_failure_policy,
        resync: Duration::from_secs(a.resync_seconds.max(1)),
        estimate_interval: Duration::from_secs(a.estimate_interval_seconds),
        estimate_budget: Duration::from_millis(a.estimate_budget_ms),
        runtime_rules: muster::runtime::Rules {
            default: a.default_runtime,
            quantile: a.runtime_percentile,
            ..muster::runtime::Rules::default()
        },
        pods_ready_timeout: Duration::from_secs(a.pods_ready_timeout_seconds),
        pods_lost_timeout: Duration::from_secs(a.pods_lost_timeout_seconds),
        member_lost_grace: Duration::from_secs(a.member_lost_grace_seconds),
        requeue_backoff: Duration::from_secs(a.requeue_backoff_seconds),
        requeue_backoff_max: Duration::from_secs(a.requeue_backoff_max_seconds),
        partition: match a.partition_policy {
            ControllerPolicy::Replace => Partition::Replace,
            ControllerPolicy::Wait => Partition::Wait,
        },
        copy_missing_grace: Duration::from_secs(a.copy_missing_grace_seconds),
        create_give_up: Duration::from_secs(a.create_give_up_seconds),
        lease: a
            .leader_elect
            .then(|| muster::controller::leader::LeaseConfig {
                namespace: a.namespace.clone(),
                name: a.lease_name.clone(),
                identity: instance.clone(),
                duration: Duration::from_secs(a.lease_duration_seconds.max(2)),
                retry: Duration::from_secs(a.lease_retry_seconds.max(1)),
            }),
        allow_kubeconfig_files_and_exec: a.allow_kubeconfig_files_and_exec,
        member_secret_namespaces: muster::controller::secret_ref::SecretNamespaces::from_flags(
            &a.member_secret_namespaces,
            a.allow_any_secret_namespace,
        ),
        shutdown_drain: Duration::from_secs(a.shutdown_drain_seconds),
        hub_pod_admission: a.hub_pod_admission,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(muster::controller::run(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "controller failed");
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
