#!/usr/bin/env python3
"""Kueue with real Jobs: the benchmark's workload as batch Jobs on member-a, queued and admitted
by Kueue's own manager (`cmd/kueue`, built by build.sh) running against member-a, with the
generator's ClusterQueues, cohorts and preemption rules, as Kueue's runner makes them. Kueue's
scheduler benchmark admits and finishes Workload objects only; here Kueue unsuspends real Jobs
whose pods kwok runs on the same nodes as muster's side, and a Job frees its quota when it is
Complete. Set up as multikueue.py does (loopback ports, webhooks served but not registered, so
the Jobs are created as Kueue's Job webhook would leave them: suspended, with the queue-name
label), on one cluster.

  kueue_jobs.py --config generator.yaml --kubeconfigs DIR --kueue DIR --out DIR

Writes `summary.json` (wall time from the first create to the last Complete, admissions per
second, per class the mean and p99 time to admission (create → unsuspended by Kueue) and mean
time to finish (create → Complete), evictions (Kueue's own count, by reason), Kueue's cpu) and
`jobs.csv`.
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import threading
import time

import yaml

import multikueue as mk
import muster_run as mr

import gen

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def log(msg):
    print(f"[bench-kueue {time.strftime('%H:%M:%S')}] kueue, real Jobs: {msg}", file=sys.stderr, flush=True)


class Seen:
    """Per job: created, each unsuspension by Kueue, Complete, suspensions after a start."""

    def __init__(self, items):
        self.lock = threading.Lock()
        self.jobs = {(it["namespace"], it["name"]): {
            "class": it["class"], "created": None, "started": None, "complete": None,
            "evictions": 0, "running": False} for it in items}

    def created(self, key, t):
        with self.lock:
            self.jobs[key]["created"] = t

    def on_job(self, typ, obj, now):
        if typ == "DELETED":
            return
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        suspended = (obj.get("spec") or {}).get("suspend", False)
        conds = (obj.get("status") or {}).get("conditions") or []
        with self.lock:
            j = self.jobs.get(key)
            if j is None:
                return
            if not suspended and not j["running"]:
                j["running"] = True
                j["started"] = j["started"] or now
            elif suspended and j["running"]:
                j["running"] = False
                j["evictions"] += 1
            if j["complete"] is None and any(
                    c["type"] == "Complete" and c["status"] == "True" for c in conds):
                j["complete"] = now


def cluster_queues(kube, cfg):
    """The generator's ResourceFlavor, ClusterQueues, namespaces and LocalQueues, as Kueue's
    runner makes them (test/performance/scheduler/runner/generator)."""
    kube.apply(f"{mk.API}/resourceflavors/rf", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "rf"}, "spec": {}})
    _, queues, _ = gen.expand(cfg)
    for q in queues:
        res = {"name": "cpu", "nominalQuota": gen.milli_str(q["nominal_m"])}
        if q["borrowing_m"]:
            res["borrowingLimit"] = gen.milli_str(q["borrowing_m"])
        preemption = {k: q[k] for k in ("reclaimWithinCohort", "withinClusterQueue") if q[k]}
        kube.apply(f"{mk.API}/clusterqueues/{q['name']}", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": q["name"]},
            "spec": {"cohortName": q["cohort"], "namespaceSelector": {}, "preemption": preemption,
                     "resourceGroups": [{"coveredResources": ["cpu"],
                                         "flavors": [{"name": "rf", "resources": [res]}]}]}})
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": q["name"]}}, exist_ok=True)
        kube.apply(f"{mk.API}/namespaces/{q['name']}/localqueues/{q['name']}", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": q["name"], "namespace": q["name"]},
            "spec": {"clusterQueue": q["name"]}})
    return queues


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--kubeconfigs", required=True)
    ap.add_argument("--kueue", required=True, help="build.sh's folder (bin/kueue, crds/)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--stall", type=float, default=120,
                    help="stop once every Job is created and none completed for this long "
                         "(the Jobs left are recorded as stuck)")
    ap.add_argument("--concurrency", type=int, default=20,
                    help="Kueue's Job and Workload reconcilers at once (its default: 5)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cfg = gen.load(a.config)
    kc = os.path.join(a.kubeconfigs, f"{mr.MEMBER}.kubeconfig")
    member = mr.Kube(kc)
    kueue_bin = os.path.join(a.kueue, "bin", "kueue")
    mk.install_crds(member, os.path.join(a.kueue, "crds"))
    member.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": mk.KUEUE_NS}}, exist_ok=True)
    mk.metrics_cert()
    path, health, d = mk.config(a.out, "kueue")
    # Its Job and Workload reconcilers 20 at a time (Kueue's defaults, 5, created the Workloads
    # 20 s after their Jobs and unsuspended admitted Jobs 45 s late in a first run), as
    # member-a's Job controller runs 20 syncs (member_kcm.py).
    with open(path) as f:
        kcfg = yaml.safe_load(f)
    kcfg["controller"] = {"groupKindConcurrency": {
        "Job.batch": a.concurrency, "Workload.kueue.x-k8s.io": a.concurrency}}
    with open(path, "w") as f:
        yaml.safe_dump(kcfg, f, sort_keys=False)
    logf = open(os.path.join(d, "kueue.log"), "w")
    t_start = time.time()
    proc = subprocess.Popen([kueue_bin, f"--config={path}", f"--kubeconfig={kc}", "--zap-log-level=info"],
                            stdout=logf, stderr=subprocess.STDOUT)
    stop = threading.Event()
    rusage = None
    stalled = False
    requests = {}
    try:
        mr.wait("kueue /readyz", 120, lambda: proc.poll() is None
                and mr.http_ok(f"http://127.0.0.1:{health}/readyz"))
        queues = cluster_queues(member, cfg)
        for p in sorted({it["priority"] for s in gen.expand(cfg)[2] for it in s["items"]}):
            member.apply(f"/apis/scheduling.k8s.io/v1/priorityclasses/{mr.prio_class(p)}", {
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": mr.prio_class(p)}, "value": p, "globalDefault": False,
                "preemptionPolicy": "Never"})
        mr.wait("every ClusterQueue Active", 120, lambda: all(
            any(c["type"] == "Active" and c["status"] == "True"
                for c in (member.get(f"{mk.API}/clusterqueues/{q['name']}").get("status") or {})
                .get("conditions") or []) for q in queues))
        _, _, sets = gen.expand(cfg)
        items = [it for s in sets for it in s["items"]]
        seen = Seen(items)
        t = threading.Thread(target=mr.watch, args=(member, "/apis/batch/v1/jobs", seen.on_job, stop),
                             daemon=True)
        t.start()
        errors = []
        log(f"{len(queues)} ClusterQueues ready; {len(items)} Jobs onto {mr.MEMBER}")
        # The API server's requests over the run (Kueue's, the Job controller's, the harness's),
        # counted as muster's side counts the hub's.
        req0 = mr.api_requests(member)
        creators = [threading.Thread(target=mr.create_set, args=(member, s, seen, errors, queued_manifest),
                                     daemon=True)
                    for s in sets]
        for c in creators:
            c.start()
        deadline, last = time.time() + a.timeout, 0
        progress = (0, time.time())  # (jobs complete, when that count was first seen)
        while time.time() < deadline:
            with seen.lock:
                done = sum(1 for j in seen.jobs.values() if j["complete"])
            if done != progress[0]:
                progress = (done, time.time())
            if time.time() - last > 10:
                last = time.time()
                log(f"complete {done} of {len(items)}; load {os.getloadavg()[0]:.1f}")
            created_all = not any(c.is_alive() for c in creators)
            if created_all and done >= len(items) - len(errors):
                break
            if created_all and time.time() - progress[1] > a.stall:
                # Kueue v0.17.1 once marked 45 Workloads Finished ("OwnerNotFound") a second
                # after admitting them while their Jobs existed: those Jobs stay suspended.
                log(f"stalled: {len(items) - done} Jobs not complete, none completed for "
                    f"{a.stall:.0f}s; stopping (workloads.json holds their Workloads)")
                stalled = True
                break
            time.sleep(0.2)
        else:
            log(f"timed out after {a.timeout}s")
        requests = mr.diff_requests(req0, mr.api_requests(member))
        kueue_evictions, kueue_evictions_by_class = workload_evictions(member, a.out)
    finally:
        stop.set()
        if proc.poll() is None:
            proc.terminate()
            try:
                _, status, rusage = os.wait4(proc.pid, 0)
            except ChildProcessError:
                proc.wait()
        logf.close()
        mk.cleanup()
    wall_proc = time.time() - t_start
    with seen.lock:
        recs = dict(seen.jobs)
    created = [j["created"] for j in recs.values() if j["created"]]
    complete = [j["complete"] for j in recs.values() if j["complete"]]
    span = max(complete) - min(created) if created and complete else None
    classes = {}
    for j in recs.values():
        c = classes.setdefault(j["class"], {"count": 0, "admit": [], "finish": [], "evictions": 0})
        c["count"] += 1
        c["evictions"] += j["evictions"]
        if j["created"] and j["started"]:
            c["admit"].append((j["started"] - j["created"]) * 1000)
        if j["created"] and j["complete"]:
            c["finish"].append((j["complete"] - j["created"]) * 1000)
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    evictions = sum(j["evictions"] for j in recs.values())
    summary = {
        "jobs": len(recs), "created": len(created), "complete": len(complete),
        "createErrors": len(errors), "wallSeconds": span,
        # Jobs never complete when the run stopped at a stall (see --stall); the wall time then
        # covers only the Jobs that completed.
        "stuck": len(recs) - len(complete) if stalled else 0,
        # First create → last create (returned): the pace the Jobs arrived at.
        "generationSeconds": max(created) - min(created) if created else None,
        # Kueue's own count (every Workload's status.schedulingStats.evictions), which includes
        # workloads evicted before their Job was unsuspended; `suspendedAgain` counts only the
        # Jobs seen started and then suspended.
        "evictions": sum(kueue_evictions.values()), "evictionsByReason": kueue_evictions,
        "evictionsByClass": kueue_evictions_by_class,
        "suspendedAgain": evictions,
        "admissionsPerSecond": (len(recs) + sum(kueue_evictions.values())) / span if span else None,
        "workloadClasses": {n: {"count": c["count"], "evictions": c["evictions"],
                                "meanTimeToAdmissionMs": mean(c["admit"]),
                                "p99TimeToAdmissionMs": mr.pct(c["admit"], 99),
                                "meanTimeToFinishMs": mean(c["finish"])}
                            for n, c in sorted(classes.items())},
        # {"resource[/subresource] VERB": count} on member-a's API server, watches left out.
        "apiRequests": {mr.MEMBER: requests},
        "kueue": {"wallSeconds": wall_proc,
                  "cpuSeconds": rusage.ru_utime + rusage.ru_stime if rusage else None,
                  "maxRssMiB": rusage.ru_maxrss / 1024 if rusage else None},
    }
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(a.out, "jobs.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["namespace", "name", "class", "ms to admitted", "ms to complete", "evictions"])
        for (ns, name), j in recs.items():
            d_ = lambda t: round((t - j["created"]) * 1000) if t and j["created"] else ""  # noqa: E731
            w.writerow([ns, name, j["class"], d_(j["started"]), d_(j["complete"]), j["evictions"]])
    log(f"summary: {os.path.join(a.out, 'summary.json')}")


def workload_evictions(member, out_dir=None):
    """{reason/underlyingCause: count} and {job class: count} over every Workload, from Kueue's
    schedulingStats (the class is the owning Job's name up to its first '-'). With `out_dir`,
    every Workload's status goes to workloads.json there (the preemption messages name the
    preemptor: what a trace of the evictions reads)."""
    out, by_class = {}, {}
    items = member.get(f"{mk.API}/workloads").get("items") or []
    for w in items:
        owners = (w.get("metadata") or {}).get("ownerReferences") or [{}]
        cls = (owners[0].get("name") or "?").split("-")[0]
        for e in ((w.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []:
            k = "/".join(x for x in (e.get("reason"), e.get("underlyingCause")) if x)
            out[k] = out.get(k, 0) + int(e.get("count") or 0)
            by_class[cls] = by_class.get(cls, 0) + int(e.get("count") or 0)
    if out_dir:
        with open(os.path.join(out_dir, "workloads.json"), "w") as f:
            json.dump([{"metadata": w.get("metadata"), "status": w.get("status")} for w in items], f)
    return out, by_class


def queued_manifest(it):
    """The benchmark's Job as Kueue's Job webhook leaves it: suspended, with its queue."""
    job = mr.job_manifest(it)
    job["metadata"]["labels"][QUEUE_LABEL] = it["namespace"]
    job["spec"]["suspend"] = True
    return job


if __name__ == "__main__":
    main()
