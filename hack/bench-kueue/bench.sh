#!/usr/bin/env bash
# `make bench-kueue`: Kueue's scheduler performance benchmark (baseline generator config) and the
# same workload through muster, side by side. See docs/benchmarks.md.
#
#   SCALE=10          divide every workloads set's count by SCALE (both sides; intervals, run
#                     times, requests and quotas kept). SCALE=1 is Kueue's full 15,000 workloads.
#   KUEUE_VERSION     default v0.17.1 (hack/bench-kueue/build.sh)
#   NODE_CPU=40       cpu of each kwok node of the member (the nodes add up to the quota)
#   BENCH_PORT_BASE=17400, BENCH_STATE=~/.cache/muster/bench-kueue/fleet-state
#                     the fleet's FLEET_PORT_BASE and MUSTER_FLEET_STATE (never the default fleet)
#   BENCH_RESULTS=~/.cache/muster/bench-kueue/results   one folder per run in there
#   BENCH_SIDES="kueue kueue-jobs member muster"   the sides to run: Kueue's benchmark
#                     (Workload objects only), Kueue's manager with the same workload as real
#                     Jobs on member-a (kueue_jobs.py), the member alone (the same Jobs created
#                     straight on member-a: the floor under both) and muster; e.g.
#                     BENCH_SIDES=muster
#   BENCH_KEEP_FLEET=1  leave the benchmark fleet running afterwards
#   MUSTER_ARGS       extra `muster controller` flags (e.g. "--resync-seconds 1")
#   MEMBER_KCM_QPS=200, MEMBER_JOB_SYNCS=20
#                     member-a's kube-controller-manager is restarted with --kube-api-qps (and
#                     burst 2x) and --concurrent-job-syncs so (its defaults, 20 and 5, complete
#                     about 5 Jobs/s and bound the muster side); MEMBER_KCM_QPS=0 keeps the fleet's
set -euo pipefail

BENCH_NAME=bench-kueue
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SCALE="${SCALE:-10}"
NODE_CPU="${NODE_CPU:-40}"
SIDES="${BENCH_SIDES:-kueue kueue-jobs member muster}"
# kwok moves 32 pods through their stages at once (its default, 4, made a 0.2 s pod take 6 s
# from bound to Succeeded on a busy member): hack/fleet/fleet.py.
export FLEET_KWOK_POD_PARALLELISM="${FLEET_KWOK_POD_PARALLELISM:-32}"

member_kcm() {
  if [[ "${MEMBER_KCM_QPS:-200}" != 0 ]]; then
    python3 "$HERE/member_kcm.py" "$MUSTER_FLEET_STATE" member-a "${MEMBER_KCM_QPS:-200}" "${MEMBER_JOB_SYNCS:-20}"
  fi
}

RUN="$RESULTS_ROOT/$(date -u +%Y%m%dT%H%M%SZ)-scale$SCALE"
mkdir -p "$RUN"
log "results: $RUN"
LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"

# 1. Kueue's runner and minimalkueue; the fleet's kube-apiserver and etcd as envtest's assets.
KUEUE="$("$HERE/build.sh")"
# shellcheck source=../fleet/lib.sh
FLEET_BIN="$(source "$REPO/hack/fleet/lib.sh"; if ! fleet_cache_ready; then "$REPO/hack/fleet/build.sh" >&2; fi; echo "$FLEET_BIN")"
ASSETS="$CACHE_ROOT/envtest-assets"
mkdir -p "$ASSETS"
ln -sfn "$(readlink -f "$FLEET_BIN/kube-apiserver")" "$ASSETS/kube-apiserver"
ln -sfn "$(readlink -f "$FLEET_BIN/etcd")" "$ASSETS/etcd"

# 2. The generator config, scaled.
python3 "$HERE/gen.py" scale "$KUEUE/configs/baseline/generator.yaml" "$RUN/generator.yaml" "$SCALE"
python3 "$HERE/gen.py" fleet "$RUN/generator.yaml" "$RUN/fleet.yaml" "$NODE_CPU"

cleanup() {
  local rc=$?
  if [[ -f "$RUN/muster/controller.pid" ]]; then
    local pid; pid="$(cat "$RUN/muster/controller.pid")"
    if kill -0 "$pid" 2>/dev/null && grep -q muster "/proc/$pid/cmdline" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
    fi
  fi
  stop_fleet
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ " $SIDES " == *" kueue "* ]]; then
  log "kueue: runner + minimalkueue in envtest (load $(cut -d' ' -f1 /proc/loadavg))"
  mkdir -p "$RUN/kueue"
  t=$SECONDS
  KUBEBUILDER_ASSETS="$ASSETS" "$KUEUE/bin/runner" --o "$RUN/kueue" --crds "$KUEUE/crds" \
    --generatorConfig "$RUN/generator.yaml" --minimalKueue "$KUEUE/bin/minimalkueue" \
    --withLogs=true --logToFile=true --timeout "${KUEUE_TIMEOUT:-30m}" >"$RUN/kueue/runner.log" 2>&1 \
    || die "Kueue's runner failed; see $RUN/kueue/runner.log"
  log "kueue: done in $((SECONDS - t))s"
fi

if [[ " $SIDES " == *" kueue-jobs "* ]]; then
  log "kueue, real Jobs: fleet up on port base $FLEET_PORT_BASE, state $MUSTER_FLEET_STATE"
  fresh_fleet "$RUN/fleet.yaml"
  member_kcm
  python3 "$HERE/kueue_jobs.py" --config "$RUN/generator.yaml" \
    --kubeconfigs "$MUSTER_FLEET_STATE/kubeconfigs" --kueue "$KUEUE" --out "$RUN/kueue-jobs"
fi

if [[ " $SIDES " == *" member "* ]]; then
  log "member alone: fleet up on port base $FLEET_PORT_BASE, state $MUSTER_FLEET_STATE"
  fresh_fleet "$RUN/fleet.yaml"
  member_kcm
  python3 "$HERE/floor.py" --config "$RUN/generator.yaml" \
    --kubeconfigs "$MUSTER_FLEET_STATE/kubeconfigs" --out "$RUN/member"
fi

if [[ " $SIDES " == *" muster "* ]]; then
  log "muster: cargo build --release"
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
  (cd "$REPO" && nice -n 10 cargo build --release --quiet)
  MUSTER="$CARGO_TARGET_DIR/release/muster"
  log "muster: fleet up on port base $FLEET_PORT_BASE, state $MUSTER_FLEET_STATE"
  fresh_fleet "$RUN/fleet.yaml"
  member_kcm
  # shellcheck disable=SC2086
  python3 "$HERE/muster_run.py" --config "$RUN/generator.yaml" \
    --kubeconfigs "$MUSTER_FLEET_STATE/kubeconfigs" --muster "$MUSTER" --out "$RUN/muster" \
    ${MUSTER_ARGS:+$(printf -- '--controller-arg=%s ' $MUSTER_ARGS)}
fi

if [[ " $SIDES " == *" kueue "* && " $SIDES " == *" muster "* ]]; then
  MEMBER_DIR="" KJ_DIR=""
  [[ ! -f "$RUN/member/summary.json" ]] || MEMBER_DIR="$RUN/member"
  [[ ! -f "$RUN/kueue-jobs/summary.json" ]] || KJ_DIR="$RUN/kueue-jobs"
  python3 "$HERE/report.py" --kueue "$RUN/kueue" --muster "$RUN/muster" --out "$RUN/summary.json" \
    ${MEMBER_DIR:+--member "$MEMBER_DIR"} ${KJ_DIR:+--kueue-jobs "$KJ_DIR"} \
    --meta "scale=$SCALE" --meta "kueue=$(cut -d' ' -f1 "$KUEUE/version")" \
    --meta "muster=$(git -C "$REPO" rev-parse --short HEAD)" \
    --meta "load_start=${LOAD_START// /,}" --meta "load_end=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)" \
    --meta "cores=$(nproc)" --meta "member_kcm_qps=${MEMBER_KCM_QPS:-200}" \
    --meta "member_job_syncs=${MEMBER_JOB_SYNCS:-20}" --meta "node_cpu=$NODE_CPU" --meta "kwok_pod_parallelism=$FLEET_KWOK_POD_PARALLELISM"
fi
log "results in $RUN"
