# Shared by bench.sh and dispatch.sh (sourced, with BENCH_NAME set): where the benchmark fleet and
# the results live, logging, and starting and stopping the benchmark's own fleet.
#   BENCH_PORT_BASE=17400, BENCH_STATE=~/.cache/muster/bench-kueue/fleet-state
#                     the fleet's FLEET_PORT_BASE and MUSTER_FLEET_STATE (never the default fleet)
#   BENCH_RESULTS=~/.cache/muster/bench-kueue/results   one folder per run in there
#   BENCH_KEEP_FLEET=1  leave the benchmark fleet running afterwards

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE_ROOT="${MUSTER_BENCH_CACHE:-$HOME/.cache/muster/bench-kueue}"
export FLEET_PORT_BASE="${BENCH_PORT_BASE:-17400}"
export MUSTER_FLEET_STATE="${BENCH_STATE:-$CACHE_ROOT/fleet-state}"
RESULTS_ROOT="${BENCH_RESULTS:-$CACHE_ROOT/results}"
export PYTHONDONTWRITEBYTECODE=1   # no __pycache__ in the repo

log() { printf '[%s %s] %s\n' "$BENCH_NAME" "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[%s] ERROR: %s\n' "$BENCH_NAME" "$*" >&2; exit 1; }

[[ "$FLEET_PORT_BASE" != 16400 ]] || die "BENCH_PORT_BASE=16400 is the default fleet's; pick another"
[[ "$MUSTER_FLEET_STATE" != "$REPO/.fleet" ]] || die "BENCH_STATE must not be the default fleet's state"

# A fresh fleet from the fleet file $1 (fleet-up would reuse a healthy one, with the last run's
# jobs).
fresh_fleet() {
  FLEET_STARTED=1
  "$REPO/hack/fleet/fleet.sh" down >&2
  FLEET="$1" "$REPO/hack/fleet/fleet.sh" up >&2
}

# Stops the fleet fresh_fleet started (unless BENCH_KEEP_FLEET is set).
stop_fleet() {
  if [[ -n "${FLEET_STARTED:-}" && -z "${BENCH_KEEP_FLEET:-}" ]]; then
    log "stopping the benchmark fleet (FLEET_PORT_BASE=$FLEET_PORT_BASE)"
    "$REPO/hack/fleet/fleet.sh" down >&2 || true
  fi
}
