#!/usr/bin/env python3
"""Reads Kueue's runner outputs and muster_run.py's summary and prints one table, muster vs
Kueue, with the ratio; writes the figures of both as JSON.

  report.py --kueue DIR --muster DIR --out FILE.json [--meta KEY=VALUE ...]

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


def fmt(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, float):
        v = f"{v:,.1f}" if abs(v) < 1000 else f"{v:,.0f}"
    else:
        v = f"{v:,}"
    return f"{v}{unit}"


def rows(k, m):
    out = [
        ("workloads / jobs", k["workloads"], m["workloads"], ""),
        ("wall: first creation → last finish (s)", k["spanSeconds"], m["spanSeconds"], ""),
        ("wall: process lifetime (s)", k["wallSeconds"], m["wallSeconds"], ""),
        ("admissions / s", k["admissionsPerSecond"], m["admissionsPerSecond"], ""),
    ]
    for c in sorted(set(k["workloadClasses"]) | set(m["workloadClasses"])):
        kc, mc = k["workloadClasses"].get(c, {}), m["workloadClasses"].get(c, {})
        sec = lambda v: v / 1000 if v is not None else None  # noqa: E731
        out.append((f"{c}: mean time to admission (s)", sec(kc.get("meanTimeToAdmissionMs")),
                    sec(mc.get("meanTimeToAdmissionMs")), ""))
        out.append((f"{c}: p99 time to admission (s)", sec(kc.get("p99TimeToAdmissionMs")),
                    sec(mc.get("p99TimeToAdmissionMs")), ""))
        out.append((f"{c}: mean time to finish (s)", sec(kc.get("meanTimeToFinishMs")),
                    sec(mc.get("meanTimeToFinishMs")), ""))
        out.append((f"{c}: mean time to dispatch (s; muster only)", None,
                    sec(mc.get("meanTimeToDispatchMs")), ""))
        out.append((f"{c}: member Complete → hub Finished (s; muster only)", None,
                    sec(mc.get("meanMemberCompleteToFinishedMs")), ""))
    out += [
        ("usage, all queues (% of nominal/min)", k["classUsagePercent"], m["classUsagePercent"], ""),
        ("lowest queue's usage (% of nominal/min)", k["minClusterQueueUsagePercent"],
         m["minClusterQueueUsagePercent"], ""),
        ("evictions / preemptions", k["evictions"], m["evictions"], ""),
        ("controller cpu (s)", k["process"]["cpuSeconds"], m["process"]["cpuSeconds"], ""),
        ("controller peak RSS (MiB)", k["process"]["maxRssMiB"], m["process"]["maxRssMiB"], ""),
    ]
    req = (m.get("apiRequests") or {}).get("hub") or {}
    if req and m["workloads"]:
        out.append(("hub API requests per job (muster only)", None,
                    sum(req.values()) / m["workloads"], ""))
        out.append(("  of which QueuedJob status writes", None,
                    req.get("queuedjobs/status APPLY", 0) / m["workloads"], ""))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kueue", required=True)
    ap.add_argument("--muster", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--meta", action="append", default=[])
    a = ap.parse_args()
    k = kueue_figures(a.kueue)
    m = muster_figures(a.muster)
    meta = dict(x.split("=", 1) for x in a.meta)
    table = rows(k, m)
    w = max(len(r[0]) for r in table)
    lines = [f"{'figure':<{w}}  {'Kueue':>10}  {'muster':>10}  {'muster/Kueue':>12}"]
    for name, kv, mv, _ in table:
        ratio = (mv / kv) if (isinstance(kv, (int, float)) and isinstance(mv, (int, float)) and kv) else None
        lines.append(f"{name:<{w}}  {fmt(kv):>10}  {fmt(mv):>10}  {fmt(ratio) if ratio is None else f'{ratio:.2f}':>12}")
    text = "\n".join(lines)
    print(" ".join(f"{k_}={v}" for k_, v in meta.items()))
    print(text)
    with open(a.out, "w") as f:
        json.dump({"meta": meta, "kueue": k, "muster": m,
                   "table": [{"figure": r[0], "kueue": r[1], "muster": r[2]} for r in table]}, f, indent=1)
    with open(os.path.splitext(a.out)[0] + ".txt", "w") as f:
        f.write(" ".join(f"{k_}={v}" for k_, v in meta.items()) + "\n" + text + "\n")
    print(f"written: {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
