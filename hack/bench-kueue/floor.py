#!/usr/bin/env python3
"""The member alone: the benchmark's workload created straight on member-a, with no muster and no
quota in front (the Jobs unsuspended, as the user wrote them; kube-scheduler alone fits them onto
the nodes). What this takes is the floor under muster's side of `make bench-kueue`: every job
muster dispatches does at least this member work, on the same machine, at the same time as
the hub's.

  floor.py --config generator.yaml --kubeconfigs DIR --out DIR

Writes `summary.json` (wall time from the first create to the last Complete, mean time per step
of a job on the member, per class) and `jobs.csv`.
"""

import argparse
import csv
import json
import os
import sys
import threading
import time

import muster_run as mr

import gen


def log(msg):
    print(f"[bench-kueue {time.strftime('%H:%M:%S')}] member alone: {msg}", file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--kubeconfigs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=float, default=1800)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cfg = gen.load(a.config)
    member = mr.Kube(os.path.join(a.kubeconfigs, f"{mr.MEMBER}.kubeconfig"))
    _, queues, sets = gen.expand(cfg)
    for q in queues:
        member.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                             "metadata": {"name": q["name"]}}, exist_ok=True)
    for p in sorted({it["priority"] for s in sets for it in s["items"]}):
        member.apply(f"/apis/scheduling.k8s.io/v1/priorityclasses/{mr.prio_class(p)}", {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": mr.prio_class(p)}, "value": p, "globalDefault": False,
            "preemptionPolicy": "Never"})
    n_jobs = sum(len(s["items"]) for s in sets)
    jobs = mr.Jobs()
    for s in sets:
        for it in s["items"]:
            jobs.add(it)
    stop = threading.Event()
    watches = [threading.Thread(target=mr.watch, args=(member, path, fn, stop), daemon=True)
               for path, fn in (("/apis/batch/v1/jobs", jobs.on_member_job),
                                ("/api/v1/pods", jobs.on_member_pod))]
    for t in watches:
        t.start()
    errors = []
    log(f"{n_jobs} jobs straight onto {mr.MEMBER}")
    t_gen = time.time()
    creators = [threading.Thread(target=mr.create_set, args=(member, s, jobs, errors), daemon=True)
                for s in sets]
    for t in creators:
        t.start()
    deadline, last_report, gen_s = time.time() + a.timeout, 0, None
    while time.time() < deadline:
        if gen_s is None and not any(t.is_alive() for t in creators):
            gen_s = time.time() - t_gen
            log(f"all {n_jobs - len(errors)} jobs created in {gen_s:.1f}s ({len(errors)} errors)")
        with jobs.lock:
            complete = sum(1 for j in jobs.jobs.values() if j["member_complete"])
        if time.time() - last_report > 10:
            last_report = time.time()
            log(f"complete {complete} of {n_jobs}; load {os.getloadavg()[0]:.1f}")
        if gen_s is not None and complete >= n_jobs - len(errors):
            break
        time.sleep(0.2)
    else:
        log(f"timed out after {a.timeout}s")
    stop.set()
    with jobs.lock:
        recs = {k: dict(v) for k, v in jobs.jobs.items()}
    created = [j["created"] for j in recs.values() if j["created"]]
    done = [j["member_complete"] for j in recs.values() if j["member_complete"]]
    steps = {}
    for j in recs.values():
        p = next(iter(j["pods"].values()), {}) if len(j["pods"]) == 1 else {}
        t = [j["created"], p.get("seen"), p.get("bound"), p.get("running"), p.get("succeeded"),
             j["member_complete"]]
        if any(x is None for x in t):
            continue
        c = steps.setdefault(j["class"], {"jobs": 0, **{k: 0.0 for k in STEPS}})
        c["jobs"] += 1
        for k, x, y in zip(STEPS, t, t[1:]):
            c[k] += (y - x) * 1000
    for c in steps.values():
        for k in STEPS:
            c[k] = round(c[k] / c["jobs"])
    span = max(done) - min(created) if created and done else None
    summary = {"jobs": n_jobs, "created": len(created), "complete": len(done),
               "createErrors": len(errors), "generationSeconds": gen_s, "wallSeconds": span,
               "jobsPerSecond": len(done) / span if span else None, "stepsMs": steps}
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(a.out, "jobs.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["namespace", "name", "class", "ms to member complete"])
        for j in recs.values():
            d = round((j["member_complete"] - j["created"]) * 1000) \
                if j["member_complete"] and j["created"] else ""
            w.writerow([j["namespace"], j["name"], j["class"], d])
    log(f"summary: {os.path.join(a.out, 'summary.json')}")


# The steps of a job on the member alone: created (the create returned) → its pod seen → bound →
# running → succeeded → the Job Complete.
STEPS = ["created → pod seen", "pod seen → bound", "bound → running", "running → succeeded",
         "succeeded → Complete"]


if __name__ == "__main__":
    main()
