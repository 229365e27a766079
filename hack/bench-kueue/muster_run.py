#!/usr/bin/env python3
"""The muster side of the Kueue benchmark: the workload of a Kueue generator config, run through
`muster controller` on a local fleet, measured from the hub.

  muster_run.py --config GEN.yaml --kubeconfigs DIR --muster BIN --out DIR [--timeout S]

What maps to what (see docs/benchmarks.md):
- every cohort is an inner node of one ElasticQuotaTree, every ClusterQueue a leaf with its
  namespace (min = nominal quota, max = nominal + borrowingLimit); root = the sum;
- every workload is a batch Job in that namespace: one pod with the same cpu request, a
  PriorityClass of the same value, and kwok's pod-complete delay = jitter-delay = its run time;
- each workloads set is created by its own thread, waiting its creation interval before each
  create, as Kueue's generator does;
- one member (member-a) whose kwok nodes add up to the quota.

Measured: per job creation (when the create returned) → status.admittedAt → status.dispatchedAt →
the member's copy Complete (seen by a watch on the member) → Finished (status.lastTransition), the
number of times it was taken back (status.requeues), and the tree's per-leaf `used` cpu sampled
every 0.5 s. Writes OUT/summary.json and OUT/jobs.csv.
"""

import argparse
import csv
import datetime
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen  # noqa: E402
from kube import ApiError, Kube  # noqa: E402

TREE = "bench-kueue"
NS = "muster-system"
MEMBER = "member-a"
QJ = "/apis/muster.dev/v1alpha1/queuedjobs"
GATE = "muster.dev/placement"  # muster's scheduling gate (src/placement.rs `GATE`)
TREE_PATH = f"/apis/scheduling.sigs.k8s.io/v1beta1/namespaces/kube-system/elasticquotatrees/{TREE}"


def log(msg):
    print(f"[bench-kueue {time.strftime('%H:%M:%S')}] muster: {msg}", file=sys.stderr, flush=True)


def ts(s):
    """RFC 3339 → seconds since the epoch (float), or None."""
    if not s:
        return None
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def prio_class(p):
    return f"bench-kueue-p{p}"


def wait(what, timeout, fn, every=0.5):
    end = time.time() + timeout
    last = None
    while time.time() < end:
        try:
            if fn():
                return
        except Exception as e:  # noqa: BLE001 - reported when the wait gives up
            last = e
        time.sleep(every)
    raise SystemExit(f"timed out waiting for {what}" + (f": {last}" if last else ""))


def muster_crds(muster):
    """The CRDs `muster crds` prints."""
    return [d for d in __import__("yaml").safe_load_all(
        subprocess.run([muster, "crds"], check=True, capture_output=True, text=True).stdout) if d]


def install_crds(kube, docs):
    """Applies every CRD of `docs`, then waits until each is Established."""
    for crd in docs:
        kube.apply(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}", crd)
    for crd in docs:
        name = crd["metadata"]["name"]
        wait(f"CRD {name}", 60, lambda name=name: any(
            c["type"] == "Established" and c["status"] == "True"
            for c in (kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
                      .get("status", {}).get("conditions") or [])))


def register(hub, ns, name, member):
    """The member `name` on the hub: its kubeconfig Secret in `ns` and its MemberCluster."""
    hub.apply(f"/api/v1/namespaces/{ns}/secrets/{name}-kubeconfig", {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": f"{name}-kubeconfig", "namespace": ns},
        "stringData": {"kubeconfig": member.kubeconfig_text}})
    hub.apply(f"/apis/muster.dev/v1alpha1/memberclusters/{name}", {
        "apiVersion": "muster.dev/v1alpha1", "kind": "MemberCluster",
        "metadata": {"name": name}, "spec": {"kubeconfigSecretRef": {"name": f"{name}-kubeconfig"}}})


def setup(hub, member, cfg, muster):
    """CRDs, namespaces, PriorityClasses, the member and the tree on the hub (and the
    PriorityClasses on the member)."""
    install_crds(hub, muster_crds(muster))
    _, queues, sets = gen.expand(cfg)
    for n in [NS] + [q["name"] for q in queues]:
        hub.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": n}}, exist_ok=True)
    prios = sorted({it["priority"] for s in sets for it in s["items"]})
    for k in (hub, member):
        for p in prios:
            k.apply(f"/apis/scheduling.k8s.io/v1/priorityclasses/{prio_class(p)}", {
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": prio_class(p)}, "value": p, "globalDefault": False,
                "preemptionPolicy": "Never"})
    register(hub, NS, MEMBER, member)
    hub.apply(TREE_PATH, {
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
        "metadata": {"name": TREE, "namespace": "kube-system"},
        "spec": {"root": gen.tree_root(cfg)}})
    return queues, sets


def job_manifest(it):
    cpu = gen.milli_str(it["cpu_m"])
    d = f"{it['runtime_ms']}ms"
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": it["name"], "namespace": it["namespace"],
                     "labels": {"bench.muster.dev/class": it["class"]}},
        "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                 "template": {
                     "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": d,
                                                  "pod-complete.stage.kwok.x-k8s.io/jitter-delay": d}},
                     "spec": {"restartPolicy": "Never", "priorityClassName": prio_class(it["priority"]),
                              "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                              "resources": {"requests": {"cpu": cpu},
                                                            "limits": {"cpu": cpu}}}]}}},
    }


class Jobs:
    """What the hub says about every job, as its QueuedJob changes."""

    def __init__(self):
        self.lock = threading.Lock()
        self.jobs = {}  # (ns, name) -> record
        self.done = 0

    def add(self, it):
        with self.lock:
            self.jobs[(it["namespace"], it["name"])] = {
                "namespace": it["namespace"], "name": it["name"], "class": it["class"],
                "cpu_m": it["cpu_m"], "created": None, "admitted": None, "dispatched": None,
                "finished": None, "state": None, "requeues": 0, "holds": [], "first_seen": None,
                "member_complete": None, "copies": {}, "last_copy": None, "pods": {}}

    def created(self, key, t):
        with self.lock:
            self.jobs[key]["created"] = t

    def on_qj(self, typ, obj, now):
        if typ == "DELETED":
            return
        name = obj["metadata"]["name"]
        if not name.startswith("job-"):
            return
        key = (obj["metadata"]["namespace"], name[4:])
        st = obj.get("status") or {}
        state = st.get("state")
        with self.lock:
            j = self.jobs.get(key)
            if j is None:
                return
            if j["first_seen"] is None:
                j["first_seen"] = now
            adm = ts(st.get("admittedAt"))
            holding = state in ("Admitted", "Dispatched", "Running")
            # Each admission opens a hold of the leaf's quota (admittedAt); leaving the holding
            # states (finished, failed, taken back) closes it at lastTransition.
            if adm and (holding or state in ("Finished", "Failed")) and (
                    not j["holds"] or j["holds"][-1][0] != adm):
                if j["holds"] and j["holds"][-1][1] is None:
                    j["holds"][-1][1] = adm
                j["holds"].append([adm, None])
            if not holding and j["holds"] and j["holds"][-1][1] is None:
                j["holds"][-1][1] = ts(st.get("lastTransition")) or now
            if adm:
                j["admitted"] = adm
            if st.get("dispatchedAt"):
                j["dispatched"] = ts(st["dispatchedAt"])
            j["requeues"] = max(j["requeues"], int(st.get("requeues") or 0))
            if state in ("Finished", "Failed") and j["state"] not in ("Finished", "Failed"):
                j["finished"] = ts(st.get("lastTransition")) or now
                self.done += 1
            j["state"] = state


    def on_member_job(self, typ, obj, now):
        """The member's copy: when it first shows up and when its Job controller says Complete
        (seen here)."""
        if typ == "DELETED":
            return
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        uid = obj["metadata"]["uid"]
        with self.lock:
            j = self.jobs.get(key)
            if j is not None and uid not in j["copies"]:
                j["copies"][uid] = now
                j["last_copy"] = uid
        conds = (obj.get("status") or {}).get("conditions") or []
        if not any(c["type"] == "Complete" and c["status"] == "True" for c in conds):
            return
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        with self.lock:
            j = self.jobs.get(key)
            if j is not None and j["member_complete"] is None:
                j["member_complete"] = now


    def on_member_pod(self, typ, obj, now):
        """The member's pods, by the copy that owns them: when each is first seen, released from
        muster's gate, bound, running and succeeded (seen here)."""
        if typ == "DELETED":
            return
        md = obj["metadata"]
        job = (md.get("labels") or {}).get("job-name")
        owner = next((o["uid"] for o in md.get("ownerReferences") or [] if o.get("controller")), None)
        if job is None or owner is None:
            return
        spec, st = obj.get("spec") or {}, obj.get("status") or {}
        with self.lock:
            j = self.jobs.get((md["namespace"], job))
            if j is None:
                return
            p = j["pods"].setdefault(md["uid"], {"copy": owner, "seen": now})
            if "released" not in p and not any(
                    g.get("name") == GATE for g in spec.get("schedulingGates") or []):
                p["released"] = now
            if "bound" not in p and spec.get("nodeName"):
                p["bound"] = now
            if "running" not in p and st.get("phase") in ("Running", "Succeeded"):
                p["running"] = now
            if "succeeded" not in p and st.get("phase") == "Succeeded":
                p["succeeded"] = now


# The steps of a job on the member, in order, for `member_phases`.
STEPS = ["dispatched", "copy seen", "pod seen", "released", "bound", "running", "succeeded",
         "copy Complete", "hub Finished"]


def member_phases(recs):
    """Per class, the mean time of each step of a job taken back never (one copy, one pod): hub
    dispatchedAt → the copy seen on the member → its pod seen → released from muster's gate →
    bound → running → succeeded → the copy Complete → hub Finished, each seen by this harness."""
    out = {}
    for j in recs:
        if j["requeues"] or len(j["copies"]) != 1 or len(j["pods"]) != 1:
            continue
        p = next(iter(j["pods"].values()))
        t = [j["dispatched"], j["copies"][j["last_copy"]], p.get("seen"), p.get("released"),
             p.get("bound"), p.get("running"), p.get("succeeded"), j["member_complete"], j["finished"]]
        if any(x is None for x in t):
            continue
        c = out.setdefault(j["class"], {"jobs": 0, **{f"{a} → {b}": 0.0 for a, b in zip(STEPS, STEPS[1:])}})
        c["jobs"] += 1
        for (a, b), x, y in zip(zip(STEPS, STEPS[1:]), t, t[1:]):
            c[f"{a} → {b}"] += (y - x) * 1000
    for c in out.values():
        for k in c:
            if k != "jobs":
                c[k] = round(c[k] / c["jobs"])
    return out


def watch(kube, path, on_event, stop):
    while not stop.is_set():
        lst = kube.get(path)
        now = time.time()
        for o in lst["items"]:
            on_event("ADDED", o, now)
        try:
            kube.watch(path, lst["metadata"]["resourceVersion"], stop,
                       lambda t, o: on_event(t, o, time.time()))
        except ApiError as e:
            if e.status != 410:
                log(f"watch {path}: {e}; listing again")
                time.sleep(0.5)


def sample_tree(hub, leaves, samples, stop):
    """(time, {leaf path: used cpu milli}) every 0.5 s."""
    k = Kube.__new__(Kube)
    k.__dict__.update(hub.__dict__)
    k._local = threading.local()
    while not stop.is_set():
        t0 = time.time()
        try:
            st = (k.get(TREE_PATH).get("status") or {})
            used = {}
            for n in st.get("nodes") or []:
                if n["path"] in leaves:
                    used[n["path"]] = gen.cpu_milli((n.get("used") or {}).get("cpu", "0"))
            samples.append((time.time(), used))
        except Exception as e:  # noqa: BLE001
            log(f"tree sample: {e}")
        stop.wait(max(0.0, 0.5 - (time.time() - t0)))


def create_set(kube, s, jobs, errors, manifest=None):
    """Creates one workload set's Jobs on `kube` as the generator does (waiting the set's
    interval before each), telling `jobs.created` when each create returned; `manifest` (by
    default `job_manifest`) makes each Job."""
    for it in s["items"]:
        time.sleep(s["interval_ms"] / 1000)
        try:
            kube.create(f"/apis/batch/v1/namespaces/{it['namespace']}/jobs",
                        (manifest or job_manifest)(it))
        except Exception as e:  # noqa: BLE001
            errors.append(f"{it['namespace']}/{it['name']}: {e}")
            continue
        jobs.created((it["namespace"], it["name"]), time.time())


def api_requests(kube):
    """The API server's request counts (apiserver_request_total) by resource/subresource and
    verb, watches left out; requests answered with other than 2xx also by their code."""
    import http.client
    import re
    try:
        c = http.client.HTTPSConnection(kube.host, kube.port, context=kube.ctx, timeout=30)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
    except (http.client.HTTPException, OSError) as e:
        log(f"could not read /metrics: {e}")
        return {}
    out = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if labels.get("verb") == "WATCH":
            continue
        key = f"{labels.get('resource')}{'/' + labels['subresource'] if labels.get('subresource') else ''} {labels.get('verb')}"
        code = labels.get("code", "")
        if code and not code.startswith("2"):
            # A refused request is still a request; its code says why (a conflict, a
            # validation error) and is kept apart from the ones that landed.
            key += f" {code}"
        out[key] = out.get(key, 0) + float(line.rsplit(" ", 1)[1])
    return out


def diff_requests(a, b):
    d = {k: int(v - a.get(k, 0)) for k, v in b.items() if v - a.get(k, 0) >= 1}
    return dict(sorted(d.items(), key=lambda kv: -kv[1]))


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(-(-p * len(xs) // 100)) - 1))]  # nearest rank


def summarize(jobs, samples, queues, t_first, t_last, rusage, wall_proc, gen_s):
    recs = list(jobs.values())
    by_class = {}
    for j in recs:
        c = by_class.setdefault(j["class"], {"count": 0, "admit": [], "dispatch": [], "finish": [],
                                             "member": [], "lag": [], "evictions": 0})
        c["count"] += 1
        c["evictions"] += j["requeues"]
        if j["created"] and j["admitted"]:
            c["admit"].append((j["admitted"] - j["created"]) * 1000)
        if j["created"] and j["dispatched"]:
            c["dispatch"].append((j["dispatched"] - j["created"]) * 1000)
        if j["created"] and j["finished"]:
            c["finish"].append((j["finished"] - j["created"]) * 1000)
        if j["created"] and j["member_complete"]:
            c["member"].append((j["member_complete"] - j["created"]) * 1000)
        if j["member_complete"] and j["finished"]:
            c["lag"].append((j["finished"] - j["member_complete"]) * 1000)
    classes = {}
    for name, c in sorted(by_class.items()):
        mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
        classes[name] = {
            "count": c["count"], "admitted": len(c["admit"]), "finished": len(c["finish"]),
            "evictions": c["evictions"],
            "meanTimeToAdmissionMs": mean(c["admit"]), "p99TimeToAdmissionMs": pct(c["admit"], 99),
            "meanTimeToDispatchMs": mean(c["dispatch"]), "p99TimeToDispatchMs": pct(c["dispatch"], 99),
            "meanTimeToFinishMs": mean(c["finish"]), "p99TimeToFinishMs": pct(c["finish"], 99),
            "meanTimeToMemberCompleteMs": mean(c["member"]),
            "meanMemberCompleteToFinishedMs": mean(c["lag"]),
        }
    span = (t_last - t_first) if (t_first and t_last) else None
    # Per-leaf usage: the tree's sampled `used`, held until the next sample, over [t_first, t_last]
    # (Kueue's recorder integrates its ClusterQueues' usage the same way, between status events).
    leaf_paths = {f"root/{q['cohort']}/{q['name']}": q for q in queues}
    integ = {p: 0.0 for p in leaf_paths}
    for (t0, u0), (t1, _) in zip(samples, samples[1:]):
        a, b = max(t0, t_first or t0), min(t1, t_last or t1)
        if b > a:
            for p, v in u0.items():
                integ[p] += v * (b - a)
    # The same from each job's admission intervals (admittedAt → leaving Admitted/Dispatched/Running).
    integ_iv = {q["name"]: 0.0 for q in queues}
    for j in recs:
        for a, b in j["holds"]:
            b = b or t_last
            if a and b and b > a:
                integ_iv[j["namespace"]] += j["cpu_m"] * (b - a)
    usage, usage_iv = {}, {}
    if span:
        for p, q in leaf_paths.items():
            usage[q["name"]] = 100 * integ[p] / (q["nominal_m"] * span)
            usage_iv[q["name"]] = 100 * integ_iv[q["name"]] / (q["nominal_m"] * span)
    nominal = sum(q["nominal_m"] for q in queues)
    # Every job is admitted once, and once more after each time it was taken back (preempted);
    # Kueue's side counts workloads + evictions the same way.
    admissions = len(recs) + sum(j["requeues"] for j in recs)
    return {
        "jobs": len(recs), "created": sum(1 for j in recs if j["created"]),
        "finished": sum(1 for j in recs if j["finished"]),
        "failed": sum(1 for j in recs if j["state"] == "Failed"),
        "generationSeconds": gen_s,
        "wallSeconds": span,
        "admissions": admissions,
        "admissionsPerSecond": admissions / span if span else None,
        "workloadClasses": classes,
        "evictions": sum(j["requeues"] for j in recs),
        "leafUsagePercent": usage,
        "leafUsagePercentFromJobs": usage_iv,
        "minLeafUsagePercent": min(usage.values()) if usage else None,
        "minLeafUsagePercentFromJobs": min(usage_iv.values()) if usage_iv else None,
        "classUsagePercent": (100 * sum(integ.values()) / (nominal * span)) if span else None,
        "classUsagePercentFromJobs": (100 * sum(integ_iv.values()) / (nominal * span)) if span else None,
        "treeSamples": len(samples),
        "controller": {"wallSeconds": wall_proc, "userSeconds": rusage.ru_utime if rusage else None,
                       "sysSeconds": rusage.ru_stime if rusage else None,
                       "maxRssKiB": rusage.ru_maxrss if rusage else None},
    }


def controller_passes(port):
    """The controller's passes (muster_sync_pass_duration_seconds: count, sum in seconds)."""
    import urllib.request
    out = {}
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                for k in ("count", "sum"):
                    if line.startswith(f"muster_sync_pass_duration_seconds_{k} "):
                        out[k] = float(line.split()[1])
    except OSError as e:
        log(f"could not read the controller's /metrics: {e}")
    return out


def http_ok(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except Exception:  # noqa: BLE001
        return False


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--kubeconfigs", required=True)
    ap.add_argument("--muster", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--controller-arg", action="append", default=[])
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cfg = gen.load(a.config)
    hub = Kube(os.path.join(a.kubeconfigs, "hub.kubeconfig"))
    member = Kube(os.path.join(a.kubeconfigs, f"{MEMBER}.kubeconfig"))
    queues, sets = setup(hub, member, cfg, a.muster)
    n_jobs = sum(len(s["items"]) for s in sets)
    log(f"{len(queues)} leaves, {n_jobs} jobs in {len(sets)} sets; starting the controller")

    http, webhook = free_port(), free_port()
    ctl_log = open(os.path.join(a.out, "controller.log"), "w")
    args = [a.muster, "controller", "--kubeconfig", os.path.join(a.kubeconfigs, "hub.kubeconfig"),
            "--namespace", NS, "--http-addr", f"127.0.0.1:{http}",
            "--webhook-addr", f"127.0.0.1:{webhook}", "--webhook-url", f"https://127.0.0.1:{webhook}/mutate",
            "--webhook-cert-dir", os.path.join(a.out, "webhook-certs"), "--instance", "bench-kueue",
            *a.controller_arg]
    env = dict(os.environ, RUST_LOG=os.environ.get("BENCH_RUST_LOG", "info,kube=warn"))
    t_start = time.time()
    ctl = subprocess.Popen(args, stdout=ctl_log, stderr=subprocess.STDOUT, env=env)
    with open(os.path.join(a.out, "controller.pid"), "w") as f:
        f.write(f"{ctl.pid}\n")
    rusage, wall_proc = None, None
    passes = {}
    stop = threading.Event()
    try:
        wait("controller /readyz", 120, lambda: ctl.poll() is None and http_ok(f"http://127.0.0.1:{http}/readyz"))
        wait("member-a Ready", 120, lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (hub.get(f"/apis/muster.dev/v1alpha1/memberclusters/{MEMBER}").get("status") or {})
            .get("conditions") or []))
        want = {q["name"] for q in queues}

        def webhook_covers():
            mwc = hub.get("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/muster")
            exprs = mwc["webhooks"][0]["namespaceSelector"].get("matchExpressions") or []
            return any(e["operator"] == "In" and want <= set(e.get("values") or []) for e in exprs)
        wait("the webhook to cover the tree's namespaces", 120, webhook_covers)
        log(f"controller ready after {time.time() - t_start:.1f}s (pid {ctl.pid}); creating jobs")

        jobs = Jobs()
        for s in sets:
            for it in s["items"]:
                jobs.add(it)
        samples = []
        leaves = {f"root/{q['cohort']}/{q['name']}" for q in queues}
        threads = [threading.Thread(target=watch, args=(hub, QJ, jobs.on_qj, stop), daemon=True),
                   threading.Thread(target=watch, args=(member, "/apis/batch/v1/jobs",
                                                         jobs.on_member_job, stop), daemon=True),
                   threading.Thread(target=watch, args=(member, "/api/v1/pods",
                                                         jobs.on_member_pod, stop), daemon=True),
                   threading.Thread(target=sample_tree, args=(hub, leaves, samples, stop), daemon=True)]
        for t in threads:
            t.start()
        errors = []
        req0 = {"hub": api_requests(hub), MEMBER: api_requests(member)}
        t_gen = time.time()
        creators = [threading.Thread(target=create_set, args=(hub, s, jobs, errors), daemon=True)
                    for s in sets]
        for t in creators:
            t.start()
        deadline = time.time() + a.timeout
        last_report = 0
        gen_s = None
        while time.time() < deadline:
            if ctl.poll() is not None:
                raise SystemExit(f"muster controller exited ({ctl.returncode}); see {ctl_log.name}")
            if gen_s is None and not any(t.is_alive() for t in creators):
                gen_s = time.time() - t_gen
                log(f"all {n_jobs - len(errors)} jobs created in {gen_s:.1f}s ({len(errors)} errors)")
            with jobs.lock:
                vals = list(jobs.jobs.values())
                done = jobs.done
            if time.time() - last_report > 10:
                last_report = time.time()
                log(f"created {sum(1 for j in vals if j['created'])}, admitted "
                    f"{sum(1 for j in vals if j['admitted'])}, complete on {MEMBER} "
                    f"{sum(1 for j in vals if j['member_complete'])}, finished {done} of {n_jobs}; "
                    f"load {os.getloadavg()[0]:.1f}")
            if gen_s is not None and done >= n_jobs - len(errors):
                break
            time.sleep(0.2)
        else:
            log(f"timed out after {a.timeout}s")
        time.sleep(1)  # one more tree sample after the last finish
        stop.set()
        requests = {"hub": diff_requests(req0["hub"], api_requests(hub)),
                    MEMBER: diff_requests(req0[MEMBER], api_requests(member))}
        passes = controller_passes(http)
        if errors:
            log(f"{len(errors)} creates failed; first: {errors[0]}")
    finally:
        stop.set()
        if ctl.poll() is None:
            ctl.send_signal(signal.SIGTERM)
            try:
                _, status, rusage = os.wait4(ctl.pid, 0)
                ctl.returncode = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                ctl.wait()
            wall_proc = time.time() - t_start
        ctl_log.close()

    with jobs.lock:
        recs = {k: dict(v) for k, v in jobs.jobs.items()}
    created = [j["created"] for j in recs.values() if j["created"]]
    finished = [j["finished"] for j in recs.values() if j["finished"]]
    t_first = min(created) if created else None
    t_last = max(finished) if finished else None
    summary = summarize(recs, samples, queues, t_first, t_last, rusage, wall_proc, gen_s)
    summary["createErrors"] = len(errors)
    summary["memberStepsMs"] = member_phases(recs.values())
    # What the run asked of each API server (the harness's own creates and reads included).
    summary["apiRequests"] = requests
    summary["controllerArgs"] = args[1:]
    # The controller's passes over its jobs: how many, and their wall time.
    summary["controllerPasses"] = passes
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(a.out, "jobs.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["namespace", "name", "class", "cpu_m", "ms to admitted", "ms to dispatched",
                    "ms to member complete", "ms to finish", "requeues", "state"])
        for j in recs.values():
            d = lambda t: round((t - j["created"]) * 1000) if t and j["created"] else ""  # noqa: E731
            w.writerow([j["namespace"], j["name"], j["class"], j["cpu_m"], d(j["admitted"]),
                        d(j["dispatched"]), d(j["member_complete"]), d(j["finished"]), j["requeues"],
                        j["state"]])
    log(f"summary: {os.path.join(a.out, 'summary.json')}")


if __name__ == "__main__":
    main()
