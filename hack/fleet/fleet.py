#!/usr/bin/env python3
"""muster's local fleet: one hub and three member clusters on 127.0.0.1.

Run through hack/fleet/fleet.sh (which sets FLEET_* from lib.sh), normally via make:
  up      start etcd, the four apiservers, the hub's controller-manager and, on each member, a
          controller-manager, scheduler, kwok, training-operator, JobSet controller, KubeRay
          operator, MPI operator and Kubeflow Trainer; install CRDs (and Trainer's default
          ClusterTrainingRuntimes, hub included); create fake nodes from the fleet file; wait
          until everything is ready. Reuses a healthy running fleet; in a running fleet whose
          etcd and apiservers are healthy, a controller that is gone (the MPI operator exits when
          it cannot renew its Lease) is started again on its own.
  down    stop every process it started, by pid; check that no port is left open.
  status  one line per component: pid, health, RSS, log.

Only the Python standard library and PyYAML are used. Runtime state lives in $FLEET_STATE
(<repo>/.fleet): certs, kubeconfigs, etcd data, logs, pid files.
"""

import argparse
import calendar
import concurrent.futures
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import yaml

BIN = os.environ["FLEET_BIN"]
CRDS = os.environ["FLEET_CRDS"]
STAGES = os.environ["FLEET_STAGES"]
JOBSET = os.environ["FLEET_JOBSET"]
TRAINER = os.environ["FLEET_TRAINER"]
STATE = os.environ["FLEET_STATE"]
REPO = os.environ["FLEET_REPO_ROOT"]
BUILD = os.environ.get("FLEET_BUILD_KEY", "")

HUB = "hub"
MEMBERS = ["member-a", "member-b", "member-c"]
CLUSTERS = [HUB] + MEMBERS
PORT_BASE = int(os.environ.get("FLEET_PORT_BASE", "16400"))

# The training-operator's cert rotator checks this fixed path (a constant in v1.9.x), whatever
# TMPDIR says; its webhook *server* reads os.TempDir()/k8s-webhook-server/serving-certs.
ROTATOR_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"

# Schemes the training-operator runs. Not "mpijob": its MPIJob is kubeflow.org/v1, while the fleet
# installs the MPI operator's MPIJob v2beta1 CRD under the same name (mpijobs.kubeflow.org).
TRAINING_SCHEMES = ["pytorchjob", "tfjob", "xgboostjob", "paddlejob", "jaxjob"]

READY_TIMEOUT = float(os.environ.get("FLEET_READY_TIMEOUT", "180"))


def log(msg):
    print(f"[fleet {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class FleetError(Exception):
    pass


def p(*parts):
    return os.path.join(STATE, *parts)


# ---------------------------------------------------------------------------------------------
# Ports and components


def cluster_index(cluster):
    return CLUSTERS.index(cluster)


def ports(cluster=None):
    b = PORT_BASE
    if cluster is None:
        return {"etcd-client": b, "etcd-peer": b + 1}
    i = cluster_index(cluster)
    return {
        "apiserver": b + 40 + i,
        "controller-manager": b + 50 + i,
        "scheduler": b + 60 + i,
        "kwok": b + 70 + i,
        "training-operator-metrics": b + 80 + i,
        "training-operator-health": b + 90 + i,
        "training-operator-webhook": b + 100 + i,
        "jobset-metrics": b + 110 + i,
        "jobset-health": b + 120 + i,
        "jobset-webhook": b + 130 + i,
        "kuberay-metrics": b + 140 + i,
        "kuberay-health": b + 150 + i,
        "mpi-operator-health": b + 160 + i,
        "trainer-metrics": b + 170 + i,
        "trainer-health": b + 180 + i,
        "trainer-webhook": b + 190 + i,
        # Only listened on (every interface) with the TrainJobStatus feature gate, off here.
        "trainer-status": b + 200 + i,
    }


def components():
    """Every process of the fleet, in start order: (name, cluster or None, binary)."""
    out = [("etcd", None, "etcd")]
    out += [(f"{c}/kube-apiserver", c, "kube-apiserver") for c in CLUSTERS]
    out += [(f"{HUB}/kube-controller-manager", HUB, "kube-controller-manager")]
    for c in MEMBERS:
        out += [
            (f"{c}/kube-controller-manager", c, "kube-controller-manager"),
            (f"{c}/kube-scheduler", c, "kube-scheduler"),
            (f"{c}/kwok", c, "kwok"),
            (f"{c}/training-operator", c, "training-operator"),
            (f"{c}/jobset-controller", c, "jobset-controller"),
            (f"{c}/kuberay-operator", c, "kuberay-operator"),
            (f"{c}/mpi-operator", c, "mpi-operator"),
            (f"{c}/trainer-controller-manager", c, "trainer-controller-manager"),
        ]
    return out


def log_path(name):
    return p("logs", name.replace("/", "_") + ".log")


def pid_path(name):
    return p("pids", name.replace("/", "_") + ".pid")


def kubeconfig_path(cluster):
    return p("kubeconfigs", f"{cluster}.kubeconfig")


# ---------------------------------------------------------------------------------------------
# Certificates (openssl) and kubeconfigs


def run(args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise FleetError(f"{' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


def make_pki():
    d = p("pki")
    os.makedirs(d, exist_ok=True)
    ext = os.path.join(d, "ext.cnf")
    with open(ext, "w") as f:
        f.write(
            "[req]\ndistinguished_name=dn\nprompt=no\n[dn]\nCN=muster-fleet\n"
            "[ca]\nbasicConstraints=critical,CA:TRUE\n"
            "keyUsage=critical,keyCertSign,cRLSign,digitalSignature\n"
            "subjectKeyIdentifier=hash\n"
            "[serving]\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\n"
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
            "DNS:kubernetes.default.svc,DNS:training-operator.kubeflow.svc\n"
            "[client]\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=clientAuth\n"
        )
    ca_key, ca_crt = os.path.join(d, "ca.key"), os.path.join(d, "ca.crt")
    run(["openssl", "req", "-x509", "-config", ext, "-extensions", "ca", "-newkey", "rsa:2048",
         "-nodes", "-days", "30", "-subj", "/CN=muster-fleet-ca", "-keyout", ca_key,
         "-out", ca_crt])

    def signed(name, subj, section):
        key, csr, crt = (os.path.join(d, f"{name}.{x}") for x in ("key", "csr", "crt"))
        run(["openssl", "req", "-config", ext, "-new", "-newkey", "rsa:2048", "-nodes",
             "-subj", subj, "-keyout", key, "-out", csr])
        run(["openssl", "x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key,
             "-CAcreateserial", "-days", "30", "-extfile", ext, "-extensions", section,
             "-out", crt])
        os.unlink(csr)

    signed("serving", "/CN=127.0.0.1", "serving")
    # system:masters: the admin identity every component and test uses in this local fleet.
    signed("admin", "/O=system:masters/CN=muster-fleet-admin", "client")
    run(["openssl", "genrsa", "-out", os.path.join(d, "sa.key"), "2048"])
    run(["openssl", "rsa", "-in", os.path.join(d, "sa.key"), "-pubout",
         "-out", os.path.join(d, "sa.pub")])


def write_kubeconfigs():
    os.makedirs(p("kubeconfigs"), exist_ok=True)

    def b64(path):
        import base64
        with open(path, "rb") as f:
            return base64.b64encode(f.read()).decode()

    for c in CLUSTERS:
        kc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": c, "cluster": {
                "server": f"https://127.0.0.1:{ports(c)['apiserver']}",
                "certificate-authority-data": b64(p("pki", "ca.crt"))}}],
            "users": [{"name": f"{c}-admin", "user": {
                "client-certificate-data": b64(p("pki", "admin.crt")),
                "client-key-data": b64(p("pki", "admin.key"))}}],
            "contexts": [{"name": c, "context": {"cluster": c, "user": f"{c}-admin"}}],
            "current-context": c,
        }
        path = kubeconfig_path(c)
        with open(path + ".tmp", "w") as f:
            yaml.safe_dump(kc, f, sort_keys=False)
        os.chmod(path + ".tmp", 0o600)
        os.replace(path + ".tmp", path)


# ---------------------------------------------------------------------------------------------
# A tiny API client: the admin client certificate over HTTPS to 127.0.0.1


class Api:
    def __init__(self, cluster):
        self.cluster = cluster
        self.base = f"https://127.0.0.1:{ports(cluster)['apiserver']}"
        ctx = ssl.create_default_context(cafile=p("pki", "ca.crt"))
        ctx.load_cert_chain(p("pki", "admin.crt"), p("pki", "admin.key"))
        self.ctx = ctx

    def req(self, method, path, body=None, ctype="application/json", timeout=30):
        data = None if body is None else json.dumps(body).encode()
        r = urllib.request.Request(self.base + path, data=data, method=method)
        r.add_header("Accept", "application/json")
        if data is not None:
            r.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(r, context=self.ctx, timeout=timeout) as resp:
                raw = resp.read()
                return resp.status, (json.loads(raw) if raw.startswith(b"{") else raw.decode())
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, raw.decode(errors="replace")

    def create(self, path, obj):
        code, out = self.req("POST", path, obj)
        if code in (200, 201, 409):  # 409: already exists (idempotent)
            return out
        raise FleetError(f"{self.cluster}: POST {path} -> {code}: {str(out)[:500]}")


def insecure_get(url, timeout=3):
    """GET a component's own health endpoint (self-signed serving certs): returns (code, body)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError as e:
        return None, str(e)


# ---------------------------------------------------------------------------------------------
# Processes


def port_open(port):
    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex(("127.0.0.1", port)) == 0


def all_ports():
    out = dict(ports())
    for c in CLUSTERS:
        for k, v in ports(c).items():
            out[f"{c}/{k}"] = v
    return out


def proc_alive(pid, binary):
    """True if pid runs our binary (guards against a recycled pid)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return os.path.basename(exe.replace(" (deleted)", "")) == binary


def read_pid(name):
    try:
        with open(pid_path(name)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


# When each process was started by this run of fleet.py (epoch seconds).
STARTED = {}


def start(name, binary, args, env=None):
    os.makedirs(p("logs"), exist_ok=True)
    os.makedirs(p("pids"), exist_ok=True)
    exe = os.path.join(BIN, binary)
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("KUBECONFIG"):
            del e[k]
    e.update(env or {})
    with open(log_path(name), "ab") as lf:
        lf.write(f"--- {time.strftime('%F %T')} {exe} {' '.join(args)}\n".encode())
        lf.flush()
        proc = subprocess.Popen([exe] + args, stdout=lf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=e, cwd=STATE,
                                start_new_session=True)
    with open(pid_path(name), "w") as f:
        f.write(f"{proc.pid}\n")
    STARTED[name] = time.time()
    return proc.pid


def tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            lines = f.readlines()[-n:]
        return "".join("    | " + ln for ln in lines)
    except OSError:
        return ""


def fail(name, why):
    lp = log_path(name)
    raise FleetError(f"{name} is not ready: {why}\n  log: {lp}\n{tail(lp)}")


def wait_for(name, binary, check, what, timeout=READY_TIMEOUT):
    """Poll check() until it returns True; fail naming the component and its log."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        pid = read_pid(name)
        if binary and (pid is None or not proc_alive(pid, binary)):
            fail(name, f"process exited while waiting for {what}")
        try:
            ok = check()
        except Exception as e:  # noqa: BLE001 - any failure is "not yet"
            ok, last = False, str(e)
        if ok is True:
            return
        if ok not in (False, None):
            last = ok
        time.sleep(0.5)
    fail(name, f"timed out after {timeout:.0f}s waiting for {what}" + (f" (last: {last})" if last else ""))


def stop_all(quiet=False):
    """Stop every recorded pid: first the controllers, then the apiservers, then etcd (an
    apiserver whose etcd is already gone hangs in its shutdown). SIGTERM, then SIGKILL."""
    names = [n for n, _, _ in components()][::-1]
    binaries = {n: b for n, _, b in components()}
    tiers = [
        [n for n in names if binaries[n] not in ("kube-apiserver", "etcd")],
        [n for n in names if binaries[n] == "kube-apiserver"],
        [n for n in names if binaries[n] == "etcd"],
    ]
    live = []
    for tier in tiers:
        batch = []
        for n in tier:
            pid = read_pid(n)
            if pid is not None and proc_alive(pid, binaries[n]):
                os.kill(pid, signal.SIGTERM)
                batch.append((n, pid))
        deadline = time.monotonic() + 20
        for n, pid in batch:
            while proc_alive(pid, binaries[n]) and time.monotonic() < deadline:
                time.sleep(0.1)
            if proc_alive(pid, binaries[n]):
                log(f"{n} (pid {pid}) ignored SIGTERM for 20s; sending SIGKILL")
                os.kill(pid, signal.SIGKILL)
        for n, pid in batch:
            t = time.monotonic() + 5
            while proc_alive(pid, binaries[n]) and time.monotonic() < t:
                time.sleep(0.1)
        live += batch
    for n in names:
        try:
            os.unlink(pid_path(n))
        except OSError:
            pass
    marker = p("rotator-certs-created")
    if os.path.exists(marker):
        shutil.rmtree(os.path.dirname(ROTATOR_CERT_DIR), ignore_errors=True)
        os.unlink(marker)
    if live and not quiet:
        log(f"stopped {len(live)} processes: " + ", ".join(f"{n}={pid}" for n, pid in live))
    busy = {}
    t = time.monotonic() + (10 if live else 0)
    while live and time.monotonic() < t:
        busy = {k: v for k, v in all_ports().items() if port_open(v)}
        if not busy:
            break
        time.sleep(0.2)
    if busy:
        raise FleetError("ports still open after stopping the fleet: "
                         + ", ".join(f"{k}={v}" for k, v in busy.items()))
    return live


# ---------------------------------------------------------------------------------------------
# Bring-up


def start_etcd():
    pt = ports()
    data = p("etcd")
    start("etcd", "etcd", [
        "--name=muster-fleet", f"--data-dir={data}",
        f"--listen-client-urls=http://127.0.0.1:{pt['etcd-client']}",
        f"--advertise-client-urls=http://127.0.0.1:{pt['etcd-client']}",
        f"--listen-peer-urls=http://127.0.0.1:{pt['etcd-peer']}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{pt['etcd-peer']}",
        f"--initial-cluster=muster-fleet=http://127.0.0.1:{pt['etcd-peer']}",
        "--unsafe-no-fsync=true",  # a throwaway test store: speed over durability
        "--quota-backend-bytes=4294967296", "--log-level=warn",
    ])


def start_apiserver(c):
    pt = ports(c)
    pki = p("pki")
    start(f"{c}/kube-apiserver", "kube-apiserver", [
        f"--etcd-servers=http://127.0.0.1:{ports()['etcd-client']}",
        f"--etcd-prefix=/muster-fleet/{c}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
        f"--secure-port={pt['apiserver']}",
        f"--cert-dir={p(c, 'apiserver-certs')}",
        f"--tls-cert-file={pki}/serving.crt", f"--tls-private-key-file={pki}/serving.key",
        f"--client-ca-file={pki}/ca.crt",
        f"--service-account-issuer=https://{c}.muster-fleet.invalid",
        f"--service-account-key-file={pki}/sa.pub",
        f"--service-account-signing-key-file={pki}/sa.key",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--authorization-mode=RBAC", "--allow-privileged=true",
        # The "kubernetes" Service gets no endpoints: 127.0.0.1 is not a valid endpoint address.
        "--endpoint-reconciler-type=none",
        # FLEET_APISERVER_PROFILING=1 serves /debug/pprof (benchmarks: where a server's CPU goes).
        "--profiling=" + ("true" if os.environ.get("FLEET_APISERVER_PROFILING") else "false"),
        "--v=1",
    ])


def common_component_flags(c, name):
    kc = kubeconfig_path(c)
    return [
        f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}", "--bind-address=127.0.0.1",
        f"--cert-dir={p(c, name + '-certs')}", "--leader-elect=false", "--profiling=false",
    ]


def start_controller_manager(c):
    args = common_component_flags(c, "kube-controller-manager") + [
        f"--secure-port={ports(c)['controller-manager']}",
        f"--service-account-private-key-file={p('pki', 'sa.key')}",
        f"--root-ca-file={p('pki', 'ca.crt')}",
        "--use-service-account-credentials=false",
        "--v=1",
    ]
    if c == HUB:
        # The hub runs no workloads: namespaces, garbage collection, service accounts and the
        # aggregated ClusterRoles (admin, edit, view: what a tenant is granted) only (no job
        # controller, so batch Jobs on the hub stay as submitted).
        args.append("--controllers=namespace-controller,garbage-collector-controller,"
                    "serviceaccount-controller,root-ca-certificate-publisher-controller,"
                    "clusterrole-aggregation-controller")
    start(f"{c}/kube-controller-manager", "kube-controller-manager", args)


def start_scheduler(c):
    start(f"{c}/kube-scheduler", "kube-scheduler",
          common_component_flags(c, "kube-scheduler")
          + [f"--secure-port={ports(c)['scheduler']}", "--v=1"])


def start_kwok(c):
    # kwok's own stages, except pod-complete: the fleet's version (hack/fleet/stages) honours a
    # delay asked for in the pod's annotations.
    ours = os.path.join(REPO, "hack", "fleet", "stages")
    configs = sorted(os.path.join(STAGES, f) for f in os.listdir(STAGES)
                     if f.endswith(".yaml") and not f.endswith("pod-complete.yaml"))
    configs += sorted(os.path.join(ours, f) for f in os.listdir(ours) if f.endswith(".yaml"))
    par = os.environ.get("FLEET_KWOK_POD_PARALLELISM")
    if par:
        # How many pods kwok moves through their stages at once (kwok's default 4).
        path = p(c, "kwok-config.yaml")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            yaml.safe_dump({"apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                            "kind": "KwokConfiguration",
                            # kwok applies no defaults to a configuration file: every
                            # option whose zero value it refuses is given its default.
                            "options": {"podPlayStageParallelism": int(par),
                                        "nodePlayStageParallelism": 4, "nodeLeaseParallelism": 4,
                                        "podsOnNodeSyncParallelism": 1, "cidr": "10.0.0.0/24",
                                        "enableDebuggingHandlers": True,
                                        "enableProfilingHandler": True,
                                        "enablePodsOnNodeSyncListPager": True}}, f)
        configs.append(path)
    start(f"{c}/kwok", "kwok", [
        f"--kubeconfig={kubeconfig_path(c)}",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        f"--server-address=127.0.0.1:{ports(c)['kwok']}",
        "--node-ip=127.0.0.1",
        "--node-lease-duration-seconds=40",
    ] + [f"--config={x}" for x in configs])


def start_training_operator(c):
    pt = ports(c)
    tmp = p(c, "tmp")
    start(f"{c}/training-operator", "training-operator", [
        f"--kubeconfig={kubeconfig_path(c)}",
        f"--metrics-bind-address=127.0.0.1:{pt['training-operator-metrics']}",
        f"--health-probe-bind-address=127.0.0.1:{pt['training-operator-health']}",
        f"--webhook-server-port={pt['training-operator-webhook']}",
        "--leader-elect=false",
    ] + [f"--enable-scheme={s}" for s in TRAINING_SCHEMES],
        env={"TMPDIR": tmp, "MY_POD_NAMESPACE": "kubeflow"})


def jobset_cert_dir(c):
    return p(c, "jobset-certs")


def start_jobset_controller(c):
    """The JobSet controller (sigs.k8s.io/jobset's manager) with its own cert rotator off: its
    webhook server (on 127.0.0.1) and its metrics server use the fleet's serving cert, and the
    apiserver reaches the webhooks by URL (see setup_jobset_objects)."""
    pt = ports(c)
    cfg = {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": pt["jobset-webhook"],
                    "certDir": jobset_cert_dir(c)},
        "metrics": {"bindAddress": f"127.0.0.1:{pt['jobset-metrics']}",
                    "certDir": jobset_cert_dir(c)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{pt['jobset-health']}"},
    }
    path = p(c, "jobset-config.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    start(f"{c}/jobset-controller", "jobset-controller", [
        f"--kubeconfig={kubeconfig_path(c)}", f"--config={path}",
        # Production logging (its default is development mode: debug level, stack traces).
        "--zap-devel=false", "--zap-encoder=console", "--zap-log-level=info",
    ], env={"TMPDIR": p(c, "tmp")})


def start_kuberay_operator(c):
    """The KubeRay operator: RayCluster and RayJob controllers, no webhooks (they run only with
    ENABLE_WEBHOOKS=true), no leader election, metrics and probes on 127.0.0.1."""
    pt = ports(c)
    start(f"{c}/kuberay-operator", "kuberay-operator", [
        f"--metrics-addr=127.0.0.1:{pt['kuberay-metrics']}",
        f"--health-probe-bind-address=127.0.0.1:{pt['kuberay-health']}",
        "--enable-leader-election=false",
        "--log-stdout-encoder=console",
    ], env={"TMPDIR": p(c, "tmp"), "KUBECONFIG": kubeconfig_path(c)})


MPI_LOCK_NAMESPACE = "mpi-operator"


def start_mpi_operator(c):
    """The MPI operator (MPIJob v2beta1), built with its health server's port and host taken from
    MPI_OPERATOR_HEALTH_PORT/HOST (upstream: a constant :8080 on every interface). Its leader
    election cannot be turned off: it holds the Lease mpi-operator/mpi-operator of its member."""
    start(f"{c}/mpi-operator", "mpi-operator", [
        f"-kubeConfig={kubeconfig_path(c)}",
        "-namespace=",  # every namespace, whatever KUBEFLOW_NAMESPACE says
        f"-lock-namespace={MPI_LOCK_NAMESPACE}",
        "-monitoring-port=0",  # no metrics server (it would listen on every interface)
        "-kube-api-qps=50", "-kube-api-burst=100",
    ], env={"MPI_OPERATOR_HEALTH_PORT": str(ports(c)["mpi-operator-health"]),
            "MPI_OPERATOR_HEALTH_HOST": "127.0.0.1", "TMPDIR": p(c, "tmp")})


def mpi_operator_leading(api, since):
    """Has an MPI operator started since `since` (epoch seconds) taken its member's Lease?"""
    code, lease = api.req("GET", f"/apis/coordination.k8s.io/v1/namespaces/{MPI_LOCK_NAMESPACE}"
                          "/leases/mpi-operator")
    if code != 200:
        return f"Lease {MPI_LOCK_NAMESPACE}/mpi-operator: HTTP {code}"
    spec = lease.get("spec", {})
    acquired = spec.get("acquireTime")
    if not spec.get("holderIdentity") or not acquired:
        return "Lease mpi-operator not held"
    t = calendar.timegm(time.strptime(acquired[:19], "%Y-%m-%dT%H:%M:%S"))
    if t < since - 1:
        return f"Lease mpi-operator held by an earlier process ({spec['holderIdentity']})"
    return True


def start_trainer(c):
    """Kubeflow Trainer's controller manager (TrainJob -> JobSet), configured by a file (its
    config.trainer.kubeflow.org/v1alpha1 Configuration): its own cert management off, so its
    webhook server (on 127.0.0.1) serves the fleet's serving cert from controller-runtime's default
    $TMPDIR/k8s-webhook-server/serving-certs, and the apiserver reaches the webhooks by URL (see
    trainer_webhook_configurations)."""
    pt = ports(c)
    cfg = {
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
        "kind": "Configuration",
        "webhook": {"host": "127.0.0.1", "port": pt["trainer-webhook"]},
        # Plain http on loopback (its default is https on every interface).
        "metrics": {"bindAddress": f"127.0.0.1:{pt['trainer-metrics']}", "secureServing": False},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{pt['trainer-health']}"},
        "leaderElection": {"leaderElect": False},
        "certManagement": {"enable": False},
        # Its runtime status server runs only with the TrainJobStatus feature gate (alpha, off by
        # default), and then on every interface: a port of its own all the same.
        "statusServer": {"port": pt["trainer-status"]},
    }
    path = p(c, "trainer-config.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    start(f"{c}/trainer-controller-manager", "trainer-controller-manager", [
        f"--kubeconfig={kubeconfig_path(c)}", f"--config={path}",
        "--zap-encoder=console", "--zap-log-level=info",
    ], env={"TMPDIR": p(c, "tmp")})


def trainer_runtimes():
    out = []
    d = os.path.join(TRAINER, "runtimes")
    for fn in sorted(os.listdir(d)):
        if fn.endswith(".yaml"):
            out += [x for x in load_yaml_docs(os.path.join(d, fn))
                    if x.get("kind") == "ClusterTrainingRuntime"]
    return out


def install_trainer_runtimes(api):
    """Trainer's default ClusterTrainingRuntimes (torch-distributed, deepspeed-distributed, ...)."""
    for doc in trainer_runtimes():
        api.create("/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes", doc)


def copy_serving_cert(dst_dir):
    os.makedirs(dst_dir, exist_ok=True)
    shutil.copy(p("pki", "serving.crt"), os.path.join(dst_dir, "tls.crt"))
    shutil.copy(p("pki", "serving.key"), os.path.join(dst_dir, "tls.key"))


def prepare_training_operator_files():
    # The webhook servers of each member's training-operator and Trainer (both run with
    # TMPDIR=<member>/tmp) read $TMPDIR/k8s-webhook-server/serving-certs.
    for c in MEMBERS:
        copy_serving_cert(os.path.join(p(c, "tmp"), "k8s-webhook-server", "serving-certs"))
        copy_serving_cert(jobset_cert_dir(c))
    # The cert rotator only checks that tls.crt exists at its fixed path before it declares the
    # certs "mounted"; nothing reads that file. Create it if missing; remember to remove it.
    if not os.path.exists(os.path.join(ROTATOR_CERT_DIR, "tls.crt")):
        copy_serving_cert(ROTATOR_CERT_DIR)
        with open(p("rotator-certs-created"), "w") as f:
            f.write(ROTATOR_CERT_DIR + "\n")


# libyaml's loader when PyYAML has it: the CRDs are several MB of YAML.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml_docs(path):
    with open(path) as f:
        return [d for d in yaml.load_all(f, Loader=YAML_LOADER) if d]


def load_crds():
    """Every CustomResourceDefinition in the build's crds folder, parsed once."""
    crds = []
    for fn in sorted(os.listdir(CRDS)):
        if not fn.endswith(".yaml"):
            continue
        for doc in load_yaml_docs(os.path.join(CRDS, fn)):
            if doc.get("kind") != "CustomResourceDefinition":
                continue
            doc.get("metadata", {}).pop("annotations", None)
            if any(c["metadata"]["name"] == doc["metadata"]["name"] for c in crds):
                raise FleetError(f"CRD {doc['metadata']['name']} defined twice in {CRDS}")
            crds.append(doc)
    return crds


def install_crds(api, crds):
    for doc in crds:
        api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)
    return [doc["metadata"]["name"] for doc in crds]


def crds_established(api, names):
    for n in names:
        code, obj = api.req("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}")
        if code != 200:
            return f"CRD {n}: HTTP {code}"
        conds = {x["type"]: x["status"] for x in obj.get("status", {}).get("conditions", [])}
        if conds.get("Established") != "True":
            return f"CRD {n} not Established"
    return True


def setup_training_operator_objects(api):
    """What the training-operator's cert rotator insists on, with its admission webhook off."""
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": "kubeflow"}})
    api.create("/api/v1/namespaces/kubeflow/secrets", {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "training-operator-webhook-cert", "namespace": "kubeflow"}})
    # No webhooks in it: the apiserver calls nothing (it could not reach the operator's
    # training-operator.kubeflow.svc name here), and the rotator can still "inject" its CA.
    api.create("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "validator.training-operator.kubeflow.org",
                     "labels": {"app.kubernetes.io/managed-by": "muster-fleet"}}})


def apply_replace_patch(doc, ops, where):
    """A kustomize JSON 6902 patch made of `replace` operations (all these modules' webhook
    patches are), applied to doc in place."""
    for op in ops:
        path = op.get("path", "")
        if op.get("op") != "replace" or not path.startswith("/"):
            raise FleetError(f"{where}: unsupported patch {op.get('op')} {path}")
        keys = [k.replace("~1", "/").replace("~0", "~") for k in path[1:].split("/")]
        target = doc
        try:
            for k in keys[:-1]:
                target = target[int(k)] if isinstance(target, list) else target[k]
            last = int(keys[-1]) if isinstance(target, list) else keys[-1]
            target[last]  # noqa: B018 - `replace` needs the member to exist
        except (KeyError, IndexError, ValueError, TypeError):
            raise FleetError(f"{where}: patch path {path} not found") from None
        target[last] = op["value"]


def webhook_configurations(folder, patches, port, names=None):
    """A module's admission webhook configurations (kubebuilder's webhook-manifests.yaml, copied
    by the build into folder) with its kustomize patches ({kind: patch file}) applied, named
    names[kind] (default: the patched metadata.name), each webhook pointed by URL at
    https://127.0.0.1:port<its path> and trusting the fleet CA (which signed the serving cert,
    SAN IP:127.0.0.1)."""
    import base64
    with open(p("pki", "ca.crt"), "rb") as f:
        ca = base64.b64encode(f.read()).decode()
    docs = {d["kind"]: d for d in load_yaml_docs(os.path.join(folder, "webhook-manifests.yaml"))}
    if sorted(docs) != sorted(patches):
        raise FleetError(f"{folder}/webhook-manifests.yaml: unexpected kinds {sorted(docs)}")
    out = []
    for kind, doc in docs.items():
        with open(os.path.join(folder, patches[kind])) as f:
            apply_replace_patch(doc, yaml.safe_load(f), os.path.join(folder, patches[kind]))
        doc["metadata"] = {"name": names[kind] if names else doc["metadata"]["name"],
                           "labels": {"app.kubernetes.io/managed-by": "muster-fleet"}}
        for w in doc["webhooks"]:
            svc = w["clientConfig"]["service"]
            w["clientConfig"] = {"url": f"https://127.0.0.1:{port}{svc['path']}", "caBundle": ca}
        out.append((kind, doc))
    return out


def create_webhook_configurations(api, docs):
    for kind, doc in docs:
        plural = "mutatingwebhookconfigurations" if kind.startswith("Mutating") \
            else "validatingwebhookconfigurations"
        api.create(f"/apis/admissionregistration.k8s.io/v1/{plural}", doc)


def jobset_webhook_configurations(c):
    """JobSet's (config/components/webhook: manifests.yaml plus the kustomize patches that limit
    the pod webhooks to JobSet pods), named as its own deployment names them."""
    return webhook_configurations(
        JOBSET, {"MutatingWebhookConfiguration": "mutating-patch.yaml",
                 "ValidatingWebhookConfiguration": "validating-patch.yaml"},
        ports(c)["jobset-webhook"],
        names={"MutatingWebhookConfiguration": "jobset-mutating-webhook-configuration",
               "ValidatingWebhookConfiguration": "jobset-validating-webhook-configuration"})


def trainer_webhook_configurations(c):
    """Trainer's (manifests/base/webhook: manifests.yaml plus the patches that name them
    defaulter.trainer.kubeflow.org and validator.trainer.kubeflow.org)."""
    return webhook_configurations(
        TRAINER, {"MutatingWebhookConfiguration": "patch_mutating.yaml",
                  "ValidatingWebhookConfiguration": "patch_validating.yaml"},
        ports(c)["trainer-webhook"])


def setup_jobset_objects(api, c):
    """JobSet's webhooks, as in its own deployment (failurePolicy Fail): JobSets are defaulted and
    validated, and pods of JobSets mutated and validated, by this member's JobSet controller."""
    create_webhook_configurations(api, jobset_webhook_configurations(c))


def setup_trainer_objects(api, c):
    """Trainer's webhooks, as in its own deployment (failurePolicy Fail): TrainJobs are defaulted
    and validated, and (Cluster)TrainingRuntimes validated, by this member's Trainer."""
    create_webhook_configurations(api, trainer_webhook_configurations(c))


def expand_nodes(cluster_spec):
    out = []
    for n in cluster_spec.get("nodes") or []:
        count = int(n.get("count", 1))
        names = [n["name"]] if count == 1 else [f"{n['name']}-{i}" for i in range(count)]
        for name in names:
            out.append((name, n))
    return out


def node_object(name, spec, cluster):
    alloc = {k: str(v) for k, v in (spec.get("allocatable") or {}).items()}
    labels = {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64", "type": "kwok", "muster.io/fleet-cluster": cluster,
    }
    labels.update({k: str(v) for k, v in (spec.get("labels") or {}).items()})
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels,
                     "annotations": {"kwok.x-k8s.io/node": "fake",
                                     "node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"taints": spec.get("taints") or []},
        "status": {"capacity": alloc, "allocatable": alloc},
    }


def create_nodes(api, cluster, cluster_spec):
    names = []
    for name, spec in expand_nodes(cluster_spec):
        obj = node_object(name, spec, cluster)
        api.create("/api/v1/nodes", obj)
        # Make sure capacity/allocatable are what the fleet file says, whatever create kept.
        code, out = api.req("PATCH", f"/api/v1/nodes/{name}/status",
                            {"status": obj["status"]}, ctype="application/merge-patch+json")
        if code != 200:
            raise FleetError(f"{cluster}: patching status of node {name}: {code} {out}")
        names.append(name)
    return names


def nodes_ready(api, names):
    code, obj = api.req("GET", "/api/v1/nodes")
    if code != 200:
        return f"list nodes: HTTP {code}"
    ready = set()
    for n in obj.get("items", []):
        for cond in n.get("status", {}).get("conditions", []):
            if cond["type"] == "Ready" and cond["status"] == "True":
                ready.add(n["metadata"]["name"])
    missing = [n for n in names if n not in ready]
    return True if not missing else f"nodes not Ready: {', '.join(missing)}"


def default_sa(api):
    code, _ = api.req("GET", "/api/v1/namespaces/default/serviceaccounts/default")
    return True if code == 200 else f"ServiceAccount default/default: HTTP {code}"


def load_fleet_file(path):
    with open(path) as f:
        doc = yaml.safe_load(f) or {}
    clusters = {c["name"]: c for c in doc.get("clusters") or []}
    unknown = sorted(set(clusters) - set(MEMBERS))
    if unknown:
        raise FleetError(f"{path}: clusters must be among {MEMBERS}; unknown: {unknown}")
    return clusters


def fleet_id(fleet_file):
    with open(fleet_file, "rb") as f:
        h = hashlib.sha256(f.read())
    h.update(BUILD.encode())
    h.update(str(PORT_BASE).encode())
    # The fleet's own kwok stages: a changed stage means a fleet started anew.
    ours = os.path.join(REPO, "hack", "fleet", "stages")
    for f in sorted(os.listdir(ours)):
        with open(os.path.join(ours, f), "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()[:16]


def health_check(c, binary):
    """The check that says a process of the fleet is healthy: (what, fn), fn() -> (code, body).
    The same for `up` (readiness), `status` and the reuse of a running fleet."""
    if binary == "kube-apiserver":
        return "/readyz", lambda: Api(c).req("GET", "/readyz", timeout=5)
    pt = ports(c) if c else ports()
    scheme, key, path = {
        "etcd": ("http", "etcd-client", "/health"),
        "kube-controller-manager": ("https", "controller-manager", "/healthz"),
        "kube-scheduler": ("https", "scheduler", "/healthz"),
        "kwok": ("http", "kwok", "/healthz"),
        "training-operator": ("http", "training-operator-health", "/readyz"),
        "jobset-controller": ("http", "jobset-health", "/readyz"),
        "kuberay-operator": ("http", "kuberay-health", "/readyz"),
        "mpi-operator": ("http", "mpi-operator-health", "/healthz"),
        "trainer-controller-manager": ("http", "trainer-health", "/readyz"),
    }[binary]
    url = f"{scheme}://127.0.0.1:{pt[key]}{path}"
    return path, lambda: insecure_get(url)


def check_ok(check):
    """A health check as wait_for wants it: True, or what is wrong."""
    def fn():
        code, body = check()
        return True if code == 200 else f"HTTP {code} {str(body)[:200]}"
    return fn


# The processes `up` may start again on their own in a running fleet (as a kubelet restarts a
# crashed pod): everything but etcd and the apiservers. E.g. the MPI operator exits when it cannot
# renew its Lease for 5 s (a test that pauses its member's apiserver).
RESTARTABLE = {"kube-controller-manager", "kube-scheduler", "kwok", "training-operator",
               "jobset-controller", "kuberay-operator", "mpi-operator",
               "trainer-controller-manager"}


def check_running(fleet_file):
    """A fleet started from this fleet file and this build is running: None if not (or if a
    process is unhealthy), else the list of its restartable processes that are gone (empty: the
    whole fleet is running and healthy)."""
    try:
        with open(p("fleet-id")) as f:
            if f.read().strip() != fleet_id(fleet_file):
                return None
    except OSError:
        return None
    gone = []
    try:
        for n, c, b in components():
            pid = read_pid(n)
            if pid is None or not proc_alive(pid, b):
                if b not in RESTARTABLE:
                    return None
                gone.append((n, c, b))
            elif health_check(c, b)[1]()[0] != 200:
                return None
    except Exception:  # noqa: BLE001
        return None
    return gone


def starter(binary):
    return {
        "kube-controller-manager": start_controller_manager,
        "kube-scheduler": start_scheduler,
        "kwok": start_kwok,
        "training-operator": start_training_operator,
        "jobset-controller": start_jobset_controller,
        "kuberay-operator": start_kuberay_operator,
        "mpi-operator": start_mpi_operator,
        "trainer-controller-manager": start_trainer,
    }[binary]


def wait_controllers(procs, apis, node_names):
    """Each controller's health check, in start order; then what each must have done."""
    for n, c, b in procs:
        what, check = health_check(c, b)
        wait_for(n, b, check_ok(check), what)
        if b == "kwok":
            wait_for(n, b, lambda c=c: nodes_ready(apis[c], node_names[c]), "nodes Ready")
        elif b == "kube-controller-manager":
            wait_for(n, b, lambda c=c: default_sa(apis[c]), "ServiceAccount default/default")
        elif b == "mpi-operator":
            wait_for(n, b, lambda c=c, n=n: mpi_operator_leading(apis[c], STARTED[n]),
                     "its Lease")
        elif b == "trainer-controller-manager":
            # Created through its validating webhook, so this also checks that path.
            install_trainer_runtimes(apis[c])


def restart(procs, fleet_file):
    """Start the given stopped controllers of a running fleet again and wait until ready."""
    t0 = time.monotonic()
    log(f"fleet running, but {len(procs)} of its processes are gone: starting "
        + ", ".join(n for n, _, _ in procs) + " again")
    fleet = load_fleet_file(fleet_file)
    apis = {c: Api(c) for c in CLUSTERS}
    node_names = {c: [name for name, _ in expand_nodes(fleet.get(c, {}))] for c in MEMBERS}
    prepare_training_operator_files()
    for n, c, b in procs:
        if b == "mpi-operator":
            # Its Lease names the process that is gone: a new one would wait for it to expire.
            apis[c].req("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{MPI_LOCK_NAMESPACE}"
                        "/leases/mpi-operator")
        starter(b)(c)
    wait_controllers(procs, apis, node_names)
    log(f"fleet up in {time.monotonic() - t0:.1f}s (restarted {len(procs)} processes)")


def up(fleet_file):
    t0 = time.monotonic()
    gone = check_running(fleet_file)
    if gone == []:
        log(f"fleet already up and healthy (state {STATE}); reusing it")
        return
    if gone:
        try:
            restart(gone, fleet_file)
            return
        except FleetError as e:
            log(f"ERROR: {e}")
            log("starting a fresh fleet instead")
    if any(read_pid(n) is not None for n, _, _ in components()):
        log("a previous fleet is partly running or stale: stopping it first")
    stop_all(quiet=False)
    busy = {k: v for k, v in all_ports().items() if port_open(v)}
    if busy:
        raise FleetError("ports needed by the fleet are in use by something else: "
                         + ", ".join(f"{k}={v}" for k, v in busy.items())
                         + " (set FLEET_PORT_BASE to move them)")
    for b in sorted({b for _, _, b in components()}):
        if not os.access(os.path.join(BIN, b), os.X_OK):
            raise FleetError(f"{BIN}/{b} missing: run `make fleet-build`")
    fleet = load_fleet_file(fleet_file)

    # Fresh state every time: nothing from an earlier run leaks into this one.
    for sub in ["etcd", "pki", "kubeconfigs", "logs", "pids", "fleet-id"] + CLUSTERS:
        path = p(sub)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.unlink(path)
    os.makedirs(STATE, exist_ok=True)
    make_pki()
    write_kubeconfigs()

    start_etcd()
    wait_for("etcd", "etcd",
             lambda: insecure_get(f"http://127.0.0.1:{ports()['etcd-client']}/health")[0] == 200,
             "/health")
    for c in CLUSTERS:
        start_apiserver(c)
    apis = {c: Api(c) for c in CLUSTERS}
    for c in CLUSTERS:
        wait_for(f"{c}/kube-apiserver", "kube-apiserver",
                 lambda c=c: apis[c].req("GET", "/readyz", timeout=5)[0] == 200, "/readyz")
    log(f"etcd and 4 apiservers ready ({time.monotonic() - t0:.1f}s)")

    crds = load_crds()
    # One thread per apiserver: each spends about a second of CPU per large CRD.
    with concurrent.futures.ThreadPoolExecutor(len(CLUSTERS)) as pool:
        futures = {c: pool.submit(install_crds, apis[c], crds) for c in CLUSTERS}
        crd_names = {c: f.result() for c, f in futures.items()}
    log(f"{len(crds)} CRDs created in each cluster ({time.monotonic() - t0:.1f}s)")
    for c in MEMBERS:
        setup_training_operator_objects(apis[c])
        setup_jobset_objects(apis[c], c)
        setup_trainer_objects(apis[c], c)
        # The MPI operator's leader election Lease lives there.
        apis[c].create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": MPI_LOCK_NAMESPACE}})
    prepare_training_operator_files()
    for c in CLUSTERS:
        wait_for(f"{c}/kube-apiserver", "kube-apiserver",
                 lambda c=c: crds_established(apis[c], crd_names[c]), "CRDs Established")
    log(f"{len(crd_names[HUB])} CRDs established in every cluster ({time.monotonic() - t0:.1f}s)")
    # The hub runs no Trainer (and has no webhooks): its runtimes are what muster reads there.
    install_trainer_runtimes(apis[HUB])

    # The controllers, in start order (the MPI operator after the CRDs: it exits at once if the
    # MPIJob CRD is missing).
    controllers = [x for x in components() if x[2] in RESTARTABLE]
    for n, c, b in controllers:
        starter(b)(c)

    node_names = {}
    for c in MEMBERS:
        node_names[c] = create_nodes(apis[c], c, fleet.get(c, {}))

    wait_controllers(controllers, apis, node_names)

    with open(p("fleet-id"), "w") as f:
        f.write(fleet_id(fleet_file) + "\n")
    total = sum(len(v) for v in node_names.values())
    log(f"fleet up in {time.monotonic() - t0:.1f}s: hub + {len(MEMBERS)} members, {total} fake nodes"
        f" ({', '.join(f'{c}={len(v)}' for c, v in node_names.items())})")
    log(f"kubeconfigs: {p('kubeconfigs')}/{{{','.join(CLUSTERS)}}}.kubeconfig   logs: {p('logs')}")


def status():
    total = 0
    running = 0
    width = max(len(n) for n, _, _ in components()) + 1
    print(f"{'component':{width}} {'pid':>8} {'state':8} {'health':8} {'rss MiB':>8}  log")
    for n, c, b in components():
        pid = read_pid(n)
        alive = pid is not None and proc_alive(pid, b)
        h = "-"
        if alive:
            running += 1
            try:
                code = health_check(c, b)[1]()[0]
            except Exception:  # noqa: BLE001 - e.g. a paused apiserver times out
                code = None
            h = "ok" if code == 200 else f"HTTP {code}"
        rss = rss_kib(pid) if alive else 0
        total += rss
        print(f"{n:{width}} {pid or '-':>8} {'running' if alive else 'stopped':8} {h:8} "
              f"{rss / 1024:8.0f}  {os.path.relpath(log_path(n), REPO)}")
    print(f"{running}/{len(components())} processes running; total RSS {total / 1024:.0f} MiB")
    if running:
        for c in CLUSTERS:
            print(f"{c:10} https://127.0.0.1:{ports(c)['apiserver']}  "
                  f"KUBECONFIG={os.path.relpath(kubeconfig_path(c), REPO)}")
    return running


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `fleet.sh ports | head` is fine
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up")
    u.add_argument("--fleet", default=os.environ.get("FLEET") or
                   os.path.join(REPO, "examples", "fleet.yaml"))
    sub.add_parser("down")
    sub.add_parser("status")
    sub.add_parser("ports")
    a = ap.parse_args()

    os.makedirs(STATE, exist_ok=True)
    lock = open(os.path.join(STATE, ".lock"), "w")
    if a.cmd in ("up", "down"):
        fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        if a.cmd == "up":
            fleet_file = os.path.abspath(a.fleet)
            try:
                up(fleet_file)
            except FleetError as e:
                log(f"ERROR: {e}")
                log("stopping what was started (set FLEET_KEEP_ON_FAILURE=1 to keep it)")
                if not os.environ.get("FLEET_KEEP_ON_FAILURE"):
                    try:
                        stop_all(quiet=True)
                    except FleetError as e2:
                        log(f"ERROR: {e2}")
                return 1
        elif a.cmd == "down":
            stop_all()
            try:
                os.unlink(p("fleet-id"))
            except OSError:
                pass
            log("fleet down; no fleet process or port left")
        elif a.cmd == "status":
            status()
        elif a.cmd == "ports":
            for k, v in all_ports().items():
                print(f"{k} {v}")
    except FleetError as e:
        log(f"ERROR: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
