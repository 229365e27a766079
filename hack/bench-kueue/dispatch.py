#!/usr/bin/env python3
"""Dispatch across three members: N one-pod batch Jobs submitted to the hub at once, each run on
exactly one member, measured from submit to the job's creation in a member.

  dispatch.py muster     --kubeconfigs DIR --out DIR --muster BIN [--jobs 1000] [--creators 8]
  dispatch.py multikueue --kubeconfigs DIR --out DIR --kueue DIR  [--jobs 1000] [--creators 8]

Both sides get the same fleet (hub + member-a/b/c, `fleet-file` below), the same namespace on
the hub and on every member, and the same Jobs (one pod, 100m cpu, kwok completes it after 2 s),
created by CREATORS threads as fast as the hub takes them (a `kubectl create -f` of a List is
about this). Only how a Job is handed to the system differs:

- muster: the Job as a user writes it; muster's webhook suspends it, its tree (one leaf, quota
  for all) queues it, and muster creates it on one member.
- MultiKueue (Kueue's own manager, built from its module, on the hub and on each member): the Job
  with `kueue.x-k8s.io/queue-name`, created suspended and `spec.managedBy:
  kueue.x-k8s.io/multikueue` (what Kueue's Job webhook would set: its webhooks are not
  registered here, see docs/benchmarks.md), a ClusterQueue with the MultiKueue admission check
  on the hub and a ClusterQueue and LocalQueue of the same names on each member.

Measured per job: submit (just before the create is sent) and the first time a watch on any
member sees it (its `ADDED` event, this machine's clock), which member, and how many members
ever held it (must be 1 when the run settles). Writes OUT/summary.json and OUT/jobs.csv.
"""

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kube import Kube  # noqa: E402
from report import fmt  # noqa: E402
import cpu  # noqa: E402
from muster_run import (api_requests, diff_requests, free_port, http_ok, install_crds,  # noqa: E402
                        muster_crds, pct, register, wait, watch)

MEMBERS = ["member-a", "member-b", "member-c"]
NS = "bench-dispatch"
CTL_NS = "muster-system"
TREE = "bench-dispatch"
QUEUE = "bench-dispatch"


def log(msg):
    print(f"[bench-dispatch {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def fleet_file(jobs):
    """Three members, each with room for every job (so any choice is a good one)."""
    per = max(4, -(-jobs // 200))  # nodes of 250 pods each, with room to spare
    return {"clusters": [
        {"name": m, "labels": {"bench": "dispatch"},
         "nodes": [{"name": m[-1], "count": per,
                    "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "250"}}]}
        for m in MEMBERS]}


def job_manifest(i, system):
    m = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": f"job-{i:05d}", "namespace": NS},
        "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                 "template": {
                     "metadata": {"annotations": {
                         "pod-complete.stage.kwok.x-k8s.io/delay": "2s",
                         "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "2s"}},
                     "spec": {"restartPolicy": "Never",
                              "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                              "resources": {"requests": {"cpu": "100m"},
                                                            "limits": {"cpu": "100m"}}}]}}},
    }
    if system == "multikueue":
        m["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": QUEUE}
        m["spec"]["suspend"] = True
        m["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    return m


class Seen:
    """Per job: submitted, first seen on a member, and on which members it ever was."""

    def __init__(self, n):
        self.lock = threading.Lock()
        self.submit = [None] * n
        self.created = [None] * n
        self.member = [None] * n
        self.held_by = [set() for _ in range(n)]
        self.count = 0
        self.complete = set()
        self.complete_last = None
        # muster only: each QueuedJob's statuses as its watch saw them (state: reason).
        self.records = {}
        # Each hub Job's status changes (the keys that changed), as a watch saw them.
        self.hub_statuses = {}

    def on_queued_job(self, typ, obj, now):
        st = obj.get("status") or {}
        with self.lock:
            seq, last = self.records.setdefault(obj["metadata"]["name"], ([], {}))
            if st == last:
                return
            changed = sorted(k for k in set(st) | set(last) if st.get(k) != last.get(k))
            if "lifecycle" in changed:
                a, b = last.get("lifecycle") or {}, st.get("lifecycle") or {}
                changed.remove("lifecycle")
                changed += sorted(f"lifecycle.{k}" for k in set(a) | set(b) if a.get(k) != b.get(k))
            seq.append(f"{st.get('state')} [{','.join(changed)}]")
            last.clear()
            last.update(st)

    def on_member_job(self, cluster, typ, obj, now):
        name = obj["metadata"]["name"]
        if obj["metadata"].get("namespace") != NS or not name.startswith("job-"):
            return
        try:
            i = int(name[4:])
        except ValueError:
            return
        with self.lock:
            if i >= len(self.created):
                return
            if typ == "DELETED":
                self.held_by[i].discard(cluster)
                return
            self.held_by[i].add(cluster)
            if self.created[i] is None:
                self.created[i] = now
                self.member[i] = cluster
                self.count += 1

    def on_hub_job(self, typ, obj, now):
        """Counts the hub Jobs whose status says Complete (the system copied it back)."""
        name = obj["metadata"]["name"]
        if typ == "DELETED" or not name.startswith("job-"):
            return
        st = obj.get("status") or {}
        done = any(c.get("type") == "Complete" and c.get("status") == "True"
                   for c in st.get("conditions") or [])
        with self.lock:
            seq, last = self.hub_statuses.setdefault(name, ([], {}))
            if st != last:
                seq.append(",".join(sorted(k for k in set(st) | set(last)
                                           if st.get(k) != last.get(k))))
                last.clear()
                last.update(st)
            if done and name not in self.complete:
                self.complete.add(name)
                self.complete_last = now


def namespaces(kubes):
    for k in kubes:
        k.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": NS}}, exist_ok=True)


# -- muster -------------------------------------------------------------------------------------

def start_muster(a, hub, members, out):
    install_crds(hub, muster_crds(a.muster))
    hub.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": CTL_NS}}, exist_ok=True)
    for m, k in members.items():
        register(hub, CTL_NS, m, k)
    quota = {"cpu": "10000", "memory": "100Ti", "pods": "100000"}
    hub.apply(f"/apis/scheduling.sigs.k8s.io/v1beta1/namespaces/kube-system/elasticquotatrees/{TREE}", {
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
        "metadata": {"name": TREE, "namespace": "kube-system"},
        "spec": {"root": {"name": "root", "min": quota, "max": quota, "children": [
            {"name": QUEUE, "namespaces": [NS], "min": quota, "max": quota}]}}})
    http, webhook = free_port(), free_port()
    ctl_log = open(os.path.join(out, "controller.log"), "w")
    args = [a.muster, "controller", "--kubeconfig", os.path.join(a.kubeconfigs, "hub.kubeconfig"),
            "--namespace", CTL_NS, "--http-addr", f"127.0.0.1:{http}",
            "--webhook-addr", f"127.0.0.1:{webhook}", "--webhook-url", f"https://127.0.0.1:{webhook}/mutate",
            "--webhook-cert-dir", os.path.join(out, "webhook-certs"), "--instance", "bench-dispatch"]
    env = dict(os.environ, RUST_LOG=os.environ.get("BENCH_RUST_LOG", "info,kube=warn"))
    p = subprocess.Popen(args, stdout=ctl_log, stderr=subprocess.STDOUT, env=env)
    with open(os.path.join(out, "controller.pid"), "w") as f:
        f.write(f"{p.pid}\n")
    wait("controller /readyz", 120, lambda: p.poll() is None and http_ok(f"http://127.0.0.1:{http}/readyz"))
    for m in members:
        wait(f"{m} Ready", 120, lambda m=m: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (hub.get(f"/apis/muster.dev/v1alpha1/memberclusters/{m}").get("status") or {})
            .get("conditions") or []))

    def webhook_covers():
        mwc = hub.get("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/muster")
        exprs = mwc["webhooks"][0]["namespaceSelector"].get("matchExpressions") or []
        return any(e["operator"] == "In" and NS in (e.get("values") or []) for e in exprs)
    wait("the webhook to cover the namespace", 120, webhook_covers)
    return [p]


# -- MultiKueue ---------------------------------------------------------------------------------

def start_multikueue(a, hub, members, out):
    import multikueue
    return multikueue.start(a, hub, members, out, NS, QUEUE, quota_cpu="10000")


# -- the run ------------------------------------------------------------------------------------

IDLE_SECONDS = 5.0


def wait_for(a, procs, deadline, done, seen, pids):
    """Waits until `done()` (or the deadline), watching that no controller exited; returns the
    CPU snapshot and the time when it happened."""
    while time.time() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise SystemExit(f"{a.system}: a controller exited ({p.returncode}); see {a.out}")
        with seen.lock:
            if done():
                break
        time.sleep(0.2)
    return cpu.snapshot(pids), time.time()


def create_all(hub, n, creators, system, seen, errors):
    nxt = [0]
    lock = threading.Lock()

    def work():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= n:
                return
            body = job_manifest(i, system)
            seen.submit[i] = time.time()
            try:
                hub.create(f"/apis/batch/v1/namespaces/{NS}/jobs", body)
            except Exception as e:  # noqa: BLE001
                errors.append(f"job-{i:05d}: {e}")
    ts = [threading.Thread(target=work, daemon=True) for _ in range(creators)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def stop_all(procs):
    usage = []
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                _, _, ru = os.wait4(p.pid, 0)
                usage.append({"pid": p.pid, "userSeconds": ru.ru_utime, "sysSeconds": ru.ru_stime,
                              "maxRssKiB": ru.ru_maxrss})
            except ChildProcessError:
                p.wait()
    return usage


def report(a):
    """One table: muster against MultiKueue, with the ratio."""
    with open(os.path.join(a.muster_dir or a.muster, "summary.json")) as f:
        m = json.load(f)
    with open(os.path.join(a.multikueue, "summary.json")) as f:
        k = json.load(f)
    ctl = lambda s: sum(c["userSeconds"] + c["sysSeconds"] for c in s["controllers"])  # noqa: E731
    rows = [
        ("jobs seen on a member", k["seenOnMember"], m["seenOnMember"]),
        ("creating them on the hub (s)", k["createSeconds"], m["createSeconds"]),
        ("first submit → last created in a member (s)", k["spanSeconds"], m["spanSeconds"]),
        ("jobs dispatched / s", k["dispatchedPerSecond"], m["dispatchedPerSecond"]),
        ("submit → created in member, p50 (ms)", k["p50SubmitToMemberMs"], m["p50SubmitToMemberMs"]),
        ("submit → created in member, p99 (ms)", k["p99SubmitToMemberMs"], m["p99SubmitToMemberMs"]),
        ("submit → created in member, max (ms)", k["maxSubmitToMemberMs"], m["maxSubmitToMemberMs"]),
        ("jobs on more than one member at the end", k["onMoreThanOneMember"], m["onMoreThanOneMember"]),
        ("controller cpu, all processes (s)", ctl(k), ctl(m)),
        ("first submit → every hub Job Complete (s)", k.get("hubCompleteSeconds"),
         m.get("hubCompleteSeconds")),
        ("hub API requests per job", (k.get("apiRequestsPerJob") or {}).get("hub"),
         (m.get("apiRequestsPerJob") or {}).get("hub")),
    ]
    for w in ("dispatch", "lifecycle"):
        for key, label in (("totalMs", "ms"), ("totalMsAboveIdle", "ms above idle")):
            rows.append((f"fleet cpu per job, {w} window ({label})",
                         ((k.get("cpuPerJob") or {}).get(w) or {}).get(key),
                         ((m.get("cpuPerJob") or {}).get(w) or {}).get(key)))
    w = max(len(r[0]) for r in rows)
    lines = [" ".join(a.meta), f"{'figure':<{w}}  {'MultiKueue':>10}  {'muster':>10}  {'muster/MK':>9}"]
    for name, kv, mv in rows:
        ratio = f"{mv / kv:.2f}" if isinstance(kv, (int, float)) and isinstance(mv, (int, float)) and kv else "-"
        lines.append(f"{name:<{w}}  {fmt(kv):>10}  {fmt(mv):>10}  {ratio:>9}")
    text = "\n".join(lines)
    print(text)
    with open(a.out, "w") as f:
        f.write(text + "\n")


def busy_fraction(seconds):
    """The share of the machine's CPU time spent busy over the next `seconds` (/proc/stat)."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # all, idle + iowait
    a = sample()
    time.sleep(seconds)
    b = sample()
    return 1 - (b[1] - a[1]) / max(1, b[0] - a[0])


def wait_quiet(limit=0.25, window=3.0, timeout=120.0):
    """Waits (at most `timeout` s) until the machine was less than `limit` busy over `window` s:
    a fleet just started is still syncing its operators' caches, and "an idle fleet" is what the
    figure is for. Returns the last busy share measured."""
    deadline = time.time() + timeout
    while True:
        busy = busy_fraction(window)
        if busy < limit or time.time() > deadline:
            log(f"machine {busy:.0%} busy over {window:.0f}s"
                + ("" if busy < limit else f" (not quiet after {timeout:.0f}s; going on)"))
            return busy


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("system", choices=["muster", "multikueue", "fleet-file", "report"])
    ap.add_argument("--muster-dir", "--muster-out", dest="muster_dir")
    ap.add_argument("--multikueue")
    ap.add_argument("--meta", action="append", default=[])
    ap.add_argument("--kubeconfigs")
    ap.add_argument("--out")
    ap.add_argument("--muster")
    ap.add_argument("--kueue")
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--creators", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args()
    if a.system == "fleet-file":
        import yaml
        print("# hack/bench-kueue/dispatch.py: three members with room for every job")
        print(yaml.safe_dump(fleet_file(a.jobs), sort_keys=False), end="")
        return
    if a.system == "report":
        return report(a)
    os.makedirs(a.out, exist_ok=True)
    hub = Kube(os.path.join(a.kubeconfigs, "hub.kubeconfig"))
    members = {m: Kube(os.path.join(a.kubeconfigs, f"{m}.kubeconfig")) for m in MEMBERS}
    namespaces([hub, *members.values()])
    procs = []
    stop = threading.Event()
    try:
        procs = (start_muster if a.system == "muster" else start_multikueue)(a, hub, members, a.out)
        seen = Seen(a.jobs)
        for m, k in members.items():
            threading.Thread(target=watch, daemon=True, args=(
                k, f"/apis/batch/v1/namespaces/{NS}/jobs",
                lambda t, o, now, m=m: seen.on_member_job(m, t, o, now), stop)).start()
        threading.Thread(target=watch, daemon=True, args=(
            hub, f"/apis/batch/v1/namespaces/{NS}/jobs", seen.on_hub_job, stop)).start()
        if a.system == "muster":
            threading.Thread(target=watch, daemon=True, args=(
                hub, f"/apis/muster.dev/v1alpha1/namespaces/{NS}/queuedjobs",
                seen.on_queued_job, stop)).start()
        time.sleep(1)
        quiet = wait_quiet()
        pids = cpu.fleet_pids(a.kubeconfigs)
        names = ["muster"] if a.system == "muster" else [f"kueue {i}" for i in range(len(procs))]
        pids.update({n: p.pid for n, p in zip(names, procs)})
        # What every process spends per second while the fleet waits (the idle fleet).
        c_idle, t_idle = cpu.snapshot(pids), time.time()
        time.sleep(IDLE_SECONDS)
        idle_rate = {k: v / (time.time() - t_idle)
                     for k, v in cpu.spent(c_idle, cpu.snapshot(pids)).items()}
        req0 = {"hub": api_requests(hub), **{m: api_requests(k) for m, k in members.items()}}
        log(f"{a.system}: ready; creating {a.jobs} jobs with {a.creators} threads")
        errors = []
        c0 = cpu.snapshot(pids)
        t0 = time.time()
        create_all(hub, a.jobs, a.creators, a.system, seen, errors)
        t_created = time.time()
        log(f"{a.system}: {a.jobs - len(errors)} created in {t_created - t0:.1f}s ({len(errors)} errors)")
        deadline = time.time() + a.timeout
        expected = a.jobs - len(errors)
        # Window "dispatch": from the first submit to the last job created on a member.
        c1, t1 = wait_for(a, procs, deadline, lambda: seen.count >= expected, seen, pids)
        if seen.count < expected:
            log(f"{a.system}: timed out with {seen.count} of {a.jobs} seen on a member")
        # Window "lifecycle": on to every hub Job Complete (its member's status copied back).
        c2, t2 = wait_for(a, procs, deadline, lambda: len(seen.complete) >= expected, seen, pids)
        if len(seen.complete) < expected:
            log(f"{a.system}: timed out with {len(seen.complete)} of {a.jobs} Complete on the hub")
        cpu_windows = {
            "dispatch": cpu.per_job(cpu.spent(c0, c1), idle_rate, t1 - t0, max(1, expected)),
            "lifecycle": cpu.per_job(cpu.spent(c0, c2), idle_rate, t2 - t0, max(1, expected)),
        }
        for w, acc in cpu_windows.items():
            for line in cpu.table(w, acc):
                log(line)
        # Let duplicates (a job on two members at once) show, then take the settled view.
        time.sleep(5)
        requests = {"hub": diff_requests(req0["hub"], api_requests(hub)),
                    **{m: diff_requests(req0[m], api_requests(k)) for m, k in members.items()}}
    finally:
        stop.set()
        usage = stop_all(procs)
        if a.system == "multikueue":
            import multikueue
            multikueue.cleanup()
    with seen.lock:
        lat = [(c - s) * 1000 for s, c in zip(seen.submit, seen.created) if s and c]
        created = [c for c in seen.created if c]
        per_member = {m: sum(1 for x in seen.member if x == m) for m in MEMBERS}
        twice = sum(1 for h in seen.held_by if len(h) > 1)
        rows = list(zip(seen.submit, seen.created, seen.member, seen.held_by))
    first = min(s for s in seen.submit if s)
    span = (max(created) - first) if created else None
    summary = {
        "system": a.system, "jobs": a.jobs, "createErrors": len(errors),
        "createSeconds": t_created - t0,
        "seenOnMember": len(created),
        "spanSeconds": span,
        "dispatchedPerSecond": len(created) / span if span else None,
        "p50SubmitToMemberMs": pct(lat, 50), "p99SubmitToMemberMs": pct(lat, 99),
        "meanSubmitToMemberMs": sum(lat) / len(lat) if lat else None,
        "maxSubmitToMemberMs": max(lat) if lat else None,
        "perMember": per_member, "onMoreThanOneMember": twice,
        "hubCompleteSeconds": (seen.complete_last - first) if seen.complete_last else None,
        "apiRequests": requests,
        "apiRequestsPerJob": {c: round(sum(r.values()) / max(1, len(created)), 2)
                              for c, r in requests.items()},
        "cpuPerJob": cpu_windows, "controllers": usage,
        "load": os.getloadavg(), "busyBefore": quiet,
    }
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    def sequences(path, records):
        """Each object's status changes in order (figures as #), most common first."""
        import collections
        import re
        seqs = collections.Counter(
            " -> ".join(re.sub(r"[0-9]+", "#", r) for r in rs) for rs, _ in records.values())
        with open(path, "w") as f:
            for seq, n in seqs.most_common():
                f.write(f"{n:6d}  {seq}\n")
    sequences(os.path.join(a.out, "hubjob-statuses.txt"), seen.hub_statuses)
    if seen.records:
        # The QueuedJob statuses a job went through, most common sequences first.
        sequences(os.path.join(a.out, "queuedjob-statuses.txt"), seen.records)
    with open(os.path.join(a.out, "jobs.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["job", "ms submit to member", "member", "members holding it at the end"])
        for i, (s, c, m, h) in enumerate(rows):
            w.writerow([f"job-{i:05d}", round((c - s) * 1000) if s and c else "", m or "",
                        " ".join(sorted(h))])
    log(f"{a.system}: {len(created)} on a member, {summary['dispatchedPerSecond'] or 0:.1f}/s, "
        f"p50 {summary['p50SubmitToMemberMs'] or 0:.0f} ms, p99 {summary['p99SubmitToMemberMs'] or 0:.0f} ms, "
        f"on two members {twice}; {os.path.join(a.out, 'summary.json')}")


if __name__ == "__main__":
    main()
