#!/usr/bin/env python3
"""Reads Kueue's runner outputs, muster_run.py's summary and (if given) kueue_jobs.py's and
floor.py's, and prints one table: muster vs Kueue's benchmark with the ratio, then Kueue with
real Jobs on the same member and the member alone (the floor under both), each with muster's
ratio to it; writes the figures as JSON.

  report.py --kueue DIR --muster DIR [--kueue-jobs DIR] [--member DIR] --out FILE.json
            [--meta KEY=VALUE ...]

Kueue's figures are taken as its own tooling computes them: wall time from
minimalkueue.stats.yaml (the process's lifetime, Kueue's `maxWallMs` check), mean time to
admission per class from summary.yaml, the ClusterQueue class usage as its checker computes it
(cpuUsed·100 / (nominalQuota · (lastEventTime − firstEventTime))); p99 per class and the lowest
single ClusterQueue's usage from wlStates.csv and cqStates.csv.
"""

import argparse
import csv
import datetime
import json
import os
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from muster_run import pct  # noqa: E402


def t(s):
    if isinstance(s, datetime.datetime):
        return s.timestamp()
    return datetime.datetime.fromisoformat(str(s).replace("Z", "+00:00")).timestamp()


def kueue_figures(d):
    with open(os.path.join(d, "summary.yaml")) as f:
        s = yaml.safe_load(f)
    stats = {}
    p = os.path.join(d, "minimalkueue.stats.yaml")
    if os.path.exists(p):
        with open(p) as f:
            stats = yaml.safe_load(f) or {}
    admit = {}
    with open(os.path.join(d, "wlStates.csv")) as f:
        for row in csv.DictReader(f):
            admit.setdefault(row["class name"], []).append(int(row["ms to admitted"]))
    cq_usage = {}
    with open(os.path.join(d, "cqStates.csv")) as f:
        for row in csv.DictReader(f):
            q, used, ms = (int(row["CPU quota (mCPU)"]), int(row["CPU used (mCPU * ms)"]),
                           int(row["monitor time (ms)"]))
            if q and ms:
                cq_usage[row["name"]] = 100 * used / (q * ms)
    span, class_usage = None, None
    for c in (s.get("clusterQueueClasses") or {}).values():
        el = (t(c["lastEventTime"]) - t(c["firstEventTime"]))
        span = el if span is None else max(span, el)
        if c.get("nominalQuota") and el > 0:
            class_usage = 100 * c["cpuUsed"] / (c["nominalQuota"] * el * 1000)
    classes = {}
    evictions = 0
    count = 0
    for name, c in sorted((s.get("workloadClasses") or {}).items()):
        classes[name] = {"count": c["count"], "evictions": c["totalEvictions"],
                         "meanTimeToAdmissionMs": c["averageTimeToAdmissionMs"],
                         "p99TimeToAdmissionMs": pct(admit.get(name, []), 99),
                         "meanTimeToFinishMs": c["averageTimeToFinishMs"]}
        evictions += c["totalEvictions"]
        count += c["count"]
    return {
        "workloads": count,
        "wallSeconds": stats.get("wallMs", 0) / 1000 if stats else None,
        "spanSeconds": span,
        "admissionsPerSecond": (count + evictions) / span if span else None,
        "workloadClasses": classes,
        "evictions": evictions,
        "classUsagePercent": class_usage,
        "minClusterQueueUsagePercent": min(cq_usage.values()) if cq_usage else None,
        "droppedWorkloadEvents": s.get("droppedWorkloadEvents"),
        "process": {"name": "minimalkueue", "cpuSeconds": (stats.get("userMs", 0) + stats.get("sysMs", 0)) / 1000
                    if stats else None, "maxRssMiB": stats.get("maxrss", 0) / 1024 if stats else None},
    }


def muster_figures(d):
    with open(os.path.join(d, "summary.json")) as f:
        s = json.load(f)
    c = s["controller"]
    return {
        "workloads": s["jobs"], "finished": s["finished"], "failed": s["failed"],
        "wallSeconds": c["wallSeconds"], "spanSeconds": s["wallSeconds"],
        "admissionsPerSecond": s["admissionsPerSecond"],
        "workloadClasses": s["workloadClasses"], "evictions": s["evictions"],
        "classUsagePercent": s["classUsagePercent"],
        "classUsagePercentFromJobs": s["classUsagePercentFromJobs"],
        "minClusterQueueUsagePercent": s["minLeafUsagePercent"],
        "minClusterQueueUsagePercentFromJobs": s["minLeafUsagePercentFromJobs"],
        "generationSeconds": s.get("generationSeconds"),
        "apiRequests": s.get("apiRequests"),
        "process": {"name": "muster controller",
                    "cpuSeconds": (c["userSeconds"] or 0) + (c["sysSeconds"] or 0) if c["userSeconds"] is not None else None,
                    "maxRssMiB": c["maxRssKiB"] / 1024 if c["maxRssKiB"] else None},
    }


def member_figures(d):
    """floor.py's summary in the shape of the others: the member alone has no admission, so only
    the wall time, jobs finished per second and time to finish (create → Complete)."""
    with open(os.path.join(d, "summary.json")) as f:
        s = json.load(f)
    times = {}
    with open(os.path.join(d, "jobs.csv")) as f:
        for row in csv.DictReader(f):
            if row["ms to member complete"]:
                times.setdefault(row["class"], []).append(int(row["ms to member complete"]))
    return {"workloads": s["jobs"], "spanSeconds": s["wallSeconds"], "wallSeconds": None,
            "finishedPerSecond": s["jobsPerSecond"],
            "workloadClasses": {c: {"meanTimeToFinishMs": sum(v) / len(v)} for c, v in times.items()},
            "stepsMs": s["stepsMs"]}


def fmt(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, float):
        v = f"{v:,.1f}" if abs(v) < 1000 else f"{v:,.0f}"
    else:
        v = f"{v:,}"
    return f"{v}{unit}"


def rows(sides):
    """(figure, [value per side]) for each line of the table; `sides` are figure dicts in the
    table's column order (Kueue, muster, then the optional ones), a value None where a side has
    no such figure."""
    sec = lambda v: v / 1000 if v is not None else None  # noqa: E731
    fin = lambda x: x["workloads"] / x["spanSeconds"] if x.get("spanSeconds") else None  # noqa: E731
    proc = lambda x, k: (x.get("process") or {}).get(k)  # noqa: E731
    each = lambda fn: [fn(x) for x in sides]  # noqa: E731
    out = [
        ("workloads / jobs", each(lambda x: x.get("workloads"))),
        ("wall: first creation → last finish (s)", each(lambda x: x.get("spanSeconds"))),
        ("wall: process lifetime (s)", each(lambda x: x.get("wallSeconds"))),
        ("admissions / s", each(lambda x: x.get("admissionsPerSecond"))),
        ("finished / s", each(lambda x: x.get("finishedPerSecond") or fin(x))),
    ]
    classes = sorted({c for x in sides for c in x.get("workloadClasses", {})})
    for c in classes:
        wc = lambda x, k: sec((x.get("workloadClasses", {}).get(c) or {}).get(k))  # noqa: E731
        out.append((f"{c}: mean time to admission (s)", each(lambda x: wc(x, "meanTimeToAdmissionMs"))))
        out.append((f"{c}: p99 time to admission (s)", each(lambda x: wc(x, "p99TimeToAdmissionMs"))))
        out.append((f"{c}: mean time to finish (s)", each(lambda x: wc(x, "meanTimeToFinishMs"))))
        out.append((f"{c}: mean time to dispatch (s; muster only)",
                    each(lambda x: wc(x, "meanTimeToDispatchMs"))))
        out.append((f"{c}: member Complete → hub Finished (s; muster only)",
                    each(lambda x: wc(x, "meanMemberCompleteToFinishedMs"))))
    out += [
        ("usage, all queues (% of nominal/min)", each(lambda x: x.get("classUsagePercent"))),
        ("lowest queue's usage (% of nominal/min)",
         each(lambda x: x.get("minClusterQueueUsagePercent"))),
        ("evictions / preemptions", each(lambda x: x.get("evictions"))),
        ("controller cpu (s)", each(lambda x: proc(x, "cpuSeconds"))),
        ("controller peak RSS (MiB)", each(lambda x: proc(x, "maxRssMiB"))),
    ]
    m = sides[1]
    req = (m.get("apiRequests") or {}).get("hub") or {}
    if req and m["workloads"]:
        only = lambda v: [v if i == 1 else None for i in range(len(sides))]  # noqa: E731
        out.append(("hub API requests per job (muster only)", only(sum(req.values()) / m["workloads"])))
        out.append(("  of which QueuedJob status writes",
                    only((req.get("queuedjobs/status APPLY", 0) + req.get("queuedjobs/status PATCH", 0))
                         / m["workloads"])))
    return out


def kueue_jobs_figures(d):
    """kueue_jobs.py's summary: Kueue's manager admitting real Jobs on member-a."""
    with open(os.path.join(d, "summary.json")) as f:
        s = json.load(f)
    return {"workloads": s["jobs"], "spanSeconds": s["wallSeconds"],
            "wallSeconds": s["kueue"]["wallSeconds"],
            "admissionsPerSecond": s["admissionsPerSecond"],
            "workloadClasses": s["workloadClasses"], "evictions": s["evictions"],
            "process": {"name": "kueue", "cpuSeconds": s["kueue"]["cpuSeconds"],
                        "maxRssMiB": s["kueue"]["maxRssMiB"]}}


def ratio(a, b):
    ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and b
    return f"{a / b:.2f}" if ok else "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kueue", required=True)
    ap.add_argument("--muster", required=True)
    ap.add_argument("--kueue-jobs", help="kueue_jobs.py's folder: Kueue with real Jobs")
    ap.add_argument("--member", help="floor.py's folder: the member alone")
    ap.add_argument("--out", required=True)
    ap.add_argument("--meta", action="append", default=[])
    a = ap.parse_args()
    k = kueue_figures(a.kueue)
    m = muster_figures(a.muster)
    extra = []
    if a.kueue_jobs:
        extra.append(("Kueue, Jobs", "muster/that", kueue_jobs_figures(a.kueue_jobs)))
    if a.member:
        extra.append(("member alone", "muster/member", member_figures(a.member)))
    meta = dict(x.split("=", 1) for x in a.meta)
    table = rows([k, m] + [x[2] for x in extra])
    w = max(len(r[0]) for r in table)
    head = f"{'figure':<{w}}  {'Kueue':>10}  {'muster':>10}  {'muster/Kueue':>12}"
    for label, rlabel, _ in extra:
        head += f"  {label:>12}  {rlabel:>13}"
    lines = [head]
    for name, vals in table:
        kv, mv = vals[0], vals[1]
        line = f"{name:<{w}}  {fmt(kv):>10}  {fmt(mv):>10}  {ratio(mv, kv):>12}"
        for v in vals[2:]:
            line += f"  {fmt(v):>12}  {ratio(mv, v):>13}"
        lines.append(line)
    text = "\n".join(lines)
    print(" ".join(f"{k_}={v}" for k_, v in meta.items()))
    print(text)
    names = ["kueue", "muster"] + [x[0] for x in extra]
    with open(a.out, "w") as fh:
        json.dump({"meta": meta, "kueue": k, "muster": m,
                   **{x[0]: x[2] for x in extra},
                   "table": [{"figure": r[0], **dict(zip(names, r[1]))} for r in table]}, fh, indent=1)
    with open(os.path.splitext(a.out)[0] + ".txt", "w") as fh:
        fh.write(" ".join(f"{k_}={v}" for k_, v in meta.items()) + "\n" + text + "\n")
    print(f"written: {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
