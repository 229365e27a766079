#!/usr/bin/env bash
# `make bench-dispatch`: JOBS one-pod batch Jobs submitted to the hub at once and dispatched to
# three members, by muster and by Kueue's MultiKueue (Kueue's own manager on the hub and on each
# member), each on a fresh fleet of its own, one after the other. See docs/benchmarks.md.
#
#   JOBS=1000 CREATORS=8   jobs, and the threads creating them (as fast as the hub takes them)
#   BENCH_SIDES="muster multikueue"   run one side only with BENCH_SIDES=muster (or multikueue)
#   KUEUE_VERSION, BENCH_PORT_BASE, BENCH_STATE, BENCH_RESULTS, BENCH_KEEP_FLEET: as bench.sh
set -euo pipefail

BENCH_NAME=bench-dispatch
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
JOBS="${JOBS:-1000}"
CREATORS="${CREATORS:-8}"
SIDES="${BENCH_SIDES:-muster multikueue}"

RUN="$RESULTS_ROOT/$(date -u +%Y%m%dT%H%M%SZ)-dispatch$JOBS"
mkdir -p "$RUN"
log "results: $RUN"
python3 "$HERE/dispatch.py" fleet-file --jobs "$JOBS" >"$RUN/fleet.yaml"
FLEET_BIN="$(source "$REPO/hack/fleet/lib.sh"; if ! fleet_cache_ready; then "$REPO/hack/fleet/build.sh" >&2; fi; echo "$FLEET_BIN")"
[[ -n "$FLEET_BIN" ]] || die "no fleet build"

cleanup() {
  local rc=$?
  stop_fleet
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for side in $SIDES; do
  case "$side" in
    muster)
      export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
      (cd "$REPO" && nice -n 10 cargo build --release --quiet)
      fresh_fleet "$RUN/fleet.yaml"
      log "muster: load $(cut -d' ' -f1-3 /proc/loadavg)"
      python3 "$HERE/dispatch.py" muster --kubeconfigs "$MUSTER_FLEET_STATE/kubeconfigs" \
        --out "$RUN/muster" --muster "$CARGO_TARGET_DIR/release/muster" --jobs "$JOBS" --creators "$CREATORS"
      ;;
    multikueue)
      KUEUE="$("$HERE/build.sh")"
      fresh_fleet "$RUN/fleet.yaml"
      log "multikueue: load $(cut -d' ' -f1-3 /proc/loadavg)"
      python3 "$HERE/dispatch.py" multikueue --kubeconfigs "$MUSTER_FLEET_STATE/kubeconfigs" \
        --out "$RUN/multikueue" --kueue "$KUEUE" --jobs "$JOBS" --creators "$CREATORS"
      ;;
    *) die "unknown side $side (muster or multikueue)" ;;
  esac
done

if [[ " $SIDES " == *" muster "* && " $SIDES " == *" multikueue "* ]]; then
  python3 "$HERE/dispatch.py" report --muster "$RUN/muster" --multikueue "$RUN/multikueue" \
    --out "$RUN/summary.txt" --meta "jobs=$JOBS" --meta "creators=$CREATORS" \
    --meta "muster=$(git -C "$REPO" rev-parse --short HEAD)" --meta "cores=$(nproc)"
fi
log "results in $RUN"
