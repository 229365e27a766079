"""Kueue's MultiKueue on the benchmark fleet, for `dispatch.py multikueue`: Kueue's own manager
(`cmd/kueue`, built by build.sh from Kueue's module) on the hub as the MultiKueue manager and on
each member as a worker, configured as Kueue's MultiKueue setup guide does (a MultiKueueCluster
per worker from a kubeconfig Secret, a MultiKueueConfig, an AdmissionCheck of controller
`kueue.x-k8s.io/multikueue`, a ClusterQueue using it on the hub; a ClusterQueue and LocalQueue of
the same names on every worker).

What differs from an in-cluster install, and why:
- The processes run on this machine (no pods): leader election off, every port on loopback.
- Kueue's webhooks are served (each process has a self-signed serving certificate in
  `webhook.certDir`) but not registered with any API server: there is no Service to reach them
  by. So the harness creates the hub's Jobs as Kueue's Job webhook would leave them: suspended,
  with the queue-name label and `spec.managedBy: kueue.x-k8s.io/multikueue`.
- Internal cert management is off (it injects CA bundles into the webhook configurations, which
  are not installed). Kueue then reads its metrics serving certificate from the fixed path
  /etc/kueue/metrics/certs (where its Helm chart mounts one): this harness writes a self-signed
  one there and removes it afterwards.
- The client rate limit is raised to QPS 1000 / burst 2000 on every instance (Kueue's default is
  20 / 30; muster has none), so that neither side is held back by a client-side limit.
- The visibility server (an aggregated API) is off.
"""

import os
import shutil
import subprocess
import time

import yaml

import muster_run
from muster_run import free_port, http_ok, wait

KUEUE_NS = "kueue-system"
API = "/apis/kueue.x-k8s.io/v1beta2"
METRICS_CERTS = "/etc/kueue/metrics/certs"
MARK = ".written-by-muster-bench-dispatch"


def log(msg):
    print(f"[bench-dispatch {time.strftime('%H:%M:%S')}] multikueue: {msg}", flush=True)


def self_signed(dir_):
    os.makedirs(dir_, exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=kueue-bench", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", os.path.join(dir_, "tls.key"), "-out", os.path.join(dir_, "tls.crt")],
                   check=True, capture_output=True)


def install_crds(kube, crd_dir):
    docs = []
    for f in sorted(os.listdir(crd_dir)):
        with open(os.path.join(crd_dir, f)) as fh:
            for crd in yaml.safe_load_all(fh):
                if crd:
                    # Conversion webhooks need Kueue's webhook Service: v1beta2 only, none.
                    crd["spec"].pop("conversion", None)
                    docs.append(crd)
    muster_run.install_crds(kube, docs)


def metrics_cert():
    """The self-signed metrics certificate Kueue reads from its fixed path (never over one this
    harness did not write; `cleanup` removes it)."""
    if os.path.exists(METRICS_CERTS) and not os.path.exists(os.path.join(METRICS_CERTS, MARK)):
        raise SystemExit(f"{METRICS_CERTS} exists and is not this harness's: not overwriting it")
    self_signed(METRICS_CERTS)
    open(os.path.join(METRICS_CERTS, MARK), "w").close()


def quotas(quota_cpu):
    return [{"name": "default", "resources": [
        {"name": "cpu", "nominalQuota": quota_cpu},
        {"name": "memory", "nominalQuota": "100Ti"},
        {"name": "pods", "nominalQuota": "100000"}]}]


def cluster_queue(queue, quota_cpu, checks=None):
    spec = {"namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["cpu", "memory", "pods"],
                                "flavors": quotas(quota_cpu)}]}
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": queue}, "spec": spec}


def queues(kube, ns, queue, quota_cpu, checks=None):
    kube.apply(f"{API}/resourceflavors/default", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "default"}, "spec": {}})
    kube.apply(f"{API}/clusterqueues/{queue}", cluster_queue(queue, quota_cpu, checks))
    kube.apply(f"{API}/namespaces/{ns}/localqueues/{queue}", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": queue, "namespace": ns}, "spec": {"clusterQueue": queue}})


def config(out, name):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    self_signed(os.path.join(d, "webhook-certs"))
    health = free_port()
    cfg = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": KUEUE_NS,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{free_port()}"},
        "webhook": {"port": free_port(), "host": "127.0.0.1",
                    "certDir": os.path.join(d, "webhook-certs")},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 1000, "burst": 2000},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job"]},
        "featureGates": {"VisibilityOnDemand": False},
    }
    path = os.path.join(d, "config.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    return path, health, d


def start(a, hub, members, out, ns, queue, quota_cpu):
    """Sets up Kueue on the hub and every member and starts the four managers; returns them."""
    kueue_bin = os.path.join(a.kueue, "bin", "kueue")
    if not os.access(kueue_bin, os.X_OK):
        raise SystemExit(f"{kueue_bin} missing: build it with hack/bench-kueue/build.sh")
    kubes = {"hub": hub, **members}
    for k in kubes.values():
        install_crds(k, os.path.join(a.kueue, "crds"))
        k.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": KUEUE_NS}}, exist_ok=True)
    metrics_cert()
    procs = []
    try:
        for name, k in kubes.items():
            path, health, d = config(out, name)
            kc = os.path.join(a.kubeconfigs, f"{name}.kubeconfig")
            logf = open(os.path.join(d, "kueue.log"), "w")
            p = subprocess.Popen([kueue_bin, f"--config={path}", f"--kubeconfig={kc}",
                                  "--zap-log-level=info"],
                                 stdout=logf, stderr=subprocess.STDOUT)
            procs.append(p)
            wait(f"kueue on {name} /readyz", 120, lambda p=p, health=health:
                 p.poll() is None and http_ok(f"http://127.0.0.1:{health}/readyz"))
        # The workers: same queue names.
        for m, k in members.items():
            queues(k, ns, queue, quota_cpu)
        # The manager: a MultiKueueCluster per worker, the config, the check, the queue.
        for m, k in members.items():
            hub.apply(f"/api/v1/namespaces/{KUEUE_NS}/secrets/{m}", {
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": m, "namespace": KUEUE_NS},
                "stringData": {"kubeconfig": k.kubeconfig_text}})
            hub.apply(f"{API}/multikueueclusters/{m}", {
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster",
                "metadata": {"name": m},
                "spec": {"clusterSource": {"kubeConfig": {"location": m, "locationType": "Secret"}}}})
        hub.apply(f"{API}/multikueueconfigs/bench", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig",
            "metadata": {"name": "bench"}, "spec": {"clusters": sorted(members)}})
        hub.apply(f"{API}/admissionchecks/bench-multikueue", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
            "metadata": {"name": "bench-multikueue"},
            "spec": {"controllerName": "kueue.x-k8s.io/multikueue",
                     "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig",
                                    "name": "bench"}}})
        queues(hub, ns, queue, quota_cpu, checks=["bench-multikueue"])

        def active(path):
            conds = (hub.get(path).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Active" and c["status"] == "True" for c in conds)
        for m in members:
            wait(f"MultiKueueCluster {m} Active", 120, lambda m=m: active(f"{API}/multikueueclusters/{m}"))
        wait("AdmissionCheck Active", 120, lambda: active(f"{API}/admissionchecks/bench-multikueue"))
        for name, k in kubes.items():
            wait(f"ClusterQueue on {name} Active", 120, lambda k=k: any(
                c["type"] == "Active" and c["status"] == "True"
                for c in (k.get(f"{API}/clusterqueues/{queue}").get("status") or {})
                .get("conditions") or []))
        log("manager and 3 workers ready")
    except BaseException:
        for p in procs:
            p.kill()
        cleanup()
        raise
    return procs


def cleanup():
    """Removes the metrics certificate this harness wrote (and the folders it made for it)."""
    if os.path.exists(os.path.join(METRICS_CERTS, MARK)):
        shutil.rmtree(METRICS_CERTS, ignore_errors=True)
        for d in ("/etc/kueue/metrics", "/etc/kueue"):
            try:
                os.rmdir(d)
            except OSError:
                break
