# shellcheck shell=bash
# Shared helpers for hack/fleet/*.sh. Source it; it sets FLEET_* variables.
set -euo pipefail

FLEET_HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
FLEET_REPO_ROOT="$(cd "$FLEET_HACK_DIR/../.." && pwd)"
# shellcheck source=versions.env
source "$FLEET_HACK_DIR/versions.env"

export GOTOOLCHAIN=local
export GOFLAGS="-mod=mod -buildvcs=false"

fleet_log() { printf '[fleet %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
fleet_die() { printf '[fleet] ERROR: %s\n' "$*" >&2; exit 1; }

# The cache key: the pinned versions (comments stripped) plus the Go toolchain version.
fleet_pins_hash() {
  { grep -Ev '^\s*(#|$)' "$FLEET_HACK_DIR/versions.env"; go env GOVERSION; } | sha256sum | cut -c1-16
}

FLEET_CACHE_ROOT="${MUSTER_FLEET_CACHE:-$HOME/.cache/muster/fleet}"
FLEET_PINS_HASH="$(fleet_pins_hash)"
FLEET_CACHE="$FLEET_CACHE_ROOT/$FLEET_PINS_HASH"
FLEET_BIN="$FLEET_CACHE/bin"
FLEET_CRDS="$FLEET_CACHE/crds"
FLEET_STAGES="$FLEET_CACHE/kwok-stages"
FLEET_JOBSET="$FLEET_CACHE/jobset"
FLEET_STATE="${MUSTER_FLEET_STATE:-$FLEET_REPO_ROOT/.fleet}"
FLEET_MEMBERS=(member-a member-b member-c)
FLEET_CLUSTERS=(hub "${FLEET_MEMBERS[@]}")
