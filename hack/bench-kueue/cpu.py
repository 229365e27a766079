"""CPU accounting of a benchmark's processes: every fleet process (by its pid file under the
fleet's state directory, named as the fleet names it, e.g. `hub/kube-apiserver`), the systems'
controllers, and this harness itself, read from /proc/<pid>/stat. A snapshot is cumulative
user + system seconds per process; the difference of two is what each spent in between."""

import os

TICK = os.sysconf("SC_CLK_TCK")


def fleet_pids(kubeconfigs):
    """{name: pid} of the fleet's processes (`$MUSTER_FLEET_STATE/pids/*.pid`)."""
    d = os.path.join(os.path.dirname(os.path.abspath(kubeconfigs)), "pids")
    out = {}
    for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if not f.endswith(".pid"):
            continue
        try:
            with open(os.path.join(d, f)) as fh:
                out[f[:-4].replace("_", "/", 1)] = int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return out


def seconds(pid):
    """User + system CPU seconds of `pid` and of its children it waited for; None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    v = s[s.rindex(")") + 2:].split()
    # After the command: state is field 3, utime 14, stime 15, cutime 16, cstime 17.
    return sum(int(x) for x in v[11:15]) / TICK


def snapshot(pids):
    """{name: cpu seconds} of `pids` ({name: pid}), and this harness's own under `harness`."""
    out = {name: seconds(pid) for name, pid in pids.items()}
    t = os.times()
    out["harness (python)"] = t.user + t.system
    return {k: v for k, v in out.items() if v is not None}


def spent(a, b):
    """{name: seconds} each process spent from snapshot `a` to snapshot `b`."""
    return {k: round(b[k] - a[k], 3) for k in b if k in a}


def per_job(window, idle_rate, seconds_long, jobs):
    """Milliseconds of CPU per job of each process over a window, raw and with what the same
    process spent per second while the fleet was idle taken away (never below zero)."""
    rows = {}
    for name, s in sorted(window.items(), key=lambda kv: -kv[1]):
        idle = idle_rate.get(name, 0.0) * seconds_long
        rows[name] = {"ms": round(s * 1000 / jobs, 2),
                      "msAboveIdle": round(max(0.0, s - idle) * 1000 / jobs, 2)}
    total = sum(window.values())
    idle = sum(idle_rate.get(k, 0.0) for k in window) * seconds_long
    return {"seconds": round(seconds_long, 2), "totalMs": round(total * 1000 / jobs, 2),
            "totalMsAboveIdle": round(max(0.0, total - idle) * 1000 / jobs, 2),
            "processes": rows}


def table(name, acc, top=10):
    """Lines for the log: a window's total and its largest processes."""
    lines = [f"{name}: {acc['seconds']} s, {acc['totalMs']} ms of CPU per job "
             f"({acc['totalMsAboveIdle']} above the idle fleet's)"]
    for p, r in list(acc["processes"].items())[:top]:
        lines.append(f"  {p:<40} {r['ms']:>8.2f} ms/job  {r['msAboveIdle']:>8.2f} above idle")
    return lines
