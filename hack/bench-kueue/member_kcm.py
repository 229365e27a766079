#!/usr/bin/env python3
"""Restarts one member's kube-controller-manager of a running fleet with higher client limits.

  member_kcm.py STATE MEMBER QPS JOB_SYNCS

The fleet runs kube-controller-manager with Kubernetes' defaults (--kube-api-qps 20, burst 30,
--concurrent-job-syncs 5): about 5 batch Jobs completed per second, which, not muster, bounds
the benchmark's muster side. This stops the process the fleet recorded (pid file in
STATE/pids/), starts the same binary with the same arguments plus --kube-api-qps=QPS
--kube-api-burst=2·QPS --concurrent-job-syncs=JOB_SYNCS, logging to the same file, and records
the new pid there, so `fleet.sh down` stops it as its own. Only this fleet's process is touched.
"""

import os
import signal
import subprocess
import sys
import time


def main():
    state, member, qps, syncs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    name = f"{member}_kube-controller-manager"
    pid_file = os.path.join(state, "pids", f"{name}.pid")
    log_file = os.path.join(state, "logs", f"{name}.log")
    with open(pid_file) as f:
        pid = int(f.read().strip())
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = [a.decode() for a in f.read().split(b"\0") if a]
    if not argv or os.path.basename(argv[0]) != "kube-controller-manager":
        sys.exit(f"{pid_file}: pid {pid} is not a kube-controller-manager")
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(kv.decode().split("=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    drop = ("--kube-api-qps", "--kube-api-burst", "--concurrent-job-syncs")
    args = [a for a in argv[1:] if not a.startswith(drop)]
    args += [f"--kube-api-qps={qps}", f"--kube-api-burst={2 * qps}", f"--concurrent-job-syncs={syncs}"]
    os.kill(pid, signal.SIGTERM)
    deadline = time.time() + 20
    while os.path.exists(f"/proc/{pid}") and time.time() < deadline:
        time.sleep(0.1)
    if os.path.exists(f"/proc/{pid}"):
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
    with open(log_file, "ab") as lf:
        lf.write(f"--- {time.strftime('%F %T')} (bench-kueue) {argv[0]} {' '.join(args)}\n".encode())
        lf.flush()
        proc = subprocess.Popen([argv[0]] + args, stdout=lf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, cwd=state, start_new_session=True)
    with open(pid_file, "w") as f:
        f.write(f"{proc.pid}\n")
    time.sleep(3)
    if proc.poll() is not None:
        sys.exit(f"{name} exited at once ({proc.returncode}); see {log_file}")
    print(f"{name}: pid {proc.pid}, --kube-api-qps={qps} --kube-api-burst={2 * qps} "
          f"--concurrent-job-syncs={syncs}", file=sys.stderr)


if __name__ == "__main__":
    main()
