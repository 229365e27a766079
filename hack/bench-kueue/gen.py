#!/usr/bin/env python3
"""Kueue's scheduler-benchmark generator config, read and scaled, and what it means for muster.

  gen.py scale IN.yaml OUT.yaml SCALE     every workloadsSet count divided by SCALE (rounded,
                                          at least 1); intervals, run times, requests, quotas kept
  gen.py sim CONFIG.yaml OUT.yaml NODE_CPU [OVERHEAD_MS]
                                          the same workload as a `muster sim` scenario (each
                                          job runs its run time + OVERHEAD_MS)
  gen.py fleet CONFIG.yaml OUT.yaml NODE_CPU
                                          the fleet file: member-a with kwok nodes whose cpu adds
                                          up to the sum of the nominal quotas (nodes of NODE_CPU)
  gen.py tree CONFIG.yaml                 the ElasticQuotaTree's spec.root, as JSON

The expansion below follows the generator's naming as documented by its config (cohort
`<class>-<i>`, ClusterQueue `<class>-<set>-<i>-<cohort>` in a namespace of the same name,
workload `<class>-<set>-<n>-<k>`), so that both sides name the same things the same way.
"""

import json
import sys

import yaml


def cpu_milli(q):
    s = str(q).strip()
    if s.endswith("m"):
        return int(s[:-1])
    return int(round(float(s) * 1000))


def milli_str(m):
    return str(m // 1000) if m % 1000 == 0 else f"{m}m"


def load(path):
    with open(path) as f:
        return yaml.safe_load(f)


def scale(cfg, factor):
    out = json.loads(json.dumps(cfg))
    for cs in out["cohorts"]:
        for qs in cs["queuesSets"]:
            for ws in qs["workloadsSets"]:
                ws["count"] = max(1, int(round(ws["count"] / factor)))
    return out


def expand(cfg):
    """Cohorts, queues and workloads, in the generator's order. Each workload:
    (cq, wlset index, serial, template index, template, creation interval ms)."""
    cohorts, queues, sets = [], [], []
    for cs in cfg["cohorts"]:
        for c in range(cs["count"]):
            cohort = f"{cs['className']}-{c}"
            cohorts.append(cohort)
            for qs_idx, qs in enumerate(cs["queuesSets"]):
                for i in range(qs["count"]):
                    name = f"{qs['className']}-{qs_idx}-{i}-{cohort}"
                    nominal = cpu_milli(qs["nominalQuota"])
                    borrow = cpu_milli(qs.get("borrowingLimit") or 0)
                    queues.append({"name": name, "cohort": cohort, "class": qs["className"],
                                   "nominal_m": nominal, "borrowing_m": borrow,
                                   "reclaimWithinCohort": qs.get("reclaimWithinCohort"),
                                   "withinClusterQueue": qs.get("withinClusterQueue")})
                    for ws_idx, ws in enumerate(qs["workloadsSets"]):
                        items = []
                        for si in range(ws["count"]):
                            for k, t in enumerate(ws["workloads"]):
                                items.append({
                                    "namespace": name,
                                    "name": f"{t['className']}-{ws_idx}-{si}-{k}",
                                    "class": t["className"],
                                    "runtime_ms": int(t["runtimeMs"]),
                                    "priority": int(t.get("priority", 0)),
                                    "cpu_m": cpu_milli(t["request"]),
                                })
                        sets.append({"namespace": name, "interval_ms": int(ws["creationIntervalMs"]),
                                     "items": items})
    return cohorts, queues, sets


def tree_root(cfg):
    """Cohort → inner node (min = max = sum of its queues' nominal quotas, which is a Kueue
    cohort's capacity); ClusterQueue → leaf with its namespace, min = nominal, max = nominal +
    borrowingLimit (capped at the cohort's capacity, as Kueue caps borrowing), and
    `withinClusterQueue: LowerPriority` as the leaf's `muster.dev/within-queue-preemption`."""
    cohorts, queues, _ = expand(cfg)
    total = sum(q["nominal_m"] for q in queues)
    children = []
    for c in cohorts:
        qs = [q for q in queues if q["cohort"] == c]
        cap = sum(q["nominal_m"] for q in qs)
        leaves = [{"name": q["name"], "namespaces": [q["name"]],
                   "min": {"cpu": milli_str(q["nominal_m"])},
                   "max": {"cpu": milli_str(min(cap, q["nominal_m"] + q["borrowing_m"]))},
                   **({"attributes": {"muster.dev/within-queue-preemption": "LowerPriority"}}
                      if q["withinClusterQueue"] == "LowerPriority" else {})}
                  for q in qs]
        children.append({"name": c, "min": {"cpu": milli_str(cap)}, "max": {"cpu": milli_str(cap)},
                         "children": leaves})
    return {"name": "root", "min": {"cpu": milli_str(total)}, "max": {"cpu": milli_str(total)},
            "children": children}


def fleet(cfg, node_cpu):
    _, queues, sets = expand(cfg)
    total = sum(q["nominal_m"] for q in queues)
    node_m = cpu_milli(node_cpu)
    count = total // node_m
    nodes = [{"name": "bench", "count": count,
              "allocatable": {"cpu": milli_str(node_m), "memory": "256Gi", "pods": "250"}}]
    rest = total - count * node_m
    if rest:
        nodes.append({"name": "bench-rest", "count": 1,
                      "allocatable": {"cpu": milli_str(rest), "memory": "256Gi", "pods": "250"}})
    return {"clusters": [{"name": "member-a", "labels": {"bench": "kueue"}, "nodes": nodes}]}


def sim(cfg, node_cpu, overhead_ms):
    """The same workload as a `muster sim` scenario: the fleet and tree above, each workload
    submitted when the generator would create it and running its run time plus `overhead_ms`
    (what the member adds between admission and the finish muster sees)."""
    _, _, sets = expand(cfg)
    scenario = fleet(cfg, node_cpu)
    scenario["quota"] = {"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
                         "metadata": {"name": "bench-kueue", "namespace": "kube-system"},
                         "spec": {"root": tree_root(cfg)}}
    prios = sorted({it["priority"] for s_ in sets for it in s_["items"]})
    scenario["priorityClasses"] = {f"bench-kueue-p{p}": p for p in prios}
    jobs = []
    for s_ in sets:
        for k, it in enumerate(s_["items"]):
            cpu = milli_str(it["cpu_m"])
            jobs.append({"at": f"{(k + 1) * s_['interval_ms']}ms",
                         "runFor": f"{it['runtime_ms'] + overhead_ms}ms",
                         "manifest": {
                             "apiVersion": "batch/v1", "kind": "Job",
                             "metadata": {"name": it["name"], "namespace": it["namespace"]},
                             "spec": {"template": {"spec": {
                                 "restartPolicy": "Never",
                                 "priorityClassName": f"bench-kueue-p{it['priority']}",
                                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                                 "resources": {"requests": {"cpu": cpu},
                                                               "limits": {"cpu": cpu}}}]}}}}})
    jobs.sort(key=lambda j: int(j["at"][:-2]))
    scenario["jobs"] = jobs
    return scenario


def main():
    cmd = sys.argv[1]
    if cmd == "scale":
        cfg = scale(load(sys.argv[2]), float(sys.argv[4]))
        with open(sys.argv[3], "w") as f:
            f.write(f"# Kueue's generator config {sys.argv[2]}, workload counts / {sys.argv[4]}\n")
            yaml.safe_dump(cfg, f, sort_keys=False)
    elif cmd == "fleet":
        with open(sys.argv[3], "w") as f:
            f.write("# member-a's kwok nodes for the Kueue benchmark: sum of the nominal quotas\n")
            yaml.safe_dump(fleet(load(sys.argv[2]), sys.argv[4]), f, sort_keys=False)
    elif cmd == "sim":
        overhead = int(sys.argv[5]) if len(sys.argv) > 5 else 0
        with open(sys.argv[3], "w") as f:
            f.write(f"# muster sim scenario of {sys.argv[2]}: run times + {overhead} ms\n")
            yaml.safe_dump(sim(load(sys.argv[2]), sys.argv[4], overhead), f, sort_keys=False)
    elif cmd == "tree":
        print(json.dumps(tree_root(load(sys.argv[2])), indent=1))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
