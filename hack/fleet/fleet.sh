#!/usr/bin/env bash
# Front for the fleet: `fleet.sh up|down|status|ports|env`. `up` builds first if needed.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cmd="${1:-}"; shift || true
case "$cmd" in
  up)
    if ! fleet_cache_ready; then
      fleet_log "no cached build $FLEET_BUILD_KEY for these pins and recipes: building first (see docs/development.md)"
      "$FLEET_HACK_DIR/build.sh"
    fi ;;
  down|status|ports) ;;
  env)
    # For humans: eval "$(hack/fleet/fleet.sh env)" puts the fleet's binaries on PATH.
    echo "export PATH=\"$FLEET_BIN:\$PATH\""
    echo "export MUSTER_FLEET_KUBECONFIGS=\"$FLEET_STATE/kubeconfigs\""
    exit 0 ;;
  *) fleet_die "usage: $0 up|down|status|ports|env" ;;
esac
command -v python3 >/dev/null || fleet_die "python3 is needed"
python3 -c 'import yaml' 2>/dev/null || fleet_die "python3 needs PyYAML (apt-get install python3-yaml)"
command -v openssl >/dev/null || fleet_die "openssl is needed"
export FLEET_BIN FLEET_CRDS FLEET_STAGES FLEET_JOBSET FLEET_TRAINER FLEET_STATE FLEET_REPO_ROOT FLEET_BUILD_KEY
exec python3 "$FLEET_HACK_DIR/fleet.py" "$cmd" "$@"
